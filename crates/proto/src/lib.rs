//! Muster's gRPC contract, generated from `proto/muster/v1` at build time.
//!
//! # Layout
//!
//! * [`v1`]: the generated messages and services.
//! * [`etcd`]: a client of etcd's put, for `muster bench etcd`.
//! * [`auth`]: the cluster secret, role credentials and the check in front of every service.
//! * [`convert`]: every conversion between messages and Muster's own types.
//! * [`exit`]: exit codes that say more than a program's own.
//! * [`discovery`]: the one way to find the leading master.
//! * [`masters`]: the masters a client talks to, and calls that find the one that answers.
//! * [`rest_token`]: the tokens of the Spark REST gateway.
//! * [`transport`]: every connection, plain or TLS against the cluster's CA.

pub mod auth;
pub mod convert;
pub mod discovery;
pub mod exit;
pub mod masters;
pub mod rest_token;
pub mod transport;

/// The put of etcd's v3 KV API (package `etcdserverpb`), to measure etcd beside Muster.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod etcd {
    tonic::include_proto!("etcdserverpb");
}

/// Package `muster.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("muster.v1");

    impl Register {
        /// This registration carrying `changes` again, the process changes no leader has
        /// acknowledged yet, oldest first: executors' and drivers' apart (nothing else is a
        /// process change).
        pub fn unacknowledged<'c>(
            mut self,
            changes: impl IntoIterator<Item = &'c worker_message::Body>,
        ) -> Self {
            for change in changes {
                match change {
                    worker_message::Body::Executor(update) => {
                        self.executor_updates.push(update.clone());
                    }
                    worker_message::Body::Driver(update) => {
                        self.driver_updates.push(update.clone());
                    }
                    worker_message::Body::Register(_)
                    | worker_message::Body::Heartbeat(_)
                    | worker_message::Body::LogChunk(_) => {}
                }
            }
            self
        }
    }

    impl StatusRequest {
        /// The leader's status with no driver in it, only their counts: for callers that
        /// read the members, workers, applications or queues of a cluster that may hold a
        /// great many drivers.
        pub fn without_drivers() -> Self {
            Self::drivers_from("", 0)
        }

        /// The leader's status with `limit` drivers, from driver `from` on in id order.
        pub fn drivers_from(from: &str, limit: u32) -> Self {
            Self {
                local: false,
                drivers: Some(Page {
                    limit,
                    from: from.to_owned(),
                }),
            }
        }
    }
}

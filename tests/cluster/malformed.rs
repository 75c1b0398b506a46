//! Malformed gRPC requests, sent straight to a master: each is refused with a clear status and
//! changes nothing.

use muster_proto::auth::{Role, Secret};
use muster_proto::v1::app_link_client::AppLinkClient;
use muster_proto::v1::app_message::Body as AppBody;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::worker_link_client::WorkerLinkClient;
use muster_proto::v1::worker_message::Body as WorkerBody;
use muster_proto::v1::{
    AppMessage, Heartbeat, KillRequest, Register, RegisterApp, Resources, SubmitDriverRequest,
    WorkerMessage,
};
use tonic::Code;

use crate::support::{Masters, credential, dialer, driver_request, secret_file};

fn leader_addr(masters: &Masters) -> String {
    let leader = masters.leader(0);
    masters.addrs[leader as usize - 1].clone()
}

async fn refused<T: std::fmt::Debug>(
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> (Code, String) {
    let status = call.await.expect_err("the request should be refused");
    (status.code(), status.message().to_owned())
}

#[test]
fn malformed_requests_are_refused_and_change_nothing() {
    let masters = Masters::start();
    let addr = leader_addr(&masters);
    let before = masters.status(&masters.list_from(1));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let channel = dialer().endpoint(&addr).unwrap().connect().await.unwrap();
        let mut cluster =
            ClusterClient::with_interceptor(channel.clone(), credential(Role::Client));
        let driver = driver_request();
        assert_eq!(
            refused(cluster.submit_driver(SubmitDriverRequest {
                resources: Some(Resources {
                    cores: 0,
                    memory_mb: 1,
                    ..Default::default()
                }),
                ..driver.clone()
            }))
            .await,
            (Code::InvalidArgument, "cores: must be at least 1".into())
        );
        assert_eq!(
            refused(cluster.submit_driver(SubmitDriverRequest {
                command: String::new(),
                ..driver.clone()
            }))
            .await,
            (Code::InvalidArgument, "command: must not be empty".into())
        );
        // Hostile sizes are refused by field, before they cost anything.
        let hostile = [
            (
                SubmitDriverRequest {
                    name: "n".repeat(257),
                    ..driver.clone()
                },
                "name: a name longer than 256 bytes",
            ),
            (
                SubmitDriverRequest {
                    args: vec!["a".repeat(40 * 1024), "b".repeat(30 * 1024)],
                    ..driver.clone()
                },
                "args: the command, arguments and environment come to 71689 bytes, more than \
                 65536 (the arguments: 71680)",
            ),
            (
                SubmitDriverRequest {
                    env: [("BIG".to_owned(), "e".repeat(100 * 1024))].into(),
                    ..driver.clone()
                },
                "env: the command, arguments and environment come to 102412 bytes, more than \
                 65536 (the environment: 102403)",
            ),
            (
                SubmitDriverRequest {
                    resources: Some(Resources {
                        cores: (1 << 20) + 1,
                        memory_mb: 1,
                        ..Default::default()
                    }),
                    ..driver.clone()
                },
                "cores: must be at most 1048576",
            ),
            (
                SubmitDriverRequest {
                    resources: Some(Resources {
                        cores: 1,
                        memory_mb: 1,
                        custom: (0..65).map(|i| (format!("r{i}"), 1)).collect(),
                    }),
                    ..driver.clone()
                },
                "resources: at most 64 kinds of resource",
            ),
            (
                SubmitDriverRequest {
                    resources: Some(Resources {
                        cores: 1,
                        memory_mb: 1,
                        custom: [("gpu".to_owned(), 4_000_000_000)].into(),
                    }),
                    ..driver.clone()
                },
                "resources.gpu: must be at most 4096",
            ),
        ];
        for (request, message) in hostile {
            assert_eq!(
                refused(cluster.submit_driver(request)).await,
                (Code::InvalidArgument, message.into())
            );
        }
        // A message over 4 MiB is not even read.
        let (code, message) = refused(cluster.submit_driver(SubmitDriverRequest {
            args: vec!["x".repeat(5 * 1024 * 1024)],
            ..driver.clone()
        }))
        .await;
        assert_eq!(code, Code::OutOfRange, "{message}");
        assert_eq!(
            refused(cluster.submit_driver(SubmitDriverRequest {
                queue: "nightly".into(),
                ..driver
            }))
            .await,
            (Code::InvalidArgument, "unknown queue `nightly`".into())
        );
        assert_eq!(
            refused(cluster.kill(KillRequest {
                request_id: String::new(),
                id: String::new()
            }))
            .await
            .0,
            Code::NotFound
        );

        let mut workers =
            WorkerLinkClient::with_interceptor(channel.clone(), credential(Role::Worker));
        let heartbeat_first = WorkerMessage {
            body: Some(WorkerBody::Heartbeat(Heartbeat::default())),
        };
        assert_eq!(
            refused(workers.attach(tokio_stream::iter([heartbeat_first]))).await,
            (Code::InvalidArgument, "a worker must register first".into())
        );
        let no_cores = Register {
            worker_id: "w".into(),
            capacity: Some(Resources {
                cores: 0,
                memory_mb: 1024,
                ..Default::default()
            }),
            ..Default::default()
        };
        let register = WorkerMessage {
            body: Some(WorkerBody::Register(no_cores)),
        };
        assert_eq!(
            refused(workers.attach(tokio_stream::iter([register]))).await,
            (Code::InvalidArgument, "cores: must be at least 1".into())
        );

        let mut apps = AppLinkClient::with_interceptor(channel, credential(Role::Client));
        let app = RegisterApp {
            executor_memory_mb: 0,
            command: "/bin/true".into(),
            ..Default::default()
        };
        let register = AppMessage {
            body: Some(AppBody::Register(app)),
        };
        assert_eq!(
            refused(apps.run(tokio_stream::iter([register]))).await,
            (
                Code::InvalidArgument,
                "executor_memory_mb: must be at least 1".into()
            )
        );
        // An app that never existed, with the token its id would have: not found.
        let unknown = "app-19700101000000-0042";
        let reattach = RegisterApp {
            app_id: unknown.into(),
            app_token: Secret::read(secret_file())
                .unwrap()
                .tokens()
                .app_token(unknown),
            ..Default::default()
        };
        let register = AppMessage {
            body: Some(AppBody::Register(reattach)),
        };
        assert_eq!(
            refused(apps.run(tokio_stream::iter([register]))).await.0,
            Code::NotFound
        );
    });
    let after = masters.status(&masters.list_from(1));
    for part in ["workers", "apps", "drivers", "queues"] {
        assert_eq!(before[part], after[part], "{part} changed");
    }
}

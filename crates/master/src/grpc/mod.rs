//! The master's gRPC side: what workers, applications and clients call, each call checked
//! against the caller's credential before it is read.
//!
//! * `workers` and `apps`: the worker and application streams, each message turned into a
//!   leader event by [`wire`], which also turns client requests into log ops.
//! * `client`: the client API, forwarded by followers to the leader.
//! * `call`: client writes as commands, and every call failure as one gRPC status.
//! * `callers`: who calls, from their credential (the cluster's, a named user's, an app's).
//! * `rpc`: counts every gRPC call into the metrics.

pub(crate) mod apps;
pub(crate) mod call;
pub(crate) mod callers;
pub(crate) mod client;
pub(crate) mod rpc;
pub mod wire;
pub(crate) mod workers;

//! The master's HTTP side: the status pages and their JSON, the metrics, sign-in, and Spark's
//! REST submission gateway.
//!
//! * [`view`], `ui` and `http`: the status as JSON, its pages, and the HTTP endpoint;
//!   `history` keeps the queues' use over time for the charts, `signin` the pages' sessions.
//! * [`listener`]: the HTTP endpoints' connections, plain or TLS.
//! * `submission` and `spark_rest`: Spark's REST submission protocol, and the gateway that
//!   serves it.
//! * [`metrics`]: the Prometheus metrics `http` serves at `/metrics`.

pub(crate) mod history;
pub(crate) mod http;
pub mod listener;
pub mod metrics;
pub(crate) mod signin;
pub mod spark_rest;
pub mod submission;
pub(crate) mod ui;
pub mod view;

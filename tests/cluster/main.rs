//! End-to-end tests with real `muster` processes: masters, workers and the CLI.

mod admission;
mod apps;
mod auth;
mod bench;
mod book;
mod clients;
mod deploy;
mod dev;
mod experiment;
mod jobs;
mod logs;
mod malformed;
mod masters;
mod queues;
// Shared by every end-to-end test binary; each uses part of it.
#[allow(dead_code)]
#[path = "../support.rs"]
mod support;
mod ui;
mod users;
mod workers;

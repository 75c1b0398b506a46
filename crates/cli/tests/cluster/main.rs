//! End-to-end tests with real `muster` processes: masters, workers and the CLI.

mod apps;
mod dev;
mod malformed;
mod masters;
mod support;
mod workers;

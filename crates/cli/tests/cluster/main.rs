//! End-to-end tests with real `muster` processes: masters, workers and the CLI.

mod masters;
mod support;
mod workers;

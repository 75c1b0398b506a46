//! One module per subcommand, and what they share: the masters argument, the async runtime,
//! the stop signal and logging.

pub mod app;
pub mod dev;
pub mod kill;
pub mod master;
pub mod plan;
pub mod queues;
pub mod status;
pub mod submit;
pub mod worker;

use std::io::IsTerminal;

use clap::Args;

use crate::client::Masters;
use crate::error::CliError;

/// Where the masters are, for every client command.
#[derive(Args)]
pub struct MastersArg {
    /// The masters, `HOST:PORT,...`; any one that answers will do.
    #[arg(long, env = "MUSTER_MASTERS")]
    pub masters: String,
}

impl MastersArg {
    /// The masters named.
    ///
    /// # Errors
    ///
    /// The list is empty.
    pub fn parse(&self) -> Result<Masters, CliError> {
        Masters::parse(&self.masters)
    }
}

/// What names a driver or an application, and the queue it runs in.
#[derive(Args)]
pub struct WorkArgs {
    /// A name for people.
    #[arg(long, default_value = "")]
    pub name: String,
    /// The queue to run in.
    #[arg(long, default_value = "default")]
    pub queue: String,
}

/// A multi-threaded runtime for one command.
///
/// # Errors
///
/// The runtime cannot start.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start: {e}")))
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn stop_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

/// Logs to standard error, `info` by default (`RUST_LOG` overrides).
pub fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// The program and its arguments given after `--`.
///
/// # Errors
///
/// Nothing was given.
pub fn program(command: &[String]) -> Result<(&String, &[String]), CliError> {
    command
        .split_first()
        .ok_or_else(|| CliError::BadInput("no command given after `--`".to_owned()))
}

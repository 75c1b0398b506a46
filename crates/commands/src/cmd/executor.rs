//! `muster executor`: what workers start for a driver's application; not for people. It
//! reads who it is from its environment (`MUSTER_DRIVER`, `MUSTER_DRIVER_CREDENTIAL`,
//! `MUSTER_DRIVER_CA`,
//! `MUSTER_EXECUTOR_ID`, `MUSTER_CORES`, `MUSTER_HOST`, `MUSTER_RACK`) and runs tasks until
//! its driver lets go ([`muster_driver::executor`]).

use muster_driver::executor::{CA_VARIABLE, CREDENTIAL_VARIABLE, DRIVER_VARIABLE, ExecutorConfig};
use muster_proto::auth::Credential;

use super::{LogFormat, log_to_stderr, runtime};
use crate::error::CliError;

/// Runs the executor.
///
/// # Errors
///
/// Its environment is incomplete, or its driver cannot be reached.
pub fn run() -> Result<String, CliError> {
    log_to_stderr(LogFormat::Text);
    let variable = |name: &str| {
        std::env::var(name)
            .map_err(|_| CliError::BadInput(format!("{name} is not set: workers start executors")))
    };
    let number = |name: &str| {
        variable(name)?
            .parse::<u32>()
            .map_err(|_| CliError::BadInput(format!("{name} is not a number")))
    };
    let credential = Credential::from_text(&variable(CREDENTIAL_VARIABLE)?)
        .map_err(|e| CliError::BadInput(format!("{CREDENTIAL_VARIABLE}: {e}")))?;
    let config = ExecutorConfig {
        driver: variable(DRIVER_VARIABLE)?,
        credential,
        driver_ca: variable(CA_VARIABLE)?,
        executor_id: number("MUSTER_EXECUTOR_ID")?,
        host: variable("MUSTER_HOST")?,
        rack: std::env::var("MUSTER_RACK").unwrap_or_default(),
        cores: number("MUSTER_CORES")?,
    };
    runtime()?
        .block_on(muster_driver::executor::run(config))
        .map_err(|e| CliError::Unavailable(e.to_string()))?;
    Ok(String::new())
}

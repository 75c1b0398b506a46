//! The command's one error type: what went wrong, and the exit code that tells a script
//! what to do about it (the book, "Bad input and exit codes").

use muster_bench::BenchError;
use muster_driver::app::LinkError;
use muster_leader::config::ConfigError;
use muster_master::MasterError;
use muster_proto::masters::MastersError;
use tonic::{Code, Status};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The arguments, a file or the request are malformed: fix them. Exit 2.
    #[error("{0}")]
    BadInput(String),
    /// The masters refused the request: it names something unknown or does not apply now.
    /// Exit 3.
    #[error("{0}")]
    Refused(String),
    /// No master or leader answered in time: try again later. Exit 4.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else: a master or worker that failed while running, an I/O error. Exit 1.
    #[error("{0}")]
    Failed(String),
    /// A driver followed to its end did not finish well: exit with its code.
    #[error("{message}")]
    DriverEnded {
        /// What ended it.
        message: String,
        /// The exit code to pass on (never 0).
        code: u8,
    },
}

impl CliError {
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Failed(_) => 1,
            Self::BadInput(_) => 2,
            Self::Refused(_) => 3,
            Self::Unavailable(_) => 4,
            Self::DriverEnded { code, .. } => *code,
        }
    }

    /// The same error, with the same exit code, saying `message` instead.
    pub fn with_message(&self, message: String) -> Self {
        match self {
            Self::Failed(_) => Self::Failed(message),
            Self::BadInput(_) => Self::BadInput(message),
            Self::Refused(_) => Self::Refused(message),
            Self::Unavailable(_) => Self::Unavailable(message),
            Self::DriverEnded { code, .. } => Self::DriverEnded {
                message,
                code: *code,
            },
        }
    }
}

impl From<Status> for CliError {
    fn from(status: Status) -> Self {
        let message = status.message().to_owned();
        match status.code() {
            Code::InvalidArgument | Code::OutOfRange => Self::BadInput(message),
            Code::NotFound
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::Aborted => Self::Refused(message),
            // A busy leader's refusal outlasted the client's patience: try again later.
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::ResourceExhausted => Self::Unavailable(message),
            _ => Self::Failed(message),
        }
    }
}

impl From<ConfigError> for CliError {
    fn from(error: ConfigError) -> Self {
        Self::BadInput(error.to_string())
    }
}

impl From<MasterError> for CliError {
    fn from(error: MasterError) -> Self {
        match error {
            MasterError::NotAPeer(_)
            | MasterError::AddressMismatch { .. }
            | MasterError::ClientSecretAlone => Self::BadInput(error.to_string()),
            _ => Self::Failed(error.to_string()),
        }
    }
}

impl From<MastersError> for CliError {
    fn from(error: MastersError) -> Self {
        match error {
            MastersError::Empty => Self::BadInput(
                "no masters given: use --masters HOST:PORT,... or MUSTER_MASTERS".to_owned(),
            ),
            MastersError::NotHostPort(_) => Self::BadInput(format!("--masters: {error}")),
        }
    }
}

impl From<BenchError> for CliError {
    fn from(error: BenchError) -> Self {
        match error {
            BenchError::BadInput(message) => Self::BadInput(message),
            BenchError::Refused(message) => Self::Refused(message),
            BenchError::Unavailable(message) => Self::Unavailable(message),
            BenchError::Call(status) => status.into(),
            BenchError::Failed(message) => Self::Failed(message),
        }
    }
}

impl From<LinkError> for CliError {
    fn from(error: LinkError) -> Self {
        match error {
            LinkError::Refused(status) => status.into(),
            LinkError::Unavailable(message) => Self::Unavailable(message),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(error: std::io::Error) -> Self {
        Self::Failed(error.to_string())
    }
}

//! What can go wrong in a command, and the exit code each means.

use shardbox_admin::AdminError;
use shardbox_core::StorageError;
use std::process::ExitCode;
use thiserror::Error;

/// A command's failure. Storage errors print the library's own text.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CliError {
    /// No database was given.
    #[error("no database given: pass --db <postgres://… URL or SQLite path>, or set SHARDBOX_DB")]
    NoDatabase,
    /// The arguments are valid for clap but not together.
    #[error("{0}")]
    Usage(String),
    /// A check failed, or nothing matched what the command was asked to act on.
    #[error("{0}")]
    NotFound(String),
    /// The database could not be reached, or refused the operation.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Output could not be written or encoded.
    #[error("could not write the output: {0}")]
    Output(#[source] std::io::Error),
}

impl CliError {
    /// The process's exit code: 1 check failed or nothing matched, 2 usage, 3 database.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CliError::NotFound(_) => 1,
            CliError::NoDatabase | CliError::Usage(_) => 2,
            // Nothing to act on: the job already ended.
            CliError::Storage(StorageError::CatchUpNotRunning { .. }) => 1,
            // Refused in the library's words: another job runs on these targets.
            CliError::Storage(StorageError::CatchUpOverlap { .. }) => 1,
            // Refused, nothing changed: another re-sharding runs, or nodes did not hand over.
            CliError::Storage(StorageError::ReshardRefused { .. }) => 1,
            CliError::Storage(_) => 3,
            CliError::Output(_) => 1,
        })
    }
}

impl CliError {
    /// Whether this is a write to a closed output: the reader of a pipe stopped reading
    /// (`shardbox … | head -1`), which is no failure of the command.
    pub fn is_closed_output(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

impl From<AdminError> for CliError {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::NotFound(text) => CliError::NotFound(text),
            AdminError::Refused(text) => CliError::Usage(text),
            AdminError::Storage(e) => CliError::Storage(e),
            other => CliError::Usage(other.to_string()),
        }
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::Output(e.into())
    }
}

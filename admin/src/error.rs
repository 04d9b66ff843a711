//! What can go wrong in a view or an operator action, in words both the CLI and the HTTP
//! API print: the storage's own errors, nothing matched, or a request refused before any
//! write.

use shardbox_core::StorageError;
use thiserror::Error;

/// A view's or an action's failure.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AdminError {
    /// Nothing matched what was asked for (an id that is not there, a target not blocked).
    #[error("{0}")]
    NotFound(String),
    /// The request was refused before anything was written (a write over every dead letter
    /// without `all`, a value out of range); the text says what to give instead.
    #[error("{0}")]
    Refused(String),
    /// The database could not be reached, or refused the operation.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

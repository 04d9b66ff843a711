//! What can go wrong in a view or an operator action, in words both the CLI and the HTTP
//! API print: the storage's own errors, nothing matched, or a request refused before any
//! write.

use shardbox_core::{DeliveryError, StorageError};
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

impl From<DeliveryError> for AdminError {
    /// An operator action's refusal (`shardbox_core::operator`) in the surface's terms: the
    /// storage's own errors stay themselves, nothing found is [`AdminError::NotFound`], and
    /// every other refusal (an id outside the id rules, rows a tool cannot place) is
    /// [`AdminError::Refused`] in the library's words.
    fn from(e: DeliveryError) -> Self {
        match e {
            DeliveryError::Storage(e) => AdminError::Storage(e),
            e @ DeliveryError::NotFound { .. } => AdminError::NotFound(e.to_string()),
            other => AdminError::Refused(other.to_string()),
        }
    }
}

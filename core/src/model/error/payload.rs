//! [`PayloadError`]: a stored payload that could not be read as the type asked for.

use thiserror::Error;

/// A stored payload could not be read as the type asked for (see `payload_as` on
/// `NewMessage`, `NewEvent` and `DeadLetter`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The stored type name is not the asked type's `Message::TYPE`.
    #[error("payload of type `{stored}` cannot be read as `{expected}`; read it as the type whose Message::TYPE is `{stored}`")]
    WrongType {
        /// The type name stored with the payload.
        stored: String,
        /// The asked type's `Message::TYPE`.
        expected: &'static str,
    },
    /// The type names match but the bytes do not deserialize into the type (it changed
    /// incompatibly since the payload was written).
    #[error("payload of type `{expected}` does not deserialize: {source}")]
    Undecodable {
        /// The asked (and stored) type name.
        expected: &'static str,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// The payload is stored at another version of its type and could not be upcast to the
    /// version the code reads (no upcaster, a failing one, or newer code wrote it).
    #[error(transparent)]
    Upcast(#[from] crate::model::upcast_error::UpcastError),
}

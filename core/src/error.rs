//! The errors of shardbox-core. Each message says what went wrong and what to do about it.

use crate::ids::{InvalidId, LeaseEpoch, ShardIndex};
use thiserror::Error;

/// A configuration value was rejected when the delivery was built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field holds a value outside its valid range.
    #[error("invalid configuration: `{field}` = {value}: {reason}")]
    Invalid {
        /// Name of the configuration field, as in the builder method.
        field: &'static str,
        /// The rejected value, printed.
        value: String,
        /// What the valid range is.
        reason: &'static str,
    },
    /// Something required was not given.
    #[error("invalid configuration: `{field}` is missing: {reason}")]
    Missing {
        /// Name of the missing piece.
        field: &'static str,
        /// How to give it.
        reason: &'static str,
    },
    /// The same entity kind was registered twice.
    #[error("entity kind `{kind}` is registered twice; give each entity type its own KIND")]
    DuplicateKind {
        /// The kind.
        kind: String,
    },
}

/// A storage backend could not do what was asked.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The shard's lease moved to another owner (or expired and was taken) since this worker
    /// picked it up; nothing of the commit was written. The new owner redelivers.
    #[error("lease of shard {shard} lost: this worker held epoch {held}, the registry now has {current:?}; nothing was written, the current owner redelivers")]
    LeaseLost {
        /// The shard.
        shard: ShardIndex,
        /// The epoch this worker held.
        held: LeaseEpoch,
        /// The epoch the registry holds now, if any.
        current: Option<LeaseEpoch>,
    },
    /// The database cannot be reached or opened.
    #[error("database {database} is unavailable: {reason}. Check that it is running and reachable, and the URL or path")]
    Unavailable {
        /// The database (URL with the password redacted, or file path).
        database: String,
        /// What the driver said.
        reason: String,
    },
    /// The database refuses writes (read-only file, full disk, permissions).
    #[error(
        "database {database} refuses writes: {reason}. Check free disk space and file permissions"
    )]
    ReadOnly {
        /// The database.
        database: String,
        /// What the driver said.
        reason: String,
    },
    /// The database schema is of another version than this binary expects.
    #[error("database {database} has schema {found}, this binary expects {expected}: {advice}")]
    SchemaMismatch {
        /// The database.
        database: String,
        /// The schema version found.
        found: String,
        /// The schema version expected.
        expected: String,
        /// What to do.
        advice: &'static str,
    },
    /// A stored value could not be read back (a corrupt row or a schema edited by hand).
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// A query failed.
    #[error("database {database}: query failed: {reason}")]
    Query {
        /// The database.
        database: String,
        /// What the driver said.
        reason: String,
    },
    /// A catch-up was refused because it overlaps a running one.
    #[error("a catch-up of `{projection_kind}` overlapping these targets is already running (job {running_job}); wait for it to complete or choose other ids")]
    CatchUpOverlap {
        /// The projection kind.
        projection_kind: String,
        /// The running job's id.
        running_job: i64,
    },
    /// A blocking storage task could not complete (the runtime is shutting down).
    #[error("storage task did not complete: {0}")]
    Task(String),
}

/// Delivery, sending or a station failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The storage backend failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An id given to a send or a post is outside its limits (see [`crate::ids`]); nothing was
    /// written.
    #[error("invalid input, nothing was written: {0}")]
    InvalidInput(#[from] InvalidId),
    /// A message was sent to an entity kind that nobody registered.
    #[error("entity kind `{kind}` is not registered; register it with the builder (`.aggregate::<T>()`, `.projection::<T>()` or `.reactor::<T>()`) before sending to it")]
    UnknownKind {
        /// The kind.
        kind: String,
    },
    /// An event was posted that no registered kind subscribes to.
    #[error("no registered entity subscribes to event type `{event_type}`; the event was stored but goes nowhere")]
    NoSubscriber {
        /// The event type.
        event_type: String,
    },
    /// A subscriber could not route a posted event (its `route` failed); nothing was written.
    #[error("`{kind}` could not route event of type `{event_type}`: {reason}; nothing was written — fix the event or the subscriber's route")]
    Unroutable {
        /// The subscribing kind.
        kind: String,
        /// The event type.
        event_type: String,
        /// Why.
        reason: String,
    },
    /// A payload could not be serialized.
    #[error("payload of type `{payload_type}` could not be serialized: {reason}")]
    Serialize {
        /// The payload's type name.
        payload_type: String,
        /// What serde said.
        reason: String,
    },
    /// A station failed in a way that aborts the stage (nothing of the stage is committed).
    #[error("station `{station}` failed: {reason}")]
    Station {
        /// The station's name.
        station: String,
        /// What went wrong.
        reason: String,
    },
    /// The delivery was shut down.
    #[error("delivery is shut down")]
    ShutDown,
}

impl DeliveryError {
    /// Whether this error means the worker lost its shard (and should simply move on).
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, DeliveryError::Storage(StorageError::LeaseLost { .. }))
    }
}

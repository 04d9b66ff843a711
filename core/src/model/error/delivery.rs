//! [`DeliveryError`]: delivery, sending or a station failed.

use super::kind_list;
use super::{ConfigError, PayloadError, StorageError};
use crate::model::ids::{InvalidId, ShardIndex};
use crate::model::payload_limit::PayloadTooLarge;
use crate::model::time_limits::InvalidTime;
use thiserror::Error;

/// Delivery, sending or a station failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The storage backend failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A framework-kept state could not be read as the code's state type: it could not be
    /// upcast from its stored version, or it does not deserialize.
    #[error("stored state of `{kind}` (tenant {tenant:?}, id {id:?}, state version {version}) cannot be read: {reason}. If the state type changed, raise its STATE_VERSION and register a state upcaster (`.upcast_state::<E, _>(…)` on the builder); or fix or reset the state")]
    UndecodableState {
        /// The entity kind.
        kind: String,
        /// The tenant.
        tenant: String,
        /// The id.
        id: String,
        /// The state version it was stored at.
        version: u32,
        /// What failed: the upcaster's error or serde's.
        reason: String,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An id given to a send or a post is outside its limits (see [`crate::model::ids`]); nothing was
    /// written.
    #[error("invalid input, nothing was written: {0}")]
    InvalidInput(#[from] InvalidId),
    /// A duration or time given to a send or a post (delay, due time, TTL) is outside its
    /// limits (see [`crate::model::time_limits`]); nothing was written.
    #[error("invalid input, nothing was written: {0}")]
    InvalidTime(#[from] InvalidTime),
    /// A payload given to a send or a post is larger than `max_payload_bytes` (see
    /// [`crate::model::payload_limit`]); nothing was written.
    #[error("payload too large, nothing was written: {0}")]
    PayloadTooLarge(#[from] PayloadTooLarge),
    /// A message was sent to an entity kind that nobody registered.
    #[error("entity kind `{kind}` is not registered (registered kinds: {}); register it with the builder (`.aggregate::<T>()`, `.projection::<T>()`, `.reactor(r)` or `.process_manager::<T>()`) before sending to it", kind_list(.registered))]
    UnknownKind {
        /// The kind.
        kind: String,
        /// The kinds that are registered, sorted.
        registered: Vec<String>,
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
    #[error("payload of type `{payload_type}` could not be serialized: {source}")]
    Serialize {
        /// The payload's type name.
        payload_type: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// A stored payload (an event's, a dead letter's) read as a type it is not.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// What was asked for does not exist.
    #[error("{what} does not exist: {hint}")]
    NotFound {
        /// What was looked for (e.g. `catch-up job 7`).
        what: String,
        /// Why it may be gone, or what to do.
        hint: String,
    },
    /// A command's outcome was not decided within the time the caller waited: no node
    /// served its shard in time, it waits for a retry or a delay, or its target is busy.
    #[error("no outcome for command `{signal_id}` within {waited:?}: it is still waiting for delivery (is a node running for its shard? is it delayed or retrying?); ask again later")]
    OutcomeTimeout {
        /// The command's signal id.
        signal_id: String,
        /// How long the caller waited.
        waited: std::time::Duration,
    },
    /// An operator tool cannot put rows in shards as the application does (no node recorded
    /// the shard count or strategy yet, or the application uses its own strategy); nothing
    /// was written.
    #[error("refused, nothing was written: {reason}")]
    Unplaceable {
        /// Why, and what to do instead.
        reason: String,
    },
    /// A tool (the CLI, the admin surface) was asked to start a catch-up of a kind that no
    /// live node registers as a projection: its states would be deleted now and stay empty
    /// until such a node runs, or the kind is misspelled. Nothing was written; the caller
    /// may force it.
    #[error("refused, nothing was written: {reason}")]
    NotServed {
        /// The kind asked for.
        kind: String,
        /// Why, naming the live nodes' projections, and what to do.
        reason: String,
    },
    /// An outcome was asked of a receipt that has none: a post's (events fan out to many
    /// subscribers; only a command has one outcome).
    #[error("receipt of `{signal_id}` has no outcome: only a sent command's receipt has one, not a post's")]
    NoOutcome {
        /// The receipt's signal id.
        signal_id: String,
    },
    /// A read-your-writes wait ([`Inbox::projected`](crate::Inbox::projected)) ended without
    /// the projection having applied what the send produced: the command was not handled, or
    /// a copy of its events was not applied (dead-lettered, dropped, expired, or applied
    /// longer ago than the deduplication window).
    #[error("`{kind}` did not apply what `{signal_id}` produced: {reason}")]
    NotProjected {
        /// The projection's kind.
        kind: String,
        /// The receipt's signal id.
        signal_id: String,
        /// What happened instead.
        reason: String,
    },
    /// A read-your-writes wait ended before the projection applied what the send produced:
    /// the command, or the projection's copies of its events, still wait for delivery.
    #[error("`{kind}` has not applied what `{signal_id}` produced within {waited:?}: it still waits for delivery (is a node serving its shards? is it retrying, paused or catching up?); ask again later")]
    ProjectionTimeout {
        /// The projection's kind.
        kind: String,
        /// The receipt's signal id.
        signal_id: String,
        /// How long the caller waited.
        waited: std::time::Duration,
    },
    /// An on-demand `deliver` (or `deliver_all`) committed
    /// [`MAX_DELIVER_STAGES`](crate::MAX_DELIVER_STAGES) stages on one shard and messages
    /// were still due: its handlers keep writing to it. Everything so far is committed.
    #[error("deliver stopped on shard {shard} after {stages} stages (MAX_DELIVER_STAGES, the limit of one call) with messages still due: its handlers keep writing to it, as a reactor or process manager that reacts to the events of its own commands does forever. Everything so far is committed; give the cycle an end (a condition that stops reacting), or call deliver again to go on (a started node's workers have no such limit)")]
    StageLimit {
        /// The shard.
        shard: ShardIndex,
        /// Stages committed on it by the call.
        stages: usize,
    },
}

impl DeliveryError {
    /// Whether this error means the worker lost its shard (and should simply move on).
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, DeliveryError::Storage(StorageError::LeaseLost { .. }))
    }
}

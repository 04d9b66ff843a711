//! The errors of shardbox-core. Each message says what went wrong and what to do about it.

use crate::model::ids::{IdField, IdProblem, InvalidId, LeaseEpoch, ShardIndex};
use crate::model::payload_limit::PayloadTooLarge;
use crate::model::time_limits::InvalidTime;
use std::sync::Arc;
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
    /// The database's Inbox was set up with another shard count than this node's.
    #[error("the database's Inbox has {recorded} shards, but this node is configured with {configured}: start every node with .shards({recorded}). A node with another count would send one target's messages to two shards; to change the count, re-shard the running cluster (`shardbox reshard --shards N` or `Shardbox::reshard`), then configure the new count")]
    ShardCountMismatch {
        /// The count recorded in the database by the first node.
        recorded: u32,
        /// This node's configured count.
        configured: u32,
    },
    /// A setting keyed by entity kind (`kind_policy`, `kind_handler_timeout`) names a kind
    /// no entity registers: the setting would apply to nothing.
    #[error("`{setting}(\"{kind}\", …)` names entity kind `{kind}`, which is not registered (registered kinds: {}); fix the name, or register the entity (`.aggregate::<T>()`, `.projection::<T>()`, `.reactor(r)`, `.process_manager::<T>()`). `{setting}_of::<T, _>(…)` takes the type instead, checked by the compiler", kind_list(.registered))]
    UnknownKind {
        /// The builder method of the setting.
        setting: &'static str,
        /// The kind it names.
        kind: String,
        /// The kinds that are registered, sorted.
        registered: Vec<String>,
    },
    /// A kind action (pause, resume, run-time settings) names one of Shardbox's own kinds
    /// (see [`crate::INTERNAL_KIND_PREFIX`]).
    #[error("`{kind}` is one of Shardbox's own kinds (names starting `shardbox.`; it carries the catch-ups' steps): it cannot be paused, resumed or given settings. Steer a catch-up with `shardbox catch-up cancel` (or `Shardbox::cancel_catch_up`), or pause the projection it rebuilds")]
    InternalKind {
        /// The kind.
        kind: String,
    },
    /// The same entity kind was registered twice.
    #[error("entity kind `{kind}` is registered twice; give each entity type its own KIND")]
    DuplicateKind {
        /// The kind.
        kind: String,
    },
}

/// `advice` as the sentence that ends a message, or nothing when there is none.
fn sentence(advice: &str) -> String {
    if advice.is_empty() {
        String::new()
    } else {
        format!(". {advice}")
    }
}

impl StorageError {
    /// The advice of an [`Unavailable`](StorageError::Unavailable) database server: the
    /// connection failed.
    pub const CHECK_SERVER: &'static str = "Check that it is running and reachable, and the URL";
    /// The advice of an [`Unavailable`](StorageError::Unavailable) database file that could
    /// not be opened.
    pub const CHECK_PATH: &'static str = "Check the path: its directory must exist, and this process must be allowed to open (and create) files there";
    /// The advice of an [`Unavailable`](StorageError::Unavailable) file that is not a
    /// database.
    pub const NOT_A_DATABASE: &'static str =
        "Check the path: it names a file that is not a SQLite database (or an encrypted one)";
}

/// `kinds` as a message lists them: each in backticks, or "none".
fn kind_list(kinds: &[String]) -> String {
    if kinds.is_empty() {
        return "none".into();
    }
    kinds
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
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
    #[error("database {database} is unavailable: {reason}{}", sentence(advice))]
    Unavailable {
        /// The database (URL with the password redacted, or file path).
        database: String,
        /// What the driver said (any password in it replaced by `***`).
        reason: String,
        /// What to do, fitting the cause: [`StorageError::CHECK_SERVER`] for a server that
        /// cannot be reached, [`StorageError::CHECK_PATH`] for a file that cannot be opened,
        /// [`StorageError::NOT_A_DATABASE`] for a file of another kind; empty when `reason`
        /// says it already.
        advice: &'static str,
        /// The driver or pool error, if one caused this.
        #[source]
        source: Option<Cause>,
    },
    /// The connection was lost while a write was on its way or committing: the database may
    /// have committed it or not, and cannot be asked on that connection. The send path writes
    /// such a write again itself, with the same signal ids (a row that did commit is then a
    /// duplicate and ignored); this error reaches a caller only when those retries failed too.
    /// Sending again is safe with the same signal ids (`SendOptions::signal_id`); with fresh
    /// ones the messages may be written twice.
    #[error("database {database}: the connection was lost while writing, so the write may or may not have committed: {reason}. Send again with the same signal ids (duplicates are ignored); fresh ids may write the messages twice")]
    OutcomeUnknown {
        /// The database (URL with the password redacted, or file path).
        database: String,
        /// What the driver said (any password in it replaced by `***`).
        reason: String,
        /// The driver error.
        #[source]
        source: Option<Cause>,
    },
    /// The server refused the login: a wrong password, or no `pg_hba.conf` entry lets this
    /// user in from here.
    #[error("database {database} refused the login: {reason}. Check the user name and password in the URL, and that the server's pg_hba.conf lets this user connect from this host")]
    AuthenticationFailed {
        /// The database (URL with the password redacted).
        database: String,
        /// What the server said.
        reason: String,
        /// The driver error.
        #[source]
        source: Option<Cause>,
    },
    /// The server has no role of the URL's user name.
    #[error("database {database} has no role `{role}`: {reason}. Create it (CREATE ROLE \"{role}\" LOGIN PASSWORD '…') or fix the user name in the URL")]
    UnknownRole {
        /// The database (URL with the password redacted).
        database: String,
        /// The role the server did not find.
        role: String,
        /// What the server said.
        reason: String,
        /// The driver error.
        #[source]
        source: Option<Cause>,
    },
    /// The server has no database of the URL's database name.
    #[error("the server of {database} has no database `{name}`: {reason}. Create it (CREATE DATABASE \"{name}\") or fix the database name in the URL")]
    UnknownDatabase {
        /// The database URL (with the password redacted).
        database: String,
        /// The database name the server did not find.
        name: String,
        /// What the server said.
        reason: String,
        /// The driver error.
        #[source]
        source: Option<Cause>,
    },
    /// The URL or connection string could not be parsed.
    #[error("database URL {database} is malformed: {reason}. Percent-encode the reserved characters of the user name and password (`#` as %23, `?` as %3F, `/` as %2F, `@` as %40, `:` as %3A, `%` as %25) and check the option names")]
    InvalidUrl {
        /// The URL, with its user info redacted as well as it could be parsed.
        database: String,
        /// What the driver said (any password in it replaced by `***`).
        reason: String,
        /// The driver error.
        #[source]
        source: Option<Cause>,
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
        /// The driver error, if one caused this.
        #[source]
        source: Option<Cause>,
    },
    /// The database schema is of another version than this binary expects.
    #[error(
        "database {database} has schema version {found}, this binary expects {expected}: {advice}"
    )]
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
        /// The driver error, if one caused this.
        #[source]
        source: Option<Cause>,
    },
    /// A catch-up was refused because it overlaps a running one.
    #[error("a catch-up of `{projection_kind}` overlapping these targets is already running (job {running_job}); wait for it to complete or choose other ids")]
    CatchUpOverlap {
        /// The projection kind.
        projection_kind: String,
        /// The running job's id.
        running_job: i64,
    },
    /// A cancel was asked of a catch-up job that is no longer running.
    #[error("catch-up job {job} is already {status}; there is nothing to cancel")]
    CatchUpNotRunning {
        /// The job's id.
        job: i64,
        /// Its stored status (`completed` or `cancelled`).
        status: String,
    },
    /// A write or a pick-up addressed shards by a shard count the Inbox no longer has: it was
    /// re-sharded meanwhile. Nothing was written; address the rows again by the recorded
    /// count and retry (the send path and the runner do this themselves).
    #[error("the Inbox has {recorded} shards now, not {expected}: it was re-sharded; nothing was written, address the rows by {recorded} shards and try again")]
    ShardCountChanged {
        /// The count the rows were addressed by.
        expected: u32,
        /// The count recorded in the database.
        recorded: u32,
    },
    /// A re-sharding was refused or could not finish; nothing of it was applied (the Inbox
    /// keeps its shard count).
    #[error("re-sharding refused: {reason}")]
    ReshardRefused {
        /// What stood in the way, and what to do.
        reason: String,
    },
    /// A blocking storage task could not complete (the runtime is shutting down).
    #[error("storage task did not complete: {0}")]
    Task(String),
}

/// The driver or pool error behind a [`StorageError`], kept whole for
/// [`std::error::Error::source`] and shared, so that the error stays `Clone` (a failed group
/// write hands one error to every sender in it).
///
/// It dereferences to the error itself, so `source()` yields the driver's type, not this
/// wrapper:
///
/// ```
/// use shardbox_core::{Cause, StorageError};
/// let io = std::io::Error::new(std::io::ErrorKind::Other, "disk gone");
/// let e = StorageError::Query { database: "x.db".into(), reason: io.to_string(), source: Some(Cause::new(io)) };
/// let source = std::error::Error::source(&e).expect("kept");
/// assert!(source.downcast_ref::<std::io::Error>().is_some());
/// ```
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Keeps `error` as a cause.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(error))
    }

    /// Keeps an already boxed error as a cause.
    pub fn from_boxed(error: Box<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        Cause(Arc::from(error))
    }
}

/// Deliberately not `Error` itself: thiserror's `#[source]` then reaches the wrapped error
/// through this `Deref`, so that `source()` can be downcast to the driver's type.
impl std::ops::Deref for Cause {
    type Target = dyn std::error::Error + Send + Sync + 'static;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

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

impl ConfigError {
    /// An id the configuration gives (the node id, an entity `KIND`) refused by the id rules
    /// when the delivery is built, naming `field` as the user wrote it.
    pub fn invalid_id(e: InvalidId, field: &'static str, value: &str) -> ConfigError {
        let reason = match (e.problem, e.field) {
            (IdProblem::Empty, _) => "must not be empty",
            (IdProblem::TooLong { .. }, IdField::NodeId) => {
                "must be at most 128 bytes (MAX_NODE_ID_BYTES)"
            }
            (IdProblem::TooLong { .. }, _) => {
                "must be at most 512 bytes (MAX_ID_BYTES, the limit of every id)"
            }
            (IdProblem::Nul { .. }, _) => {
                "must not contain a NUL byte (PostgreSQL text cannot store one)"
            }
        };
        ConfigError::Invalid {
            field,
            value: format!("{value:?}"),
            reason,
        }
    }
}

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

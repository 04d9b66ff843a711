//! [`StorageError`]: what a storage backend could not do, and the [`Cause`] behind it, kept
//! whole.

use crate::model::ids::{LeaseEpoch, ShardIndex};
use std::sync::Arc;
use thiserror::Error;

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
    /// A read model's version could not be built or retired (see
    /// [`crate::storage::ReadModelVersion`]); nothing was written.
    #[error("refused for read model `{model}`, nothing was written: {reason}")]
    VersionRefused {
        /// The read model.
        model: String,
        /// Why, and what to do.
        reason: String,
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
    /// The storage cannot do this as configured (a storage over several databases asked for
    /// something only one database can do, or given a count it cannot split); nothing was
    /// written.
    #[error("{what} is not supported: {reason}")]
    Unsupported {
        /// What was asked.
        what: String,
        /// Why not, and what to do instead.
        reason: String,
    },
    /// A blocking storage task could not complete (the runtime is shutting down).
    #[error("storage task did not complete: {0}")]
    Task(String),
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

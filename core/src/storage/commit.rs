//! What one stage writes: the [`StageCommit`], applied in one fenced transaction.

use super::catch_up::CatchUpJob;
use super::entities::EntityStateWrite;
use super::inbox::{WriteBatch, WriteReport};
use super::registry::Lease;
use crate::message::InboxMessage;
use chrono::{DateTime, Utc};

/// A change to one Inbox row.
#[derive(Debug, Clone, PartialEq)]
pub enum RowChange {
    /// Delivered: status `delivered`, kept until `keep_until` for deduplication.
    Delivered {
        /// End of the deduplication window.
        keep_until: DateTime<Utc>,
    },
    /// Delete the row (delivered with no window, dropped, expired, dead-lettered).
    Remove,
    /// A failed attempt: try again at `at`. The first failure's time is kept on the row
    /// (`first_failed_at`, set to the commit's time if unset).
    RetryAt {
        /// Next attempt.
        at: DateTime<Utc>,
        /// Failed attempts so far, this one included.
        attempts: u32,
        /// Why it failed.
        error: String,
    },
    /// Failed for the last time under a `block` policy: status `blocked` (never read by
    /// pages, its target's later messages wait), attempts and error recorded, `deliver_after`
    /// set to the commit's time (when it was blocked). Only an operator moves it again.
    Block {
        /// Failed attempts so far, this one included.
        attempts: u32,
        /// Why it failed.
        error: String,
    },
    /// Not handled this stage (waits behind an earlier message of its target, or held by a
    /// catch-up): due again at `until`, attempts unchanged.
    Hold {
        /// When it is due again.
        until: DateTime<Utc>,
    },
}

/// A change to the row with `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct RowUpdate {
    /// The row.
    pub seq: i64,
    /// The change.
    pub change: RowChange,
}

/// A message that exhausted its attempts (or expired, or could not be routed), with its
/// origin.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The Inbox row as it was (target, signal, shard, payload, metadata, attempts).
    pub original: InboxMessage,
    /// Why it is dead (the last error, `expired`, …).
    pub reason: String,
    /// Failed attempts, the last one included (0 for a message that was never attempted).
    pub attempts: u32,
    /// When the first attempt failed (`None` if none did).
    pub first_attempt_at: Option<DateTime<Utc>>,
    /// When the last attempt failed (or the message was dead-lettered without an attempt).
    pub last_attempt_at: DateTime<Utc>,
}

/// Everything a stage writes, applied atomically and only under the stage's lease.
#[derive(Debug, Clone, PartialEq)]
pub struct StageCommit {
    /// The lease the stage ran under; the commit is refused if its epoch moved.
    pub lease: Lease,
    /// The stage's time.
    pub now: DateTime<Utc>,
    /// The lease is renewed until this time.
    pub lease_until: DateTime<Utc>,
    /// Changes to the page's rows.
    pub updates: Vec<RowUpdate>,
    /// New entity states.
    pub states: Vec<EntityStateWrite>,
    /// Events the handlers emitted and the rows they (and emitted commands) fan out to.
    pub writes: WriteBatch,
    /// Messages moved to the dead letters.
    pub dead_letters: Vec<DeadLetter>,
    /// Delete at most this many delivered rows of the shard whose `keep_until` has passed.
    pub purge_delivered: usize,
    /// Catch-up jobs whose status, cursor and counters this stage advanced (stored as given,
    /// after the row changes). A job stored as `Completed` settles its parked rows (see
    /// [`crate::catch_up::parked_until`]) in the same transaction: in its affected shards, the
    /// parked live event rows of its projection kind, tenant and targets whose event `seq` is
    /// at most the job's cursor are removed (the replay applied them), the others are made due
    /// at once (`deliver_after` cleared, so they keep their `seq` order); and every affected
    /// shard but this stage's own is re-fenced (epoch + 1, lease freed), so that no stage that
    /// read its page or the job list before the completion can park or deliver a row after it.
    pub catch_ups: Vec<CatchUpJob>,
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitReport {
    /// The renewed lease.
    pub lease: Lease,
    /// What the fan-out write did.
    pub written: WriteReport,
    /// Delivered rows purged after their window.
    pub purged: usize,
}

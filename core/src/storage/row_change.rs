//! What a stage's commit does to the rows of its page and beside them: each row's
//! [`RowChange`], the dead letters it makes, the holds it releases. Shared by the
//! [`StageCommit`](super::commit::StageCommit) and the writes that run inside its transaction
//! ([`FailedBatch`](super::in_transaction::FailedBatch)).

use super::entities::EntityKey;
use crate::model::attempt_errors::ErrorHistory;
use crate::model::message::InboxMessage;
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
        /// The row's error history, this attempt included (replaces the stored one).
        errors: ErrorHistory,
    },
    /// Failed for the last time under a `block` policy: status `blocked` (never read by
    /// pages, its target's later messages wait), attempts and error recorded, `deliver_after`
    /// set to the commit's time (when it was blocked). Only an operator moves it again.
    Block {
        /// Failed attempts so far, this one included.
        attempts: u32,
        /// Why it failed.
        error: String,
        /// The row's error history, this attempt included (replaces the stored one).
        errors: ErrorHistory,
    },
    /// Not handled this stage (waits behind an earlier message of its target, or held by a
    /// catch-up): due again at `until`, attempts unchanged.
    Hold {
        /// When it is due again.
        until: DateTime<Utc>,
    },
    /// Waits behind a blocked message of its target: parked (`deliver_after` set to
    /// [`crate::catch_up::parked_until`], attempts unchanged) until an operator unblocks the
    /// target, which makes every parked row of the target due at once in the same
    /// transaction (see `DeadLetterStore::unblock_target`). Written once: no page reads a
    /// parked row, so it is not rewritten while the block lasts. Applied after the commit's
    /// other changes and only if the target still has a blocked row then (this commit's own
    /// [`RowChange::Block`] included); otherwise (an unblock committed after the page was
    /// read) the row is left unchanged, still due.
    BehindBlock,
    /// Its kind is paused: parked (`deliver_after` set to
    /// [`crate::catch_up::parked_until`], nothing else changed) until the kind is resumed,
    /// which makes the kind's parked rows due at once (see `KindControlStore::resume_kind`).
    /// Applied after the commit's other changes and only if the kind is still paused then;
    /// otherwise (a resume committed after the page was read) the row is left unchanged,
    /// still due.
    Paused,
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
/// origin. Its original row's `errors` end with the attempt that killed it, if one did.
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

/// Rows of `target` in the committing shard held until exactly `until` — behind a retry due
/// then, whose row left before it (its TTL ran out) — become due at once, so they keep their
/// `seq` order with rows that arrived after the hold (see `StageCommit::release_holds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRelease {
    /// Whose held rows.
    pub target: EntityKey,
    /// The hold's exact time: the retry time of the row that left.
    pub until: DateTime<Utc>,
}

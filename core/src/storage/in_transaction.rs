//! Application writes a stage commit runs inside its own transaction: what a SQL projection
//! makes of one target's batch ([`InTransaction`]).
//!
//! ```text
//!  commit ─► fence ─► per InTransaction, in a savepoint of its own:
//!                       apply message 0, 1, … on the transaction's connection
//!                       all applied        ─► the rows' changes in `updates` stand
//!                       message k failed   ─► savepoint rolled back; messages 0..k applied
//!                                             again in a new one (k = 0: none); the rows'
//!                                             changes replaced by `settle_failure(k, error)`
//!        ─► the rest of the commit (rows, states, dead letters, …)
//! ```
//!
//! The work runs after the fence, so a node whose lease was taken lands none of it: the
//! application's rows commit or roll back with the Inbox rows and the framework's state. The
//! backend hands the work its own connection as `&mut dyn Any` (diesel's `SqliteConnection`
//! or `PgConnection`); the work knows which it was written for. A backend without SQL (the
//! in-memory one) refuses a commit that carries any.

use crate::model::outcome::OutcomeRecord;
use crate::storage::entities::EntityKey;
use crate::storage::row_change::{DeadLetter, RowUpdate};
use std::any::Any;
use std::sync::Arc;

/// Why a message's write inside the transaction failed: the application's error (a
/// `HandlerError`, a driver error, …), kept whole so the failure policy can tell a
/// permanent failure from a transient one.
pub type TransactionError = Box<dyn std::error::Error + Send + Sync>;

/// One target's messages, written by the application inside the stage's transaction.
pub trait TransactionalWork: Send + Sync {
    /// How many messages it writes (the first `len` rows of [`InTransaction::seqs`]).
    fn len(&self) -> usize;

    /// Whether it writes nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes message `index` through `conn`, the backend's connection inside the commit's
    /// transaction (inside a savepoint: an error rolls back this target's writes only).
    fn apply(&self, conn: &mut dyn Any, index: usize) -> Result<(), TransactionError>;

    /// The target's rows' changes when message `failed` failed with `error` and the messages
    /// before it were applied: they replace the rows' changes in the commit's `updates`.
    fn settle_failure(&self, failed: usize, error: TransactionError) -> FailedBatch;
}

/// What a target's rows become when its writes failed: the failure policy's decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FailedBatch {
    /// The changes of the target's rows ([`InTransaction::seqs`]), replacing theirs.
    pub updates: Vec<RowUpdate>,
    /// Dead letters the failure made.
    pub dead_letters: Vec<DeadLetter>,
    /// Command outcomes the failure decided.
    pub outcomes: Vec<OutcomeRecord>,
    /// The rows' new fates, counted.
    pub counts: FailedWrites,
}

/// How the rows of targets whose writes failed inside the transaction were settled instead:
/// the stage counted them as delivered before its commit, and corrects its report with these
/// once the commit returns them ([`CommitReport::failed_writes`](super::CommitReport)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailedWrites {
    /// Rows counted as delivered that were not (the sum of the fates below).
    pub rows: usize,
    /// Scheduled for another attempt.
    pub retried: usize,
    /// Moved to the dead letters.
    pub dead_lettered: usize,
    /// Dropped by policy.
    pub dropped: usize,
    /// Blocked their target.
    pub blocked: usize,
    /// Expired by their TTL.
    pub expired: usize,
    /// Held behind the failure.
    pub held: usize,
}

impl FailedWrites {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &FailedWrites) {
        self.rows += other.rows;
        self.retried += other.retried;
        self.dead_lettered += other.dead_lettered;
        self.dropped += other.dropped;
        self.blocked += other.blocked;
        self.expired += other.expired;
        self.held += other.held;
    }
}

/// A target's writes inside the stage's transaction, with the rows they stand for.
#[derive(Clone)]
pub struct InTransaction {
    /// Whose messages.
    pub target: EntityKey,
    /// The rows of the page the work writes, in order (`seq`); their changes in the commit's
    /// `updates` are those of a success.
    pub seqs: Vec<i64>,
    /// The writes.
    pub work: Arc<dyn TransactionalWork>,
}

impl std::fmt::Debug for InTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InTransaction")
            .field("target", &self.target)
            .field("seqs", &self.seqs)
            .field("len", &self.work.len())
            .finish()
    }
}

impl PartialEq for InTransaction {
    fn eq(&self, other: &Self) -> bool {
        self.target == other.target
            && self.seqs == other.seqs
            && Arc::ptr_eq(&self.work, &other.work)
    }
}

/// Replaces, in `updates`, the changes of the rows `failed` names, and adds its dead letters
/// and outcomes: what a backend does with a target whose writes failed. Returns the rows'
/// new fates, for the commit's report.
pub fn apply_failed_batch(
    failed: FailedBatch,
    updates: &mut Vec<RowUpdate>,
    dead_letters: &mut Vec<DeadLetter>,
    outcomes: &mut Vec<OutcomeRecord>,
) -> FailedWrites {
    for replacement in failed.updates {
        match updates.iter_mut().find(|u| u.seq == replacement.seq) {
            Some(u) => *u = replacement,
            None => updates.push(replacement),
        }
    }
    dead_letters.extend(failed.dead_letters);
    outcomes.extend(failed.outcomes);
    failed.counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::RowChange;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_failed_batch_replaces_its_rows_changes_and_keeps_the_others() {
        let at = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let delivered = RowChange::Delivered { keep_until: at };
        let mut updates = vec![
            RowUpdate {
                seq: 1,
                change: delivered.clone(),
            },
            RowUpdate {
                seq: 2,
                change: delivered.clone(),
            },
        ];
        let retry = RowChange::RetryAt {
            at,
            attempts: 1,
            error: "constraint".into(),
            errors: Default::default(),
        };
        let failed = FailedBatch {
            updates: vec![RowUpdate {
                seq: 2,
                change: retry.clone(),
            }],
            counts: FailedWrites {
                rows: 1,
                retried: 1,
                ..FailedWrites::default()
            },
            ..FailedBatch::default()
        };
        let (mut dead, mut outcomes) = (Vec::new(), Vec::new());
        let counts = apply_failed_batch(failed, &mut updates, &mut dead, &mut outcomes);
        assert_eq!((counts.rows, counts.retried), (1, 1), "{counts:?}");
        assert_eq!(updates[0].change, delivered);
        assert_eq!(updates[1].change, retry);
        assert_eq!(updates.len(), 2);
    }
}

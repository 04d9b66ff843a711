//! What one stage writes: the [`StageCommit`], applied in one fenced transaction.

use super::catch_up::CatchUpJob;
use super::entities::{EntityKey, EntityStateWrite};
use super::registry::Lease;
use super::write::{WriteBatch, WriteReport};
use crate::model::attempt_errors::ErrorHistory;
use crate::model::message::InboxMessage;
use crate::model::outcome::OutcomeRecord;
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
    /// after the row changes; a job's `cancel_requested_at` is never written here, see
    /// [`CatchUpJob::cancel_requested_at`]). A job stored as `Completed` or `Cancelled`
    /// settles its parked rows (see
    /// [`crate::catch_up::parked_until`]) in the same transaction: in its affected shards, the
    /// parked live event rows of its projection kind, tenant and targets whose event `seq` is
    /// at most the job's cursor are removed (the replay applied them), the others are made due
    /// at once (`deliver_after` cleared, so they keep their `seq` order); and every affected
    /// shard but this stage's own is re-fenced (epoch + 1, lease freed), so that no stage that
    /// read its page or the job list before the completion can park or deliver a row after it.
    pub catch_ups: Vec<CatchUpJob>,
    /// Delete the completed catch-up jobs that finished before this time (their retention
    /// ran out), in the same transaction.
    pub purge_catch_ups_before: Option<DateTime<Utc>>,
    /// Held rows to make due at once, after the row changes (see [`HoldRelease`]).
    pub release_holds: Vec<HoldRelease>,
    /// The outcomes of the commands this stage settled other than handled, kept until their
    /// `keep_until` (replacing an earlier record of the same key). A handled command's outcome
    /// is its row marked [`RowChange::Delivered`] (with the stage's `now` as its time), read
    /// back with the events its handler emitted (see [`crate::model::outcome`]). The commit
    /// deletes up to [`StageCommit::outcome_purge_limit`] of the shard's records whose
    /// `keep_until` has passed.
    pub outcomes: Vec<OutcomeRecord>,
    /// The stage decided the outcome of at least one command (handled ones included, which
    /// have no record): its storage tells waiting senders once it committed.
    pub outcomes_decided: bool,
}

impl StageCommit {
    /// How many of its shard's forgotten outcome records (`keep_until` passed) the commit
    /// deletes: as many as it purges delivered rows, and at least as many as it records, so
    /// that a shard whose commands are never handled (dead-lettered, dropped, expired,
    /// blocked), and so has no delivered row to purge, forgets its records as fast as it
    /// makes them.
    pub fn outcome_purge_limit(&self) -> usize {
        self.purge_delivered.max(self.outcomes.len())
    }

    /// The earliest time this commit makes a row of its shard due later (a retry, a hold, or
    /// a delayed message it fans out to its own shard): what a page read before it could not
    /// know of.
    /// Parked rows wait for an event, not a time, so they give none.
    pub fn earliest_delay(&self) -> Option<DateTime<Utc>> {
        let changes = self.updates.iter().filter_map(|u| match &u.change {
            RowChange::RetryAt { at, .. } => Some(*at),
            RowChange::Hold { until } if !crate::model::parked::is_parked(Some(*until)) => {
                Some(*until)
            }
            _ => None,
        });
        let fanned_out = self
            .writes
            .messages
            .iter()
            .filter(|w| w.shard == self.lease.shard)
            .filter_map(|w| w.message.deliver_after);
        changes.chain(fanned_out).min()
    }
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
    /// Completed catch-up jobs purged after their retention.
    pub catch_ups_purged: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, SignalId, WorkerId};
    use crate::model::message::{InboxWrite, MessageKind, NewMessage};
    use chrono::TimeZone;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn write(shard: u32, deliver_after: Option<DateTime<Utc>>) -> InboxWrite {
        InboxWrite {
            shard: ShardIndex(shard),
            message: NewMessage {
                signal_id: SignalId("s".into()),
                kind: MessageKind::Command,
                target_kind: "k".into(),
                target_id: "t".into(),
                tenant: String::new(),
                payload: Vec::new(),
                payload_type: "p".into(),
                payload_version: 1,
                metadata: Default::default(),
                received_at: at(0),
                deliver_after,
                expires_at: None,
            },
        }
    }

    fn commit(updates: Vec<RowChange>, messages: Vec<InboxWrite>) -> StageCommit {
        StageCommit {
            lease: Lease {
                shard: ShardIndex(1),
                node_id: NodeId("n".into()),
                worker_id: WorkerId(0),
                epoch: LeaseEpoch(1),
                picked_at: at(0),
                lease_until: at(30),
                taken_over: false,
            },
            now: at(0),
            lease_until: at(30),
            updates: updates
                .into_iter()
                .enumerate()
                .map(|(i, change)| RowUpdate {
                    seq: i as i64,
                    change,
                })
                .collect(),
            states: Vec::new(),
            writes: WriteBatch {
                events: Vec::new(),
                messages,
            },
            dead_letters: Vec::new(),
            purge_delivered: 0,
            catch_ups: Vec::new(),
            purge_catch_ups_before: None,
            release_holds: Vec::new(),
            outcomes: Vec::new(),
            outcomes_decided: false,
        }
    }

    #[test]
    fn the_earliest_delay_is_the_first_retry_hold_or_own_delayed_write() {
        let delivered = RowChange::Delivered { keep_until: at(1) };
        assert_eq!(
            commit(vec![delivered.clone()], vec![]).earliest_delay(),
            None
        );
        let retry = RowChange::RetryAt {
            at: at(9),
            attempts: 1,
            error: "e".into(),
            errors: ErrorHistory::default(),
        };
        let hold = RowChange::Hold { until: at(7) };
        assert_eq!(
            commit(vec![delivered, retry.clone(), hold], vec![]).earliest_delay(),
            Some(at(7))
        );
        // A delayed write to this shard counts; one to another shard, or undelayed, does not.
        let writes = vec![write(1, Some(at(5))), write(2, Some(at(2))), write(1, None)];
        assert_eq!(commit(vec![retry], writes).earliest_delay(), Some(at(5)));
    }

    #[test]
    fn parked_rows_give_no_delay() {
        let parked = RowChange::Hold {
            until: crate::model::parked::parked_until(),
        };
        assert_eq!(
            commit(vec![parked, RowChange::BehindBlock], vec![]).earliest_delay(),
            None
        );
    }
}

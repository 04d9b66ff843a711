//! What one stage writes: the [`StageCommit`], applied in one fenced transaction.

use super::catch_up::CatchUpJob;
use super::entities::EntityStateWrite;
use super::in_transaction::InTransaction;
use super::registry::Lease;
use super::row_change::{DeadLetter, HoldRelease, RowChange, RowUpdate};
use super::write::{WriteBatch, WriteReport};
use crate::model::outcome::OutcomeRecord;
use chrono::{DateTime, Utc};

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
    /// A job over several databases settles this way only the shards of the database that
    /// stores it ([`CatchUpJob::affected_shards_here`]), and releases all its parked rows
    /// (they are all after its set; the other databases released theirs before).
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
    /// have no record), or settled at least one event's copy (which read-your-writes waits
    /// read): its storage tells waiting senders once it committed.
    pub outcomes_decided: bool,
    /// The application's writes to run inside the commit's transaction, after the fence and
    /// before the row changes, each target's in a savepoint of its own (SQL projections; see
    /// [`InTransaction`]). A backend without SQL refuses a commit with any.
    pub in_transaction: Vec<InTransaction>,
    /// Messages for targets in other databases, written into this database's outbox in the
    /// same transaction, after the fan-out (see [`OutboxStore`](super::OutboxStore)). Empty
    /// for a storage of one database.
    pub outbox: Vec<super::OutboxWrite>,
}

impl StageCommit {
    /// A commit under `lease` at `now`, renewing the lease to `lease_until`, that changes and
    /// writes nothing: the start for a commit filled in field by field.
    pub fn new(lease: Lease, now: DateTime<Utc>, lease_until: DateTime<Utc>) -> Self {
        StageCommit {
            lease,
            now,
            lease_until,
            updates: Vec::new(),
            states: Vec::new(),
            writes: WriteBatch::default(),
            dead_letters: Vec::new(),
            purge_delivered: 0,
            catch_ups: Vec::new(),
            purge_catch_ups_before: None,
            release_holds: Vec::new(),
            outcomes: Vec::new(),
            outcomes_decided: false,
            in_transaction: Vec::new(),
            outbox: Vec::new(),
        }
    }

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
    /// The rows of targets whose writes failed inside the transaction (SQL projections):
    /// what they became instead of delivered, which the stage's report counted them as.
    pub failed_writes: super::FailedWrites,
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
        let lease = Lease {
            shard: ShardIndex(1),
            node_id: NodeId("n".into()),
            worker_id: WorkerId(0),
            epoch: LeaseEpoch(1),
            picked_at: at(0),
            lease_until: at(30),
            taken_over: false,
        };
        let mut commit = StageCommit::new(lease, at(0), at(30));
        commit.updates = updates
            .into_iter()
            .enumerate()
            .map(|(i, change)| RowUpdate {
                seq: i as i64,
                change,
            })
            .collect();
        commit.writes.messages = messages;
        commit
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
            errors: crate::model::attempt_errors::ErrorHistory::default(),
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

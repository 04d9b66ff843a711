//! A stage commit of the common shape as one statement, where the backend has one.
//!
//! ```text
//!  StageCommit ─► one_statement_shape: only delivered rows (one keep_until), state upserts,
//!                 events?
//!      no ─────────────────────────────────────────────► the write transaction (sql::commit)
//!      yes ─► Dialect::commit_stage_statement (PostgreSQL: postgres::stage_statement)
//!               fenced, every row found ─► done: committed by that statement alone
//!               not fenced (nothing written) ─┐
//!               refused by the server (rolled back: a row outside the shard, …) ─┴─► the
//!                                              write transaction, which names the fault
//!               connection lost (outcome unknown) ─► the error, as the transaction's would be
//! ```
//!
//! Most stages deliver their page and change nothing else: the fence, the delivered rows,
//! the states and the events are then four statements in a transaction — six round trips on
//! PostgreSQL with `BEGIN` and `COMMIT`. As one statement they are one round trip, an implicit
//! transaction of their own, with the same locks taken in the same order. Any other change (a
//! retry, a block, a dead letter, a fan-out, a purge, a recorded outcome, a catch-up, a
//! deleted state) takes the transaction, which states each step on its own.

use crate::rows::{NewEntityStateRow, NewEventRow};
use chrono::{DateTime, Utc};
use shardbox_core::storage::{RowChange, StageCommit};

/// What one statement commits: the lease renewed if still held, then the rows delivered,
/// the states upserted and the events appended — all only if the lease was held. (Only
/// PostgreSQL reads it.)
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) struct StageStatement<'a> {
    /// The shard and the lease that must still hold it.
    pub(crate) shard: i32,
    /// The lease's epoch.
    pub(crate) epoch: i64,
    /// The lease's node.
    pub(crate) node_id: &'a str,
    /// The renewed lease's end (µs).
    pub(crate) lease_until: i64,
    /// The rows delivered (distinct, ascending), each a row of the shard.
    pub(crate) delivered: &'a [i64],
    /// When they were delivered (µs).
    pub(crate) at: i64,
    /// Their deduplication window's end (µs).
    pub(crate) keep_until: i64,
    /// States of distinct keys to upsert (see `Dialect::upsert_state_rows`).
    pub(crate) states: &'a [NewEntityStateRow<'a>],
    /// Events to append, last (see `Dialect::append_event_rows`).
    pub(crate) events: &'a [NewEventRow],
}

/// What the statement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StageCounts {
    /// Whether the lease still held the shard (else nothing was written).
    pub(crate) fenced: bool,
    /// Rows marked delivered.
    pub(crate) delivered: usize,
    /// Events appended (an id already stored is skipped).
    pub(crate) events: usize,
}

/// The rows delivered by a commit of the common shape: distinct, ascending, and their one
/// deduplication window's end.
pub(crate) type DeliveredRows = (Vec<i64>, Option<DateTime<Utc>>);

/// Whether `commit` has the shape one statement commits — it delivers rows (all with one
/// `keep_until`), upserts states and appends events, and changes nothing else: no other row
/// change, deleted state, dead letter, fan-out row, purge, recorded outcome, catch-up or
/// released hold. If so, its delivered rows (none for no updates at all).
pub(crate) fn one_statement_shape(commit: &StageCommit) -> Option<DeliveredRows> {
    let nothing_else = commit.release_holds.is_empty()
        && commit.dead_letters.is_empty()
        && commit.catch_ups.is_empty()
        && commit.purge_catch_ups_before.is_none()
        && commit.writes.messages.is_empty()
        && commit.purge_delivered == 0
        && commit.outcomes.is_empty()
        && commit.in_transaction.is_empty()
        && commit.outbox.is_empty()
        && commit.states.iter().all(|w| w.state.is_some());
    if !nothing_else {
        return None;
    }
    let mut window = None;
    let mut seqs = Vec::with_capacity(commit.updates.len());
    for update in &commit.updates {
        let RowChange::Delivered { keep_until } = update.change else {
            return None;
        };
        match window {
            None => window = Some(keep_until),
            Some(w) if w == keep_until => {}
            Some(_) => return None,
        }
        seqs.push(update.seq);
    }
    seqs.sort_unstable();
    seqs.dedup();
    Some((seqs, window))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardbox_conformance::fixtures::{delivered, key, secs, stage, state};
    use shardbox_core::storage::RowUpdate;
    use shardbox_core::{Lease, LeaseEpoch, NodeId, ShardIndex, WorkerId};

    fn commit(updates: Vec<RowUpdate>) -> StageCommit {
        let lease = Lease {
            shard: ShardIndex(0),
            node_id: NodeId("n".into()),
            worker_id: WorkerId(1),
            epoch: LeaseEpoch(1),
            picked_at: secs(0),
            lease_until: secs(30),
            taken_over: false,
        };
        stage(&lease, secs(1), updates)
    }

    #[test]
    fn rows_delivered_in_one_window_are_sorted_and_distinct() {
        let mut c = commit(vec![
            delivered(7, secs(100)),
            delivered(3, secs(100)),
            delivered(7, secs(100)),
        ]);
        c.states = vec![state(key("a"), Some("{}")), state(key("a"), Some("{}"))];
        let (seqs, window) = one_statement_shape(&c).unwrap();
        assert_eq!(seqs, vec![3, 7]);
        assert_eq!(window, Some(secs(100)));
    }

    #[test]
    fn no_updates_deliver_no_rows() {
        assert_eq!(one_statement_shape(&commit(vec![])), Some((vec![], None)));
    }

    #[test]
    fn two_windows_or_another_change_take_the_transaction() {
        let two_windows = commit(vec![delivered(1, secs(100)), delivered(2, secs(200))]);
        assert_eq!(one_statement_shape(&two_windows), None);
        let removed = RowUpdate {
            seq: 2,
            change: RowChange::Remove,
        };
        assert_eq!(
            one_statement_shape(&commit(vec![delivered(1, secs(100)), removed])),
            None
        );
    }

    #[test]
    fn a_deleted_state_or_any_other_part_takes_the_transaction() {
        let base = || commit(vec![delivered(1, secs(100))]);
        assert!(one_statement_shape(&base()).is_some());
        let mut deleting = base();
        deleting.states = vec![state(key("a"), Some("{}")), state(key("a"), None)];
        assert_eq!(one_statement_shape(&deleting), None);
        let mut purging = base();
        purging.purge_delivered = 10;
        assert_eq!(one_statement_shape(&purging), None);
        let mut catching_up = base();
        catching_up.purge_catch_ups_before = Some(secs(0));
        assert_eq!(one_statement_shape(&catching_up), None);
        let mut relaying = base();
        relaying.outbox = vec![shardbox_core::storage::OutboxWrite {
            database: 1,
            write: shardbox_conformance::fixtures::command(0, "a", "a1"),
        }];
        assert_eq!(one_statement_shape(&relaying), None);
    }
}

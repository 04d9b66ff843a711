//! A stage commit of the common shape as one statement, where the backend has one.
//!
//! ```text
//!  StageCommit ─► of_shape: only delivered rows (one keep_until), state upserts, events?
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
use shardbox_core::storage::{RowChange, RowUpdate};

/// What one statement commits: the lease renewed if still held, then the rows delivered,
/// the states upserted and the events appended — all only if the lease was held.
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

/// The delivered rows of `updates` (distinct, ascending) and their one `keep_until`, if
/// every update delivers a row and all share that window (`None` for no updates at all is
/// `Some` with no rows); `None` if any update is another change or the windows differ.
pub(crate) fn delivered_only(
    updates: &[RowUpdate],
) -> Option<(Vec<i64>, Option<chrono::DateTime<chrono::Utc>>)> {
    let mut window = None;
    let mut seqs = Vec::with_capacity(updates.len());
    for update in updates {
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
    use chrono::{TimeZone, Utc};

    fn delivered(seq: i64, secs: i64) -> RowUpdate {
        RowUpdate {
            seq,
            change: RowChange::Delivered {
                keep_until: Utc.timestamp_opt(secs, 0).unwrap(),
            },
        }
    }

    #[test]
    fn rows_delivered_in_one_window_are_sorted_and_distinct() {
        let (seqs, window) =
            delivered_only(&[delivered(7, 100), delivered(3, 100), delivered(7, 100)]).unwrap();
        assert_eq!(seqs, vec![3, 7]);
        assert_eq!(window, Some(Utc.timestamp_opt(100, 0).unwrap()));
    }

    #[test]
    fn no_updates_deliver_no_rows() {
        assert_eq!(delivered_only(&[]), Some((vec![], None)));
    }

    #[test]
    fn two_windows_or_another_change_take_the_transaction() {
        assert_eq!(
            delivered_only(&[delivered(1, 100), delivered(2, 200)]),
            None
        );
        let removed = RowUpdate {
            seq: 2,
            change: RowChange::Remove,
        };
        assert_eq!(delivered_only(&[delivered(1, 100), removed]), None);
    }
}

//! A target whose handler left writes for the commit's transaction (a SQL projection): put on
//! the Conveyor with what its rows become if those writes fail.
//!
//! ```text
//!  rows r0 … rn of the target (seq order), writes for the first k handled ones
//!  commit: all k written      ─► the intents recorded now stand (Delivered, …)
//!          message j failed   ─► r0 … r(j-1) delivered as recorded; rj decided by the monitor
//!                                and the kind's policy (the error as the handler's); the rows
//!                                after it wait behind it, as after any failure
//! ```
//!
//! The decision is made when the commit runs, with the stage's time, by the same rules as a
//! handler's failure (`settle::decide`, `settle::behind`).

use super::settle::{behind, decide};
use chrono::{DateTime, Utc};
use shardbox_core::storage::{
    EntityKey, FailedBatch, InTransaction, TransactionError, TransactionalWork,
};
use shardbox_core::{settle_rows, HandlerError, InTransactionApply, InboxMessage, StationContext};
use std::any::Any;
use std::sync::Arc;

/// The writes of one target and the rows they stand for.
struct TargetWrites {
    writes: InTransactionApply,
    env: Arc<StationContext>,
    now: DateTime<Utc>,
    /// Every row of the target in the page, in `seq` order; the writes are for a prefix.
    rows: Vec<InboxMessage>,
}

impl TransactionalWork for TargetWrites {
    fn len(&self) -> usize {
        self.writes.0.len()
    }

    fn apply(&self, conn: &mut dyn Any, index: usize) -> Result<(), TransactionError> {
        self.writes.0.apply(conn, index).map_err(Into::into)
    }

    fn settle_failure(&self, failed: usize, error: TransactionError) -> FailedBatch {
        let error = match error.downcast::<HandlerError>() {
            Ok(e) => *e,
            Err(other) => HandlerError::new(other.to_string()),
        };
        let Some(m) = self.rows.get(failed) else {
            return FailedBatch::default();
        };
        tracing::warn!(seq = m.seq, kind = %m.message.target_kind, target = %m.message.target_id, attempts = m.attempts + 1, %error, "write inside the stage's transaction failed");
        let first = decide(&self.env, self.now, m, &error);
        let rest = behind(&first, self.now);
        let rows = self.rows[failed..].to_vec();
        let mut intents = vec![first];
        intents.resize(rows.len(), rest);
        settle_rows(&self.env, self.now, rows, intents)
    }
}

/// Puts `target`'s `writes` on the `conveyor`, for its rows at page indexes `rows`.
pub(super) fn put(
    conveyor: &mut shardbox_core::Conveyor,
    target: &EntityKey,
    rows: &[usize],
    writes: InTransactionApply,
) {
    let page = conveyor.page();
    let rows: Vec<InboxMessage> = rows.iter().map(|&i| page[i].clone()).collect();
    let work = TargetWrites {
        writes,
        env: conveyor.context().clone(),
        now: conveyor.now(),
        rows,
    };
    let seqs = work.rows.iter().map(|m| m.seq).collect();
    conveyor.in_transaction(InTransaction {
        target: target.clone(),
        seqs,
        work: Arc::new(work),
    });
}

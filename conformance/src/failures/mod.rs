//! Failure cases: first-failure times, blocked rows and targets, the operators' dead-letter
//! and unblock API, TTL expiry reads, lease takeovers.
//!
//! ```text
//!  retries       first-failure times kept across retries; a blocked row stops only its target
//!  unblock       the unblock actions, and the rows parked behind a block until it
//!  dead_letters  dead letters listed, counted, purged, requeued (once, under contention)
//!  expiry        rows whose TTL passed, due or not
//!  takeover      a pick-up that tells a take-over from a free shard
//! ```

use crate::fixtures::*;
use chrono::{DateTime, Utc};
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{
    DeadLetter, DeadLetterFilter, DeadLetterId, Requeue, RowChange, RowUpdate, Unblock,
};
use shardbox_core::{InboxMessage, Lease, MessageStatus, ShardIndex, Storage};
use std::sync::Arc;

mod dead_letters;
mod expiry;
mod retries;
mod takeover;
mod unblock;

pub use dead_letters::{
    concurrent_requeue_of_one_dead_letter_requeues_it_once,
    dead_letters_are_listed_counted_and_purged_by_filter,
    requeued_dead_letters_return_to_the_inbox,
};
pub use expiry::expired_rows_are_found_due_or_not;
pub use retries::{blocked_row_stops_only_its_target, first_failure_time_is_kept_across_retries};
pub use takeover::pick_up_tells_a_takeover_from_a_free_shard;
pub use unblock::{
    rows_behind_a_block_are_parked_until_the_unblock, unblock_by_requeue_drop_or_dead_letter,
};

fn retry(seq: i64, at: DateTime<Utc>, attempts: u32, error: &str) -> RowUpdate {
    RowUpdate {
        seq,
        change: RowChange::RetryAt {
            at,
            attempts,
            error: error.into(),
            errors: Default::default(),
        },
    }
}

fn block(seq: i64, attempts: u32, error: &str) -> RowUpdate {
    RowUpdate {
        seq,
        change: RowChange::Block {
            attempts,
            error: error.into(),
            errors: Default::default(),
        },
    }
}

/// Dead-letters `row` at `at` with `reason` in a fenced commit (removing it from the Inbox).
async fn kill<S: Storage>(store: &S, row: &InboxMessage, reason: &str, at: DateTime<Utc>) {
    let lease: Lease = pick(store, row.shard.0, "node-a", at).await;
    let mut commit = stage(
        &lease,
        at,
        vec![RowUpdate {
            seq: row.seq,
            change: RowChange::Remove,
        }],
    );
    commit.dead_letters = vec![DeadLetter {
        original: row.clone(),
        reason: reason.into(),
        attempts: row.attempts + 1,
        first_attempt_at: Some(row.first_failed_at.unwrap_or(at)),
        last_attempt_at: at,
    }];
    store.commit_stage(commit).await.expect("commit");
    store.release(&lease).await.expect("release");
}

async fn row_of<S: Storage + Inspect>(store: &S, signal: &str) -> InboxMessage {
    store
        .rows()
        .await
        .expect("rows")
        .into_iter()
        .find(|r| r.message.signal_id.0 == signal)
        .unwrap_or_else(|| panic!("row {signal} is in the Inbox"))
}

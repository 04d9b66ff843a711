//! Re-sharding cases: the switch moves every row and record to its target's shard and
//! re-lays the lock table, or writes nothing; a write addressed by another count is refused
//! whole; one announcement is in force at a time; no epoch is handed out twice across
//! layouts.
//!
//! ```text
//!  switch     the switch moves every row and record, or is refused whole
//!  addressed  writes addressed by a shard count: checked, counted, refused whole
//!  layout     one announcement in force at a time; no epoch handed out twice
//! ```

use crate::catch_up::{ids, spec};
use crate::fixtures::*;
use chrono::Duration;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{
    DeadLetter, DeadLetterFilter, Lease, ReshardAnnouncement, ReshardSwitch, Route, RowChange,
    RowUpdate,
};
use shardbox_core::{InboxWrite, ShardIndex, Storage, StorageError};
use std::collections::BTreeMap;
use std::sync::Arc;

mod addressed;
mod layout;
mod switch;

pub use addressed::{
    a_write_addressed_by_another_count_is_refused_whole,
    addressed_writes_of_messages_are_checked_and_counted,
};
pub use layout::{
    a_shard_made_again_hands_out_no_epoch_twice, one_reshard_announcement_is_in_force_at_a_time,
};
pub use switch::{
    a_reshard_switch_is_refused_whole, a_reshard_switch_moves_every_row_to_its_targets_shard,
};

/// The test's strategy: an id's length modulo the count (spreads "a".."ggggggg" over shards).
fn route(count: u32) -> Route {
    Arc::new(move |_kind: &str, id: &str| ShardIndex(id.len() as u32 % count))
}

/// A command to `account/<id>` in its shard among `count`.
fn routed(count: u32, id: &str, signal: &str) -> InboxWrite {
    command(id.len() as u32 % count, id, signal)
}

/// Asserts that `result` is the refusal of a count that changed from `expected` to `recorded`.
fn assert_count_changed<T: std::fmt::Debug>(
    result: &Result<T, StorageError>,
    expected: u32,
    recorded: u32,
) {
    assert!(
        matches!(
            result,
            Err(StorageError::ShardCountChanged { expected: e, recorded: r })
                if *e == expected && *r == recorded
        ),
        "expected ShardCountChanged {{ expected: {expected}, recorded: {recorded} }}, got {result:?}"
    );
}

/// The operator's leases of shards `0..count`, at `now`.
async fn hold_all<S: Storage>(
    store: &S,
    count: u32,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Lease> {
    let mut leases = Vec::new();
    for shard in 0..count {
        leases.push(pick(store, shard, "operator", now).await);
    }
    leases
}

const TARGETS: [&str; 7] = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg"];

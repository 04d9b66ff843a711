//! Catch-up job cases: start, overlap refusal, updates, completion, purge, concurrent starts.
//!
//! ```text
//!  start     a job's lifecycle, overlapping starts (one wins), targets reset, shards re-fenced
//!  progress  progress committed with the stage, event seqs and counts
//!  parked    parked rows settled at completion; a parked retrying row keeps no target waiting
//!  spread    one database's part of a catch-up over several databases
//! ```

use crate::fixtures::*;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{CatchUpJob, CatchUpStatus, CatchUpTargets, NewCatchUp};
use shardbox_core::{ShardIndex, Storage, StorageError, WorkerId};
use std::sync::Arc;

mod parked;
mod progress;
mod spread;
mod start;

pub use parked::{
    a_parked_retrying_row_does_not_make_its_target_wait, parked_rows_settle_when_the_job_completes,
};
pub use progress::{catch_up_progress_commits_with_the_stage, event_seqs_and_counts};
pub use spread::one_databases_part_of_a_catch_up_over_several;
pub use start::{
    catch_up_lifecycle, catch_up_start_resets_targets_and_refences_shards,
    concurrent_overlapping_catch_up_starts_one_wins,
};

pub(super) fn spec(kind: &str, tenant: &str, targets: CatchUpTargets) -> NewCatchUp {
    NewCatchUp {
        projection_kind: kind.into(),
        tenant: tenant.into(),
        targets,
        since: Some(secs(5)),
        affected_shards: vec![ShardIndex(1), ShardIndex(3)],
        total_estimate: 42,
        created_at: secs(0),
        version_of: None,
        databases: 1,
    }
}

pub(super) fn ids(ids: &[&str]) -> CatchUpTargets {
    CatchUpTargets::Ids(ids.iter().map(|s| s.to_string()).collect())
}

//! Catch-up jobs as stored: one row per job, its targets, cursor and counters.
//!
//! The lifecycle is `Started → InProgress → Finalizing → Completed`. Starting is atomic: a
//! backend refuses a job that overlaps a running one (same projection kind, intersecting ids
//! or "all") with [`StorageError::CatchUpOverlap`](crate::StorageError), also when two nodes
//! start one at the same instant.

use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// The state of a catch-up job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CatchUpStatus {
    /// Created; the projection state is not reset yet.
    Started,
    /// Replaying history.
    InProgress,
    /// History replayed; switching the targets back to live delivery.
    Finalizing,
    /// Done.
    Completed,
}

impl CatchUpStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUpStatus::Started => "started",
            CatchUpStatus::InProgress => "in_progress",
            CatchUpStatus::Finalizing => "finalizing",
            CatchUpStatus::Completed => "completed",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "started" => CatchUpStatus::Started,
            "in_progress" => CatchUpStatus::InProgress,
            "finalizing" => CatchUpStatus::Finalizing,
            "completed" => CatchUpStatus::Completed,
            _ => return None,
        })
    }

    /// Whether the job still runs (blocks overlapping jobs).
    pub fn is_running(self) -> bool {
        self != CatchUpStatus::Completed
    }
}

/// Which instances a catch-up rebuilds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatchUpTargets {
    /// Every instance of the projection kind.
    All,
    /// These ids only.
    Ids(Vec<String>),
}

impl CatchUpTargets {
    /// Whether two target sets share an instance.
    pub fn overlaps(&self, other: &CatchUpTargets) -> bool {
        match (self, other) {
            (CatchUpTargets::All, _) | (_, CatchUpTargets::All) => true,
            (CatchUpTargets::Ids(a), CatchUpTargets::Ids(b)) => a.iter().any(|id| b.contains(id)),
        }
    }
}

/// A catch-up to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCatchUp {
    /// The projection kind to rebuild.
    pub projection_kind: String,
    /// Tenant of the instances.
    pub tenant: String,
    /// Which instances.
    pub targets: CatchUpTargets,
    /// Replay events that occurred at or after this time (all history if `None`).
    pub since: Option<DateTime<Utc>>,
    /// The shards the targets live in (all shards for `All`).
    pub affected_shards: Vec<ShardIndex>,
    /// Estimated number of events to replay.
    pub total_estimate: i64,
    /// When it was asked for.
    pub created_at: DateTime<Utc>,
}

/// A stored catch-up job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatchUpJob {
    /// Job id, unique.
    pub id: i64,
    /// What was asked for.
    pub spec: NewCatchUp,
    /// Where it is.
    pub status: CatchUpStatus,
    /// The `seq` of the last event replayed.
    pub cursor: i64,
    /// Events replayed so far.
    pub replayed: i64,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it completed.
    pub finished_at: Option<DateTime<Utc>>,
}

/// The `catch_ups` table.
#[async_trait]
pub trait CatchUpStore: Send + Sync + 'static {
    /// Creates a job in status `Started`, atomically refusing one that overlaps a running job.
    /// In the same transaction it resets the targets (deletes the entity states of the
    /// projection kind and tenant — only the listed ids for [`CatchUpTargets::Ids`]) and
    /// re-fences every affected shard (epoch + 1, lease freed), so that a stage that read its
    /// page before the job existed cannot commit a live event onto the reset state.
    async fn start_catch_up(&self, job: NewCatchUp) -> Result<CatchUpJob, StorageError>;

    /// Whether, in `shards`, a replayed row (`to_catch_up`) of `projection_kind`/`tenant` is
    /// still undelivered, or a live event row of that kind whose event `seq <= cursor` (one the
    /// replay already applied, so it must be dropped, not delivered) is still pending. Parked
    /// rows (see [`crate::catch_up::parked_until`]) do not count: completing the job settles
    /// them. A job completes only when neither is left. Reads only pending rows of those shards.
    async fn has_pending_replay(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        cursor: i64,
    ) -> Result<bool, StorageError>;

    /// One job by id.
    async fn catch_up(&self, id: i64) -> Result<Option<CatchUpJob>, StorageError>;

    /// All jobs not yet completed.
    async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError>;

    /// Stores a job's status, cursor and counters. Storing a job as `Completed` (here or in a
    /// [`StageCommit`](crate::storage::StageCommit)) also settles its parked rows in the same
    /// transaction, as described at [`StageCommit::catch_ups`](crate::storage::StageCommit).
    async fn update_catch_up(&self, job: &CatchUpJob) -> Result<(), StorageError>;

    /// Deletes completed jobs finished before `before`; returns how many.
    async fn purge_catch_ups(&self, before: DateTime<Utc>) -> Result<usize, StorageError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_rules() {
        let ids = |v: &[&str]| CatchUpTargets::Ids(v.iter().map(|s| s.to_string()).collect());
        assert!(CatchUpTargets::All.overlaps(&ids(&["a"])));
        assert!(ids(&["a"]).overlaps(&CatchUpTargets::All));
        assert!(ids(&["a", "b"]).overlaps(&ids(&["b"])));
        assert!(!ids(&["a"]).overlaps(&ids(&["b"])));
        assert!(!ids(&[]).overlaps(&ids(&["b"])));
    }

    #[test]
    fn statuses_round_trip() {
        for s in [
            CatchUpStatus::Started,
            CatchUpStatus::InProgress,
            CatchUpStatus::Finalizing,
            CatchUpStatus::Completed,
        ] {
            assert_eq!(CatchUpStatus::parse(s.as_str()), Some(s));
        }
        assert!(!CatchUpStatus::Completed.is_running());
    }
}

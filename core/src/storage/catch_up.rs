//! Catch-up jobs as stored: one row per job, its targets, cursor and counters.
//!
//! The lifecycle is `Started → InProgress → Finalizing → Completed`, or `… → Cancelled` once an
//! operator asked for a cancel ([`CatchUpStore::cancel_catch_up`]). Starting is atomic: a
//! backend refuses a job that overlaps a running one (same projection kind, intersecting ids
//! or "all") with [`StorageError::CatchUpOverlap`](crate::StorageError), also when two nodes
//! start one at the same instant.
//!
//! A cancel is a request, not a transition: the backend only stamps
//! [`CatchUpJob::cancel_requested_at`] on a running job. The job's own steps, which commit
//! under the lease of the shard holding its tick (fenced like every stage), see the request,
//! stop replaying and end the job `Cancelled` through the same settling as a completion. So a
//! cancel and a completion can never both be applied: whichever step commits first decides.

use super::spread::{CatchUpSpread, SpreadProgress, StorePositions};
use super::ReadModelVersion;
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
    /// Stopped on an operator's request before its replay was complete; its parked live rows
    /// were settled as at a completion, and its targets are back on live delivery.
    Cancelled,
}

impl CatchUpStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUpStatus::Started => "started",
            CatchUpStatus::InProgress => "in_progress",
            CatchUpStatus::Finalizing => "finalizing",
            CatchUpStatus::Completed => "completed",
            CatchUpStatus::Cancelled => "cancelled",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "started" => CatchUpStatus::Started,
            "in_progress" => CatchUpStatus::InProgress,
            "finalizing" => CatchUpStatus::Finalizing,
            "completed" => CatchUpStatus::Completed,
            "cancelled" => CatchUpStatus::Cancelled,
            _ => return None,
        })
    }

    /// Whether the job still runs (blocks overlapping jobs).
    pub fn is_running(self) -> bool {
        !self.is_finished()
    }

    /// Whether the job is over (completed or cancelled): it takes no step, blocks no other
    /// job, and is purged after the retention.
    pub fn is_finished(self) -> bool {
        matches!(self, CatchUpStatus::Completed | CatchUpStatus::Cancelled)
    }

    /// The stored names of the finished statuses.
    pub const FINISHED: [&'static str; 2] = ["completed", "cancelled"];
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
    /// The read model whose new version this job builds beside the served one (a blue/green
    /// rebuild, see [`ReadModelVersion`]): its completion switches the model to
    /// `projection_kind`. `None` for a plain catch-up.
    pub version_of: Option<String>,
    /// How many databases the job spans: 1 on a storage of one database; a storage over
    /// several sets its own count when it starts the job (see [`CatchUpSpread`]).
    pub databases: u32,
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
    /// The event store's last `seq` when the job's first step ran: the replay ends once its
    /// cursor reaches it (events appended later reach the projection as live copies, parked
    /// until the completion), so a replay under steady traffic ends although new events keep
    /// coming. `None` until the first step.
    pub until_seq: Option<i64>,
    /// Events replayed so far.
    pub replayed: i64,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it completed or was cancelled.
    pub finished_at: Option<DateTime<Utc>>,
    /// When an operator asked to cancel it ([`CatchUpStore::cancel_catch_up`]), if one did.
    /// Only that call writes it: storing the job ([`CatchUpStore::update_catch_up`], a
    /// stage commit) leaves the stored value as it is, so a step that read the job before
    /// the request cannot erase it.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// Where a job over several databases stands (`None` for one database): its replay's set
    /// and its end's positions, written by its steps.
    pub spread: Option<CatchUpSpread>,
}

impl CatchUpJob {
    /// The job's spread if it spans several databases (what `spec.databases` says).
    pub fn spread_of(spec: &NewCatchUp) -> Option<CatchUpSpread> {
        (spec.databases > 1).then(|| CatchUpSpread::new(spec.databases))
    }

    /// The cursor the settlement of its parked rows judges them by (a row whose event `seq`
    /// is at most this was applied by the replay and is removed): the job's cursor on one
    /// database; 0 over several, where every parked row is after the set.
    pub fn settled_cursor(&self) -> i64 {
        if self.spread.is_some() {
            0
        } else {
            self.cursor
        }
    }

    /// The affected shards in the database that stores the job, by their index there: all of
    /// them on one database; over several, the home database's (its first).
    pub fn affected_shards_here(&self) -> Vec<ShardIndex> {
        match &self.spread {
            None => self.spec.affected_shards.clone(),
            Some(spread) => spread.shards_in(0, &self.spec.affected_shards),
        }
    }
}

/// The `catch_ups` table.
#[async_trait]
pub trait CatchUpStore: Send + Sync + 'static {
    /// Creates a job in status `Started`, atomically refusing one that overlaps a running job.
    /// In the same transaction it resets the targets (deletes the entity states of the
    /// projection kind and tenant — only the listed ids for [`CatchUpTargets::Ids`]) and
    /// re-fences every affected shard (epoch + 1, lease freed), so that a stage that read its
    /// page before the job existed cannot commit a live event onto the reset state.
    ///
    /// `shard_count` is the count `job.affected_shards` were computed by: refused with
    /// [`StorageError::ShardCountChanged`], writing nothing, if another one is recorded (the
    /// Inbox was re-sharded; compute them again), checked under the lock a re-sharding's
    /// switch takes (see `InboxStore::write_all_addressed`).
    ///
    /// With [`NewCatchUp::version_of`], the same transaction records the build on the read
    /// model's version record ([`ReadModelVersion::start_build`]; refused with
    /// [`StorageError::VersionRefused`], writing nothing).
    async fn start_catch_up(
        &self,
        job: NewCatchUp,
        shard_count: u32,
    ) -> Result<CatchUpJob, StorageError>;

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

    /// Asks running job `id` to stop, stamping `cancel_requested_at` with `at` (an earlier
    /// request's time is kept). Returns the job as stored, `None` if there is no such job, and
    /// [`StorageError::CatchUpNotRunning`] if it already completed or was cancelled. Changes
    /// nothing else: the job's next step (see [`crate::catch_up::decide_step`]) stops the
    /// replay and, once the replayed rows already written are delivered, stores the job
    /// `Cancelled`, which settles its parked rows as a completion does.
    async fn cancel_catch_up(
        &self,
        id: i64,
        at: DateTime<Utc>,
    ) -> Result<Option<CatchUpJob>, StorageError>;

    /// All jobs not yet completed or cancelled.
    async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError>;

    /// Stores a job's status, cursor and counters (not `cancel_requested_at`). Storing a job as
    /// `Completed` or `Cancelled` (here or in a [`StageCommit`](crate::storage::StageCommit))
    /// also settles its parked rows in the same transaction, as described at
    /// [`StageCommit::catch_ups`](crate::storage::StageCommit), and, for a job that builds a
    /// read model's version, switches the model to it or drops the build
    /// ([`ReadModelVersion::finish_build`]).
    async fn update_catch_up(&self, job: &CatchUpJob) -> Result<(), StorageError>;

    /// Every read model's version record, by model name. A model never built beside has none
    /// (it is served by the kind of its own name).
    async fn read_model_versions(&self) -> Result<Vec<ReadModelVersion>, StorageError>;

    /// Retires version `kind` of read model `model`: deletes its states (every tenant) and
    /// forgets it as the previous version. Refused with [`StorageError::VersionRefused`] for
    /// the served and the building kind ([`ReadModelVersion::retire`]). Returns how many
    /// states it deleted. A SQL projection's tables are the application's to drop.
    async fn retire_version(&self, model: &str, kind: &str) -> Result<u64, StorageError>;

    /// Deletes completed and cancelled jobs finished before `before`; returns how many.
    async fn purge_catch_ups(&self, before: DateTime<Utc>) -> Result<usize, StorageError>;

    /// One database's part of the first step of a job over several databases, in one
    /// transaction: re-fences `spec.affected_shards` (epoch + 1, lease freed; a stage that read
    /// its page before cannot commit after), deletes the targets' states (as
    /// [`CatchUpStore::start_catch_up`] does), and returns the event store's last `seq` as
    /// this transaction sees it. The storage over the databases reads the replay's set only
    /// once every database is prepared. Doing it again is harmless. `own`, the shard of the stage that asks, is not re-fenced (its commit would be).
    async fn prepare_catch_up(
        &self,
        spec: &NewCatchUp,
        own: Option<ShardIndex>,
    ) -> Result<i64, StorageError>;

    /// This database's outbox and Inbox positions (see [`StorePositions`]).
    async fn store_positions(&self) -> Result<StorePositions, StorageError>;

    /// Whether, in `shards`, a replayed row (`to_catch_up`) of `projection_kind`/`tenant` is
    /// still undelivered, or a live event row of that kind with an Inbox `seq <= up_to_seq`
    /// is still pending and not parked (no stage has decided it yet, or it waits for a retry
    /// or a hold). Reads only pending rows of those shards.
    async fn has_unsettled_rows(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        up_to_seq: i64,
    ) -> Result<bool, StorageError>;

    /// Releases every parked live event row of `job`'s targets in `job.spec.affected_shards`
    /// (due at once, in `seq` order), after re-fencing those shards in the same transaction
    /// (so none is parked after it by a stage that read the job before), and records that
    /// this database released `job` ([`CatchUpStore::released_catch_ups`]). Returns how many.
    /// For a job over several databases, whose parked rows are all after its set. `own`, the
    /// shard of the stage that asks, is not re-fenced (its commit would be).
    async fn release_parked(
        &self,
        job: &CatchUpJob,
        own: Option<ShardIndex>,
    ) -> Result<usize, StorageError>;

    /// The jobs this database released the parked rows of ([`CatchUpStore::release_parked`]).
    async fn released_catch_ups(&self) -> Result<Vec<i64>, StorageError>;

    /// Where the end of `job`, a job over several databases, stands: records what is due
    /// (the outboxes' ends once the replay ended, the Inboxes' ends once those are drained)
    /// and says whether anything is still to drain or deliver. Refused with
    /// [`StorageError::Unsupported`] by a storage of one database, where no job spreads.
    async fn spread_progress(&self, job: &CatchUpJob) -> Result<SpreadProgress, StorageError> {
        Err(StorageError::Unsupported {
            what: format!("catch-up job {} over several databases", job.id),
            reason: "this storage holds one database".to_owned(),
        })
    }
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
            CatchUpStatus::Cancelled,
        ] {
            assert_eq!(CatchUpStatus::parse(s.as_str()), Some(s));
            assert_eq!(
                s.is_finished(),
                CatchUpStatus::FINISHED.contains(&s.as_str())
            );
        }
        assert!(!CatchUpStatus::Completed.is_running());
        assert!(!CatchUpStatus::Cancelled.is_running());
        assert!(CatchUpStatus::Finalizing.is_running());
    }
}

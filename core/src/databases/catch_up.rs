//! Catch-up jobs over several databases (see [`crate::storage::CatchUpSpread`] for the
//! protocol): the job lives in the home database; its steps commit there (its ticks are
//! placed in the home database, see `strategy.rs`); what it does in the other databases is
//! done here, around those commits.
//!
//! ```text
//!  start_catch_up        ─► home: the job (spread over N), overlap refused, home's targets reset
//!                        ─► every database: prepare_catch_up (re-fence, reset), then every
//!                           database's last event seq: the set ─► home: stored with the job
//!  a step's commit with the job
//!    Started, set not read ─► the same, if the start did not finish it; stored in the commit
//!    Completed / Cancelled ─► home: the job stored `settling` (stages read each database's
//!                             release with it) ─► every other database: release_parked
//!                             (re-fence, release, record it) ─► the home commit ends it and
//!                             releases the home database's parked rows
//!  spread_progress       ─► outboxes' ends ─► drained? Inboxes' ends ─► rows left at or
//!                           below them? (reads; the step stores what they record)
//! ```
//!
//! Each part is repeated whole if the commit after it fails (another node's step, or this
//! one's next, does it again): re-fencing, resetting and releasing again change nothing more.

use super::Databases;
use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::storage::{
    CatchUpJob, CatchUpStatus, CatchUpStore, NewCatchUp, ReadModelVersion, SpreadProgress,
    StageCommit, StorePositions,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

impl Databases {
    /// `spec` as `database` sees it: its own affected shards, by their local index.
    fn local_spec(&self, database: u32, spec: &NewCatchUp) -> NewCatchUp {
        let mut local = spec.clone();
        local.affected_shards = spec
            .affected_shards
            .iter()
            .filter(|s| self.map.database_of(**s) == database)
            .map(|s| self.map.local(*s))
            .collect();
        local
    }

    /// `own` (a global shard) as `database` names it, if it is one of its shards.
    fn own_in(&self, database: u32, own: Option<ShardIndex>) -> Option<ShardIndex> {
        own.filter(|s| self.map.database_of(*s) == database)
            .map(|s| self.map.local(s))
    }

    /// Does what the catch-up jobs of a stage's commit need done in every database before the
    /// commit (see the module docs); `commit.lease.shard` is not re-fenced.
    pub(super) async fn around_catch_ups(
        &self,
        commit: &mut StageCommit,
    ) -> Result<(), StorageError> {
        let own = Some(commit.lease.shard);
        for job in &mut commit.catch_ups {
            let Some(spread) = job.spread.as_mut() else {
                continue;
            };
            if job.status == CatchUpStatus::Started && !spread.prepared() {
                self.prepare(job, own).await?;
            } else if job.status.is_finished() {
                self.settle(job, own).await?;
            }
        }
        Ok(())
    }

    /// Re-fences `job`'s affected shards (but `own`) and resets its targets in every database,
    /// reading each one's events' end there: the set, stored in `job` with its end.
    async fn prepare(
        &self,
        job: &mut CatchUpJob,
        own: Option<ShardIndex>,
    ) -> Result<(), StorageError> {
        // Every database reset before any end is read: a stage that has not seen the job yet
        // (its shard not re-fenced yet) may deliver a live row onto a state until its own
        // database is reset, and that row's event must be in the set the replay applies again.
        // Reading a database's end as its reset went would leave out an event of a database
        // read earlier whose copy was delivered, then erased, in one reset later (the node
        // test over three clusters lost such events).
        for (d, db) in self.dbs.iter().enumerate() {
            let d = d as u32;
            let spec = self.local_spec(d, &job.spec);
            db.prepare_catch_up(&spec, self.own_in(d, own)).await?;
        }
        let set = self.each(|_, db| db.last_event_seq()).await?;
        if let Some(spread) = job.spread.as_mut() {
            spread.events = set;
            job.until_seq = Some(spread.until_seq());
            tracing::info!(job = job.id, set = ?spread.events, "catch-up over several databases prepared: targets reset, replay set read");
        }
        Ok(())
    }

    /// Releases finishing `job`'s parked rows in every database, after storing it `settling`
    /// in the home database so that no stage parks another one meanwhile.
    async fn settle(
        &self,
        job: &mut CatchUpJob,
        own: Option<ShardIndex>,
    ) -> Result<(), StorageError> {
        if let Some(spread) = job.spread.as_mut().filter(|s| !s.settling) {
            spread.settling = true;
            let mut marking = job.clone();
            // Still running while its rows are released: a status it can end from.
            marking.status = CatchUpStatus::Finalizing;
            marking.finished_at = None;
            self.home().update_catch_up(&marking).await?;
        }
        let mut released = 0;
        for (d, db) in self.dbs.iter().enumerate().skip(1) {
            let d = d as u32;
            let mut local = job.clone();
            local.spec = self.local_spec(d, &job.spec);
            released += db.release_parked(&local, self.own_in(d, own)).await?;
        }
        tracing::info!(
            job = job.id,
            released,
            "catch-up over several databases settling: parked rows released in every database but the home one, which releases its own as the job ends"
        );
        Ok(())
    }

    /// Each database's positions, in database order.
    async fn positions(&self) -> Result<Vec<StorePositions>, StorageError> {
        self.each(|_, db| db.store_positions()).await
    }

    fn per_database(&self, what: &str) -> StorageError {
        StorageError::Unsupported {
            what: format!("{what} on a storage over several databases"),
            reason:
                "it is one database's part of a catch-up; the storage over them calls it on each"
                    .to_owned(),
        }
    }
}

#[async_trait]
impl CatchUpStore for Databases {
    async fn start_catch_up(
        &self,
        mut job: NewCatchUp,
        shard_count: u32,
    ) -> Result<CatchUpJob, StorageError> {
        // The job and its overlap check live in the home database; its first step resets the
        // targets in every database (the home database's start resets its own too).
        job.databases = self.map.count();
        let share = self.map.shard_count_of(0, shard_count);
        let mut started = match self.home().start_catch_up(job, share).await {
            Ok(job) => job,
            Err(e) => return Err(self.refusal(e, shard_count).await),
        };
        // Prepared at once, so that stages hold its targets' live rows (re-read each poll
        // interval) only for this moment; should this fail, its first step prepares it.
        let prepared = match self.prepare(&mut started, None).await {
            Ok(()) => self.home().update_catch_up(&started).await,
            Err(e) => Err(e),
        };
        if let Err(e) = prepared {
            tracing::warn!(job = started.id, error = %e, "catch-up over several databases not prepared at its start; its first step prepares it");
            started.spread = CatchUpJob::spread_of(&started.spec);
            started.until_seq = None;
        }
        Ok(started)
    }

    async fn has_pending_replay(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        _cursor: i64,
    ) -> Result<bool, StorageError> {
        // Replayed rows only: which live rows a replay covered is told by its set, and
        // `spread_progress` waits for them.
        for (d, db) in self.dbs.iter().enumerate() {
            let mine: Vec<ShardIndex> = shards
                .iter()
                .filter(|s| self.map.database_of(**s) == d as u32)
                .map(|s| self.map.local(*s))
                .collect();
            if !mine.is_empty()
                && db
                    .has_pending_replay(projection_kind, tenant, &mine, 0)
                    .await?
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn catch_up(&self, id: i64) -> Result<Option<CatchUpJob>, StorageError> {
        self.home().catch_up(id).await
    }

    async fn cancel_catch_up(
        &self,
        id: i64,
        at: DateTime<Utc>,
    ) -> Result<Option<CatchUpJob>, StorageError> {
        self.home().cancel_catch_up(id, at).await
    }

    async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError> {
        let mut jobs = self.home().running_catch_ups().await?;
        if jobs
            .iter()
            .any(|j| j.spread.as_ref().is_some_and(|s| s.settling))
        {
            // Whether each database released them: what its stages decide live rows by.
            let each = self.each(|_, db| db.released_catch_ups()).await?;
            for job in &mut jobs {
                if let Some(spread) = job.spread.as_mut().filter(|s| s.settling) {
                    spread.released = each
                        .iter()
                        .enumerate()
                        .map(|(d, ids)| d > 0 && ids.contains(&job.id))
                        .collect();
                }
            }
        }
        Ok(jobs)
    }

    async fn update_catch_up(&self, job: &CatchUpJob) -> Result<(), StorageError> {
        let mut job = job.clone();
        if job.spread.is_some() && job.status.is_finished() {
            self.settle(&mut job, None).await?;
        }
        self.home().update_catch_up(&job).await
    }

    async fn read_model_versions(&self) -> Result<Vec<ReadModelVersion>, StorageError> {
        self.home().read_model_versions().await
    }

    async fn retire_version(&self, model: &str, kind: &str) -> Result<u64, StorageError> {
        Err(StorageError::Unsupported {
            what: format!("retiring version `{kind}` of read model `{model}`"),
            reason: "a storage over several databases does not retire read-model versions yet; retire it on each database".to_owned(),
        })
    }

    async fn purge_catch_ups(&self, before: DateTime<Utc>) -> Result<usize, StorageError> {
        self.home().purge_catch_ups(before).await
    }

    async fn prepare_catch_up(
        &self,
        _spec: &NewCatchUp,
        _own: Option<ShardIndex>,
    ) -> Result<i64, StorageError> {
        Err(self.per_database("prepare_catch_up"))
    }

    async fn store_positions(&self) -> Result<StorePositions, StorageError> {
        Err(self.per_database("store_positions"))
    }

    async fn has_unsettled_rows(
        &self,
        _projection_kind: &str,
        _tenant: &str,
        _shards: &[ShardIndex],
        _up_to_seq: i64,
    ) -> Result<bool, StorageError> {
        Err(self.per_database("has_unsettled_rows"))
    }

    async fn release_parked(
        &self,
        _job: &CatchUpJob,
        _own: Option<ShardIndex>,
    ) -> Result<usize, StorageError> {
        Err(self.per_database("release_parked"))
    }

    async fn released_catch_ups(&self) -> Result<Vec<i64>, StorageError> {
        Err(self.per_database("released_catch_ups"))
    }

    async fn spread_progress(&self, job: &CatchUpJob) -> Result<SpreadProgress, StorageError> {
        let mut spread = job
            .spread
            .clone()
            .ok_or_else(|| StorageError::Unsupported {
                what: format!("the spread of catch-up job {}", job.id),
                reason: "the job was started on one database".to_owned(),
            })?;
        if spread.outboxes.is_empty() {
            // The replay has ended (its last rows committed before this step read anything).
            spread.outboxes = self
                .positions()
                .await?
                .iter()
                .map(|p| p.outbox_last)
                .collect();
            return Ok(SpreadProgress {
                spread,
                pending: true,
            });
        }
        if spread.inboxes.is_empty() {
            let firsts: Vec<Option<i64>> = self
                .positions()
                .await?
                .iter()
                .map(|p| p.outbox_first)
                .collect();
            if spread.outboxes_drained(&firsts) {
                // Read after every drain was seen: a copy trimmed from its outbox was
                // committed into its Inbox before, so it is at or below these.
                spread.inboxes = self
                    .positions()
                    .await?
                    .iter()
                    .map(|p| p.inbox_last)
                    .collect();
            }
            return Ok(SpreadProgress {
                spread,
                pending: true,
            });
        }
        for (d, db) in self.dbs.iter().enumerate() {
            let local = self.local_spec(d as u32, &job.spec);
            let up_to = spread.inboxes.get(d).copied().unwrap_or(0);
            if !local.affected_shards.is_empty()
                && db
                    .has_unsettled_rows(
                        &local.projection_kind,
                        &local.tenant,
                        &local.affected_shards,
                        up_to,
                    )
                    .await?
            {
                return Ok(SpreadProgress {
                    spread,
                    pending: true,
                });
            }
        }
        Ok(SpreadProgress {
            spread,
            pending: false,
        })
    }
}

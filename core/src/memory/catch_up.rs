//! The in-memory [`CatchUpStore`]: catch-up jobs.

use super::MemoryStorage;
use crate::model::error::StorageError;
use crate::model::ids::{LeaseEpoch, ShardIndex};
use crate::model::message::{MessageKind, MessageStatus};
use crate::storage::{
    CatchUpJob, CatchUpStatus, CatchUpStore, CatchUpTargets, NewCatchUp, ReadModelVersion,
    StorePositions,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

#[async_trait]
impl CatchUpStore for MemoryStorage {
    async fn start_catch_up(
        &self,
        job: NewCatchUp,
        shard_count: u32,
    ) -> Result<CatchUpJob, StorageError> {
        let mut state = self.lock();
        state.check_shard_count(shard_count)?;
        if let Some(running) = state.jobs.values().find(|j| {
            j.status.is_running()
                && j.spec.projection_kind == job.projection_kind
                && j.spec.tenant == job.tenant
                && j.spec.targets.overlaps(&job.targets)
        }) {
            return Err(StorageError::CatchUpOverlap {
                projection_kind: job.projection_kind,
                running_job: running.id,
            });
        }
        let id = state.jobs.keys().next_back().copied().unwrap_or(0) + 1;
        // The version build, checked before anything changes.
        let version = match &job.version_of {
            Some(model) => {
                let mut v = state
                    .versions
                    .get(model)
                    .cloned()
                    .unwrap_or_else(|| ReadModelVersion::first(model));
                v.start_build(&job.projection_kind, id)?;
                Some(v)
            }
            None => None,
        };
        // Reset the targets and re-fence the affected shards, as the durable backends do.
        state.reset_targets(&job, None);

        let spread = CatchUpJob::spread_of(&job);
        let created = CatchUpJob {
            id,
            updated_at: job.created_at,
            spec: job,
            status: CatchUpStatus::Started,
            cursor: 0,
            until_seq: None,
            replayed: 0,
            finished_at: None,
            cancel_requested_at: None,
            spread,
        };
        state.jobs.insert(id, created.clone());
        if let Some(v) = version {
            state.versions.insert(v.model.clone(), v);
        }
        Ok(created)
    }

    async fn has_pending_replay(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        cursor: i64,
    ) -> Result<bool, StorageError> {
        let state = self.lock();
        Ok(state.unsettled(projection_kind, tenant, shards, |_, m| {
            state
                .event_seq
                .get(&m.message.signal_id)
                .is_some_and(|e| *e <= cursor)
        }))
    }

    async fn catch_up(&self, id: i64) -> Result<Option<CatchUpJob>, StorageError> {
        Ok(self.lock().jobs.get(&id).cloned())
    }

    async fn cancel_catch_up(
        &self,
        id: i64,
        at: DateTime<Utc>,
    ) -> Result<Option<CatchUpJob>, StorageError> {
        let mut state = self.lock();
        let Some(job) = state.jobs.get_mut(&id) else {
            return Ok(None);
        };
        if job.status.is_finished() {
            return Err(StorageError::CatchUpNotRunning {
                job: id,
                status: job.status.as_str().to_owned(),
            });
        }
        job.cancel_requested_at.get_or_insert(at);
        Ok(Some(job.clone()))
    }

    async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError> {
        Ok(self
            .lock()
            .jobs
            .values()
            .filter(|j| j.status.is_running())
            .cloned()
            .collect())
    }

    async fn update_catch_up(&self, job: &CatchUpJob) -> Result<(), StorageError> {
        let mut state = self.lock();
        match state.jobs.get_mut(&job.id) {
            Some(stored) => {
                *stored = CatchUpJob {
                    cancel_requested_at: stored.cancel_requested_at,
                    ..job.clone()
                };
                if job.status.is_finished() {
                    state.finish_job(job, None);
                }
                Ok(())
            }
            None => Err(StorageError::Corrupt(format!(
                "catch-up job {} does not exist",
                job.id
            ))),
        }
    }

    async fn purge_catch_ups(&self, before: DateTime<Utc>) -> Result<usize, StorageError> {
        Ok(self.lock().purge_jobs(before))
    }

    async fn read_model_versions(&self) -> Result<Vec<ReadModelVersion>, StorageError> {
        Ok(self.lock().versions.values().cloned().collect())
    }

    async fn prepare_catch_up(
        &self,
        spec: &NewCatchUp,
        own: Option<ShardIndex>,
    ) -> Result<i64, StorageError> {
        let mut state = self.lock();
        state.reset_targets(spec, own);
        Ok(state.events.last().map_or(0, |e| e.seq))
    }

    async fn store_positions(&self) -> Result<StorePositions, StorageError> {
        let state = self.lock();
        let (outbox_first, outbox_last) = state.outbox.bounds();
        Ok(StorePositions {
            outbox_first,
            outbox_last,
            inbox_last: state.rows.keys().max().copied().unwrap_or(0),
        })
    }

    async fn has_unsettled_rows(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        up_to_seq: i64,
    ) -> Result<bool, StorageError> {
        let state = self.lock();
        Ok(state.unsettled(projection_kind, tenant, shards, |seq, _| seq <= up_to_seq))
    }

    async fn release_parked(
        &self,
        job: &CatchUpJob,
        own: Option<ShardIndex>,
    ) -> Result<usize, StorageError> {
        // Nothing parked is covered: every parked row of a job over several databases is
        // after its set, so a cursor of 0 releases them all.
        // This database's part, as a job of one: its shards as given, every parked row
        // released (a cursor of 0 covers nothing).
        let here = CatchUpJob {
            cursor: 0,
            spread: None,
            ..job.clone()
        };
        let mut state = self.lock();
        state.released_jobs.insert(job.id);
        Ok(state.settle_parked(&here, own))
    }

    async fn released_catch_ups(&self) -> Result<Vec<i64>, StorageError> {
        Ok(self.lock().released_jobs.iter().copied().collect())
    }

    async fn retire_version(&self, model: &str, kind: &str) -> Result<u64, StorageError> {
        let mut state = self.lock();
        let mut v = state
            .versions
            .get(model)
            .cloned()
            .unwrap_or_else(|| ReadModelVersion::first(model));
        v.retire(kind)?;
        let before = state.states.len();
        state.states.retain(|k, _| k.kind != kind);
        let deleted = (before - state.states.len()) as u64;
        state.versions.insert(model.to_owned(), v);
        Ok(deleted)
    }
}

impl super::State {
    /// Whether, in `shards`, a replayed row of `projection_kind`/`tenant` is pending, or a
    /// live event row of them that is not parked and that `live` (given its seq) picks.
    fn unsettled(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        live: impl Fn(i64, &crate::model::message::InboxMessage) -> bool,
    ) -> bool {
        shards.iter().any(|shard| {
            self.pending.get(shard).is_some_and(|p| {
                p.iter().any(|seq| {
                    let r = &self.rows[seq];
                    let m = &r.message;
                    m.target_kind == projection_kind
                        && m.tenant == tenant
                        && (r.status == MessageStatus::ToCatchUp
                            || (m.kind == MessageKind::Event
                                && !crate::catch_up::is_parked(m.deliver_after)
                                && live(*seq, r)))
                })
            })
        })
    }

    /// Settles the parked rows of a completed job (see `StageCommit::catch_ups`): removes the
    /// ones the replay covered, makes the others due, re-fences the affected shards but
    /// `own`.
    pub(super) fn settle_parked(&mut self, job: &CatchUpJob, own: Option<ShardIndex>) -> usize {
        let parked = crate::catch_up::parked_until();
        let mut covered = Vec::new();
        let mut released = Vec::new();
        let shards = job.affected_shards_here();
        let cursor = job.settled_cursor();
        for shard in &shards {
            let Some(pending) = self.pending.get(shard) else {
                continue;
            };
            for seq in pending {
                let m = &self.rows[seq].message;
                if m.deliver_after != Some(parked)
                    || m.kind != crate::model::message::MessageKind::Event
                    || m.target_kind != job.spec.projection_kind
                    || !crate::catch_up::covers(job, &m.tenant, &m.target_id)
                {
                    continue;
                }
                match self.event_seq.get(&m.signal_id) {
                    Some(e) if *e <= cursor => covered.push(*seq),
                    _ => released.push(*seq),
                }
            }
        }
        for seq in covered {
            self.remove(seq);
        }
        let count = released.len();
        for seq in released {
            if let Some(row) = self.rows.get_mut(&seq) {
                row.message.deliver_after = None;
                let shard = row.shard;
                // Due at once: back among the rows pages check.
                self.due.entry(shard).or_default().add(seq, None);
            }
        }
        for shard in &shards {
            if Some(*shard) == own {
                continue;
            }
            if let Some(s) = self.sessions.get_mut(shard) {
                s.epoch = LeaseEpoch(s.epoch.0 + 1);
                s.lease_until = None;
            }
        }
        count
    }

    /// Deletes the states of `spec`'s targets and re-fences its affected shards (epoch + 1,
    /// lease freed) but `own`, as a durable backend's start does.
    fn reset_targets(&mut self, spec: &NewCatchUp, own: Option<ShardIndex>) {
        self.states.retain(|k, _| {
            !(k.kind == spec.projection_kind
                && k.tenant == spec.tenant
                && match &spec.targets {
                    CatchUpTargets::All => true,
                    CatchUpTargets::Ids(ids) => ids.contains(&k.id),
                })
        });
        for shard in spec.affected_shards.iter().filter(|s| Some(**s) != own) {
            if let Some(s) = self.sessions.get_mut(shard) {
                s.epoch = LeaseEpoch(s.epoch.0 + 1);
                s.lease_until = None;
            }
        }
    }

    /// Ends `job` as a durable backend's transaction does: settles its parked rows (see
    /// `settle_parked`) and, if it builds a read model's version, switches the model to it or
    /// drops the build.
    pub(super) fn finish_job(&mut self, job: &CatchUpJob, own: Option<ShardIndex>) {
        self.settle_parked(job, own);
        if let Some(version) = job
            .spec
            .version_of
            .as_ref()
            .and_then(|model| self.versions.get_mut(model))
        {
            let at = job.finished_at.unwrap_or(job.updated_at);
            version.finish_build(job.id, job.status == CatchUpStatus::Completed, at);
        }
    }
}

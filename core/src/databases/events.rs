//! The event stores of several databases read as one, and the catch-up jobs they do not run
//! yet.
//!
//! ```text
//!  event seq (global) = local seq × N + database
//!  read_events(after) ─► each database from its own local cursor (map.local_after) ─► merged
//!                        by global seq, the first `limit` kept
//! ```
//!
//! The merged order is fixed (every read of the same events gives the same order), and within
//! one database it is that database's commit order. Across databases it is not the order the
//! events were written in: a database with fewer events hands out lower seqs. That is why a
//! replay cannot follow one cursor over all of them, and catch-up jobs are refused here.

use super::Databases;
use crate::model::error::StorageError;
use crate::model::event::{EventSource, StoredEvent};
use crate::model::ids::{ShardIndex, SignalId};
use crate::storage::{CatchUpJob, CatchUpStore, EventStore, NewCatchUp, ReadModelVersion};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

impl Databases {
    /// The first `limit` of every database's events (each list in seq order), merged.
    fn merged(&self, each: Vec<Vec<StoredEvent>>, limit: usize) -> Vec<StoredEvent> {
        let mut all: Vec<StoredEvent> = each
            .into_iter()
            .enumerate()
            .flat_map(|(d, events)| {
                events
                    .into_iter()
                    .map(move |e| self.map.event_to_global(d as u32, e))
            })
            .collect();
        all.sort_by_key(|e| e.seq);
        all.truncate(limit);
        all
    }
}

#[async_trait]
impl EventStore for Databases {
    async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let map = self.map;
        let each = self
            .each(|d, db| db.read_events(map.local_after(d, after_seq), event_types, since, limit))
            .await?;
        Ok(self.merged(each, limit))
    }

    async fn read_source_events(
        &self,
        tenant: &str,
        source: &EventSource,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        // A source's events are appended where it lives (see `inbox.rs`, `split`).
        let d = self.database_of_target(&source.kind, &source.id);
        let events = self
            .db(d)
            .read_source_events(tenant, source, self.map.local_after(d, after_seq), limit)
            .await?;
        Ok(events
            .into_iter()
            .map(|e| self.map.event_to_global(d, e))
            .collect())
    }

    async fn last_event_seq(&self) -> Result<i64, StorageError> {
        let each = self.each(|_, db| db.last_event_seq()).await?;
        Ok(each
            .into_iter()
            .enumerate()
            .filter(|(_, last)| *last > 0)
            .map(|(d, last)| self.map.global_seq(d as u32, last))
            .max()
            .unwrap_or(0))
    }

    async fn event_seqs(&self, ids: &[SignalId]) -> Result<Vec<(SignalId, i64)>, StorageError> {
        let each = self.each(|_, db| db.event_seqs(ids)).await?;
        Ok(each
            .into_iter()
            .enumerate()
            .flat_map(|(d, seqs)| {
                seqs.into_iter()
                    .map(move |(id, seq)| (id, self.map.global_seq(d as u32, seq)))
            })
            .collect())
    }

    async fn count_events(
        &self,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
    ) -> Result<i64, StorageError> {
        let each = self
            .each(|_, db| db.count_events(event_types, since))
            .await?;
        Ok(each.into_iter().sum())
    }
}

#[async_trait]
impl CatchUpStore for Databases {
    async fn start_catch_up(
        &self,
        job: NewCatchUp,
        _shard_count: u32,
    ) -> Result<CatchUpJob, StorageError> {
        Err(Self::unsupported(&format!(
            "a catch-up of `{}`",
            job.projection_kind
        )))
    }

    async fn has_pending_replay(
        &self,
        _projection_kind: &str,
        _tenant: &str,
        _shards: &[ShardIndex],
        _cursor: i64,
    ) -> Result<bool, StorageError> {
        // No job runs here, so no replayed row is ever written.
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
        self.home().running_catch_ups().await
    }

    async fn update_catch_up(&self, job: &CatchUpJob) -> Result<(), StorageError> {
        Err(Self::unsupported(&format!("catch-up job {}", job.id)))
    }

    async fn read_model_versions(&self) -> Result<Vec<ReadModelVersion>, StorageError> {
        self.home().read_model_versions().await
    }

    async fn retire_version(&self, model: &str, kind: &str) -> Result<u64, StorageError> {
        Err(Self::unsupported(&format!(
            "retiring version `{kind}` of read model `{model}`"
        )))
    }

    async fn purge_catch_ups(&self, before: DateTime<Utc>) -> Result<usize, StorageError> {
        self.home().purge_catch_ups(before).await
    }
}

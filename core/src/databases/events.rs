//! The event stores of several databases read as one.
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
//! replay over them reads a fixed set (`read_events_within`, see `catch_up.rs`).

use super::Databases;
use crate::model::error::StorageError;
use crate::model::event::{EventSource, StoredEvent};
use crate::model::ids::SignalId;
use crate::storage::EventStore;
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

    async fn read_events_within(
        &self,
        after_seq: i64,
        set: &[i64],
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        if set.is_empty() {
            return self.read_events(after_seq, event_types, since, limit).await;
        }
        let map = self.map;
        let mut each = self
            .each(|d, db| db.read_events(map.local_after(d, after_seq), event_types, since, limit))
            .await?;
        // Each database's list is in seq order: what is past its end is a tail, so what is
        // left of every list is still a prefix of that database's part of the set, and the
        // merge keeps the first `limit` of the set after `after_seq`.
        for (d, events) in each.iter_mut().enumerate() {
            let end = set.get(d).copied().unwrap_or(0);
            events.retain(|e| e.seq <= end);
        }
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

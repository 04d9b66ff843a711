//! The in-memory [`EventStore`]: events in `seq` order.

use super::MemoryStorage;
use crate::model::error::StorageError;
use crate::model::event::{EventSource, StoredEvent};
use crate::model::ids::SignalId;
use crate::storage::{EntityKey, EventStore};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

#[async_trait]
impl EventStore for MemoryStorage {
    async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let state = self.lock();
        let start = usize::try_from(after_seq.max(0)).unwrap_or(usize::MAX);
        Ok(state
            .events
            .iter()
            .skip(start)
            .filter(|e| event_types.is_empty() || event_types.contains(&e.event.event_type))
            .filter(|e| since.is_none_or(|t| e.event.occurred_at >= t))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn read_source_events(
        &self,
        tenant: &str,
        source: &EventSource,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let state = self.lock();
        let key = EntityKey::new(&source.kind, tenant, &source.id);
        let Some(seqs) = state.events_by_source.get(&key) else {
            return Ok(Vec::new());
        };
        let start = seqs.partition_point(|&seq| seq <= after_seq);
        Ok(seqs[start..]
            .iter()
            .take(limit)
            // `seq` n is at index n - 1 (events are only appended).
            .filter_map(|&seq| state.events.get(usize::try_from(seq - 1).ok()?))
            .cloned()
            .collect())
    }

    async fn last_event_seq(&self) -> Result<i64, StorageError> {
        Ok(self.lock().events.len() as i64)
    }

    async fn event_seqs(&self, ids: &[SignalId]) -> Result<Vec<(SignalId, i64)>, StorageError> {
        let state = self.lock();
        Ok(ids
            .iter()
            .filter_map(|id| state.event_seq.get(id).map(|seq| (id.clone(), *seq)))
            .collect())
    }

    async fn count_events(
        &self,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
    ) -> Result<i64, StorageError> {
        let state = self.lock();
        Ok(state
            .events
            .iter()
            .filter(|e| event_types.is_empty() || event_types.contains(&e.event.event_type))
            .filter(|e| since.is_none_or(|t| e.event.occurred_at >= t))
            .count() as i64)
    }
}

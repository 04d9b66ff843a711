//! The event store, read in `seq` order.

use crate::model::error::StorageError;
use crate::model::event::{EventSource, StoredEvent};
use crate::model::ids::SignalId;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// The `events` table (appends go through [`super::InboxStore::write`] and stage commits so
/// that an event and its fan-out are written together).
#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Up to `limit` events with `seq > after_seq`, of one of `event_types` (all if empty),
    /// that occurred at or after `since` (if given), in `seq` order.
    async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError>;

    /// [`EventStore::read_events`] within a replay's set: on a storage over several databases,
    /// only database *d*'s events with a local `seq <= set[d]` (see
    /// [`crate::storage::CatchUpSpread`]); a storage of one database has no set (`set` is
    /// empty) and reads as `read_events` does.
    async fn read_events_within(
        &self,
        after_seq: i64,
        set: &[i64],
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let _ = set;
        self.read_events(after_seq, event_types, since, limit).await
    }

    /// Up to `limit` events produced by `source` (kind and id) of `tenant` with
    /// `seq > after_seq`, in `seq` order: one producer's stream (an aggregate instance's own
    /// events). Served by an index on (tenant, source kind, source id, seq).
    async fn read_source_events(
        &self,
        tenant: &str,
        source: &EventSource,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError>;

    /// The highest `seq` in the store (0 when empty). `seq` is ordered but may have gaps.
    async fn last_event_seq(&self) -> Result<i64, StorageError>;

    /// The `seq` of each of the events `ids` that exists (in no particular order).
    async fn event_seqs(&self, ids: &[SignalId]) -> Result<Vec<(SignalId, i64)>, StorageError>;

    /// How many events of `event_types` (all if empty) occurred at or after `since`.
    async fn count_events(
        &self,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
    ) -> Result<i64, StorageError>;
}

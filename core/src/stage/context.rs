//! What a station may see: the registry, the configuration, the clock, the monitor, and the
//! storage's reads that stations need — nothing that writes.
//!
//! ```text
//!  StationContext ─┬─ registry()  kinds, handlers, routing
//!                  ├─ config(), clock(), monitor(), node_id()
//!                  └─ reads: load_states, read_events, event_seqs, catch-up jobs
//! ```
//!
//! The storage is a private field, so a station written against this type has no way to
//! reach a write: everything it wants written goes on the [`Conveyor`](super::conveyor::Conveyor)
//! into the stage's one fenced commit. Runtime services (timers, expiry requests, shard
//! observers, the stop flag) belong to the runner and are not here either.
//!
//! ```compile_fail,E0616
//! # async fn station(cx: &shardbox_core::StationContext) {
//! // A station cannot reach the storage: the context has no such field or method.
//! cx.storage.write(Default::default()).await;
//! # }
//! ```

use crate::entity::registry::EntityRegistry;
use crate::model::clock::Clock;
use crate::model::config::DeliveryConfig;
use crate::model::error::StorageError;
use crate::model::event::StoredEvent;
use crate::model::ids::{NodeId, ShardIndex, SignalId};
use crate::storage::{CatchUpJob, EntityKey, EntityState, Storage};
use crate::telemetry::monitor::DeliveryMonitor;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// The read-only view of a delivery that stations get (see the module docs).
pub struct StationContext {
    registry: Arc<EntityRegistry>,
    storage: Arc<dyn Storage>,
    config: DeliveryConfig,
    monitor: Arc<dyn DeliveryMonitor>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for StationContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StationContext")
            .field("node", &self.config.node_id)
            .field("storage", &self.storage.describe())
            .finish_non_exhaustive()
    }
}

impl StationContext {
    /// A context over `storage`'s reads; the configuration must already be validated.
    pub fn new(
        registry: Arc<EntityRegistry>,
        storage: Arc<dyn Storage>,
        config: DeliveryConfig,
        monitor: Arc<dyn DeliveryMonitor>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        StationContext {
            registry,
            storage,
            config,
            monitor,
            clock,
        }
    }

    /// Registered kinds, their handlers and routing.
    pub fn registry(&self) -> &EntityRegistry {
        &self.registry
    }

    /// The validated configuration.
    pub fn config(&self) -> &DeliveryConfig {
        &self.config
    }

    /// The delivery's clock.
    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// The delivery's monitor (its answer to a handler failure is authoritative).
    pub fn monitor(&self) -> &dyn DeliveryMonitor {
        self.monitor.as_ref()
    }

    /// This node's id.
    pub fn node_id(&self) -> &NodeId {
        &self.config.node_id
    }

    /// The framework-kept states of `keys` that exist (in no particular order).
    pub async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError> {
        self.storage.load_states(keys).await
    }

    /// Up to `limit` events after `after_seq` of `event_types` (all if empty) since `since`,
    /// in `seq` order.
    pub async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        self.storage
            .read_events(after_seq, event_types, since, limit)
            .await
    }

    /// How many events of `event_types` (all if empty) occurred at or after `since`.
    pub async fn count_events(
        &self,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
    ) -> Result<i64, StorageError> {
        self.storage.count_events(event_types, since).await
    }

    /// The `seq` of each of the events `ids` that exists.
    pub async fn event_seqs(&self, ids: &[SignalId]) -> Result<Vec<(SignalId, i64)>, StorageError> {
        self.storage.event_seqs(ids).await
    }

    /// The catch-up job `id`, if it exists.
    pub async fn catch_up(&self, id: i64) -> Result<Option<CatchUpJob>, StorageError> {
        self.storage.catch_up(id).await
    }

    /// Every running catch-up job.
    pub async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError> {
        self.storage.running_catch_ups().await
    }

    /// Whether, in `shards`, a replayed row of projection `kind` (tenant `tenant`) is still
    /// undelivered, or a live event row of that kind with an event `seq <= cursor` is pending
    /// (see [`CatchUpStore::has_pending_replay`](crate::storage::CatchUpStore::has_pending_replay)).
    pub async fn has_pending_replay(
        &self,
        kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        cursor: i64,
    ) -> Result<bool, StorageError> {
        self.storage
            .has_pending_replay(kind, tenant, shards, cursor)
            .await
    }
}

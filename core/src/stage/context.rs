//! What a station may see: the registry, the configuration, the clock, the monitor, and the
//! storage's reads that stations need — nothing that writes.
//!
//! ```text
//!  StationContext ─┬─ registry()  kinds, handlers, routing
//!                  ├─ config(), clock(), monitor(), node_id()
//!                  ├─ kinds()     the rules each kind follows now (pause, policy, limits)
//!                  └─ reads (StorageReads, by Deref): load_states, read_events, event_seqs,
//!                     catch-up jobs
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
use crate::model::ids::NodeId;
use crate::stage::kind_rules::KindRules;
use crate::storage::{Storage, StorageReads};
use crate::telemetry::monitor::DeliveryMonitor;
use std::sync::Arc;

/// The read-only view of a delivery that stations get (see the module docs).
pub struct StationContext {
    registry: Arc<EntityRegistry>,
    reads: StorageReads,
    config: DeliveryConfig,
    kinds: KindRules,
    monitor: Arc<dyn DeliveryMonitor>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for StationContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StationContext")
            .field("node", &self.config.node_id)
            .field("storage", &self.reads.describe())
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
            reads: StorageReads::new(storage),
            kinds: KindRules::new(config.clone()),
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

    /// The rules each entity kind follows now: the stored controls (pauses, run-time
    /// policies and limits, read every poll interval) over the configuration.
    pub fn kinds(&self) -> &KindRules {
        &self.kinds
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
}

/// A station reads the storage through the context: `cx.load_states(..)`, `cx.read_events(..)`,
/// the catch-up jobs — the [`StorageReads`] view, which has no write.
impl std::ops::Deref for StationContext {
    type Target = StorageReads;

    fn deref(&self) -> &StorageReads {
        &self.reads
    }
}

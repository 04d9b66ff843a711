//! The delivery environment: what the runner and the send path share on one node.
//!
//! ```text
//!  DeliveryEnv ─┬─ station: Arc<StationContext>   (what stations may see: read-only)
//!               ├─ storage: every capability       (pick up, commit, release, write)
//!               ├─ metrics, due timers, expiry requests, shard observers, the stop flag
//! ```
//!
//! Only the runner, the send path and the facade hold a `DeliveryEnv`; a station is handed the
//! [`StationContext`] alone, so the runtime services and the storage's write methods are out
//! of its reach by type.

use crate::cluster::seat::NodeSeat;
use crate::cluster::unreleased::UnreleasedLeases;
use crate::entity::registry::EntityRegistry;
use crate::model::clock::Clock;
use crate::model::config::DeliveryConfig;
use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::runner::due::{DueSink, DueTimers};
use crate::runner::expiry::SweepRequests;
use crate::runner::outcomes::OutcomeSignals;
use crate::stage::context::StationContext;
use crate::storage::{ShardObserver, Storage};
use crate::sync::{read, write};
use crate::telemetry::metrics::DeliveryMetrics;
use crate::telemetry::monitor::DeliveryMonitor;
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// What a probe of one shard found (see [`DeliveryEnv::probe_shard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardProbe {
    /// Whether a row is due now.
    pub due: bool,
    /// When the next delayed row is due, if the shard has one.
    pub next_due: Option<DateTime<Utc>>,
}

/// The runtime environment of one node's delivery: registry, storage, configuration,
/// monitor, clock, counters, timers and the shard observers. Internal to the framework (the
/// facade and the runner use it); stations see a [`StationContext`] instead.
#[doc(hidden)]
pub struct DeliveryEnv {
    /// Registered kinds and routing.
    pub registry: Arc<EntityRegistry>,
    /// The backend.
    pub storage: Arc<dyn Storage>,
    /// Validated configuration.
    pub config: DeliveryConfig,
    /// Hooks.
    pub monitor: Arc<dyn DeliveryMonitor>,
    /// Time: the node's clock read off the storage's clock (see
    /// [`StorageClock`](crate::cluster::storage_clock::StorageClock)), or a manual clock as it
    /// is: the seat's clock.
    pub clock: Arc<dyn Clock>,
    /// This node's place in the cluster: the lock table, its id, its clock, the lease terms.
    pub seat: Arc<NodeSeat>,
    /// Counters of this delivery.
    pub metrics: DeliveryMetrics,
    /// What the stations of this delivery see.
    pub(crate) station: Arc<StationContext>,
    pub(crate) due_timers: DueTimers,
    pub(crate) sweeps: SweepRequests,
    /// Leases whose release failed, kept for a retried release.
    pub(crate) unreleased: UnreleasedLeases,
    /// Wakes the senders waiting for command outcomes.
    pub(crate) outcomes: Arc<OutcomeSignals>,
    observers: RwLock<Vec<Arc<dyn ShardObserver>>>,
    stopping: AtomicBool,
}

impl DeliveryEnv {
    /// An environment; the configuration must already be validated. Unless `clock` is
    /// manual, it is read off the storage's clock from the first [`DeliveryEnv::sync_clock`].
    pub fn new(
        registry: Arc<EntityRegistry>,
        storage: Arc<dyn Storage>,
        config: DeliveryConfig,
        monitor: Arc<dyn DeliveryMonitor>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let seat = Arc::new(
            NodeSeat::new(storage.clone(), &config, clock).with_kinds(registry.registered_kinds()),
        );
        let clock = seat.clock.clone();
        let station = Arc::new(StationContext::new(
            registry.clone(),
            storage.clone(),
            config.clone(),
            monitor.clone(),
            clock.clone(),
        ));
        DeliveryEnv {
            metrics: DeliveryMetrics::new(&config.node_id),
            outcomes: Arc::new(OutcomeSignals::new(config.shard_count)),
            registry,
            storage,
            config,
            monitor,
            clock,
            seat,
            station,
            due_timers: DueTimers::default(),
            sweeps: SweepRequests::default(),
            unreleased: UnreleasedLeases::default(),
            observers: RwLock::new(Vec::new()),
            stopping: AtomicBool::new(false),
        }
    }

    /// Reads the storage's clock again and corrects [`DeliveryEnv::clock`] by it (nothing for
    /// a manual clock or a store without a clock). A failed read keeps the last correction
    /// (logged).
    pub async fn sync_clock(&self) {
        self.seat.sync_clock().await
    }

    /// What the stations of this delivery see.
    pub fn station_context(&self) -> &Arc<StationContext> {
        &self.station
    }

    /// Adds an observer of writes.
    pub fn observe(&self, observer: Arc<dyn ShardObserver>) {
        write(&self.observers).push(observer);
    }

    /// Removes an observer added with [`DeliveryEnv::observe`] (a runner that stopped).
    pub fn unobserve(&self, observer: &Arc<dyn ShardObserver>) {
        write(&self.observers).retain(|o| !Arc::ptr_eq(o, observer));
    }

    /// Tells every observer of writes to `shards`.
    pub fn notify(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        for o in read(&self.observers).iter() {
            o.on_write(shards);
        }
    }

    /// A stage committed command outcomes in `shard`: wakes the senders of this environment
    /// that wait for one of them.
    pub fn outcomes_decided(&self, shard: ShardIndex) {
        self.outcomes.decided(&[shard]);
    }

    /// Asks running deliveries to stop after their current stage, and cancels the timers
    /// waiting to wake shards with delayed rows.
    pub fn request_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.due_timers.cancel_all();
    }

    /// Lets deliveries run again after a stop (a runner starting anew).
    pub fn clear_stop(&self) {
        self.stopping.store(false, Ordering::SeqCst);
    }

    /// Whether a stop was asked for.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Whether `shard` has a due row now, and when its next delayed row is due: the one
    /// probe behind the poller, take-overs, the re-check after a release and `drain`.
    pub async fn probe_shard(&self, shard: ShardIndex) -> Result<ShardProbe, StorageError> {
        let page = self.storage.read_page(shard, self.clock.now(), 1).await?;
        Ok(ShardProbe {
            due: !page.messages.is_empty(),
            next_due: page.next_due,
        })
    }

    /// `now + lease_duration`.
    pub fn lease_until(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.seat.lease_until(now)
    }
}

impl DueSink for DeliveryEnv {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn due(&self, shard: ShardIndex, at: DateTime<Utc>) {
        self.due_timers.fired(shard, at);
        self.notify(&[shard]);
    }
}

//! Building a [`Shardbox`]: storage, configuration, entity kinds, pipeline.

mod config;

use crate::pipeline::Pipeline;
use crate::shardbox::Shardbox;
use config::named_as_builder;
use shardbox_core::memory::MemoryStorage;
use shardbox_core::DeliveryConfigBuilder;
use shardbox_core::DeliveryEnv;
use shardbox_core::NoopMonitor;
use shardbox_core::{
    Aggregate, Clock, ConfigError, Delivery, DeliveryError, DeliveryMonitor, EntityKind,
    EntityRegistry, FailurePolicy, Inbox, KindLimits, ProcessManager, Projection, Reactor,
    Services, ShardStrategy, StableHashStrategy, Storage, SystemClock, TracePropagator, Upcasters,
};
use shardbox_core::{
    AggregateHandler, EntityHandler, ProcessManagerHandler, ProjectionHandler, ReactorHandler,
    TransactionalProjectionHandler,
};
use shardbox_stations::{CatchUpStation, Cleanup, LiveDelivery, RecentDeliveries};
use std::sync::Arc;
use std::time::Duration;

type PipelineEdit = Box<dyn FnOnce(&mut Pipeline) + Send>;

/// Configures and builds a [`Shardbox`]. Every setting has a safe default except the storage.
pub struct ShardboxBuilder {
    storage: Option<Arc<dyn Storage>>,
    config: DeliveryConfigBuilder,
    strategy: Arc<dyn ShardStrategy>,
    monitor: Arc<dyn DeliveryMonitor>,
    clock: Arc<dyn Clock>,
    handlers: Vec<Arc<dyn EntityHandler>>,
    services: Services,
    /// The upcasters registered (`schema_evolution.rs`).
    pub(crate) upcasters: Upcasters,
    /// The first upcaster refused (reported by `build`, which returns the builder's errors).
    pub(crate) upcast_error: Option<ConfigError>,
    pipeline_edits: Vec<PipelineEdit>,
    trace: Option<Arc<dyn TracePropagator>>,
}

impl Default for ShardboxBuilder {
    fn default() -> Self {
        ShardboxBuilder {
            storage: None,
            config: DeliveryConfigBuilder::default(),
            strategy: Arc::new(StableHashStrategy::new()),
            monitor: Arc::new(NoopMonitor),
            clock: Arc::new(SystemClock),
            handlers: Vec::new(),
            services: Services::new(),
            upcasters: Upcasters::new(),
            upcast_error: None,
            pipeline_edits: Vec::new(),
            trace: None,
        }
    }
}

impl ShardboxBuilder {
    /// Uses `storage` (a `SqliteStorage`, `PostgresStorage`, `MemoryStorage` or your own).
    pub fn storage(mut self, storage: impl Storage) -> Self {
        self.storage = Some(Arc::new(storage));
        self
    }

    /// Uses storage shared with other parts of the program.
    pub fn shared_storage(mut self, storage: Arc<dyn Storage>) -> Self {
        self.storage = Some(storage);
        self
    }

    /// Keeps everything in memory: nothing survives the process (tests, fire-and-forget).
    pub fn memory(self) -> Self {
        self.storage(MemoryStorage::new())
    }

    /// Gives entity kind `kind` (its `KIND`) its own handler timeout. A kind that no
    /// registered entity has fails [`build`](Self::build) with
    /// [`ConfigError::UnknownKind`], naming the registered kinds;
    /// [`kind_handler_timeout_of`](Self::kind_handler_timeout_of) takes the type instead.
    pub fn kind_handler_timeout(mut self, kind: &str, timeout: Duration) -> Self {
        self.config = self.config.kind_handler_timeout(kind, timeout);
        self
    }

    /// Gives entity type `E` (an aggregate, projection, reactor or process manager) its own
    /// handler timeout: [`kind_handler_timeout`](Self::kind_handler_timeout) with `E`'s
    /// `KIND`, so that a misspelling does not compile. Write the second type parameter
    /// (the entity's family) as `_`:
    ///
    /// ```
    /// # use shardbox::prelude::*;
    /// # use serde::{Deserialize, Serialize};
    /// # use std::time::Duration;
    /// # #[derive(Serialize, Deserialize)] struct Pay;
    /// # impl Message for Pay { const TYPE: &'static str = "pay"; }
    /// # #[derive(Default, Serialize, Deserialize)] struct Payments;
    /// # impl Aggregate for Payments {
    /// #   const KIND: &'static str = "payments"; type Command = Pay; type Event = Pay;
    /// #   async fn handle(&self, _: &Pay, _: &Context<'_>) -> Result<Vec<Pay>, HandlerError> { Ok(vec![]) }
    /// #   fn apply(&mut self, _: &Pay) {}
    /// # }
    /// # async fn run() -> Result<(), DeliveryError> {
    /// let shardbox = Shardbox::builder()
    ///     .memory()
    ///     .aggregate::<Payments>()
    ///     .kind_handler_timeout_of::<Payments, _>(Duration::from_secs(5))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn kind_handler_timeout_of<E: EntityKind<F>, F>(self, timeout: Duration) -> Self {
        self.kind_handler_timeout(E::KIND, timeout)
    }

    /// Makes `service` (an HTTP client, a pool, a counter) reachable from every handler as
    /// `cx.service::<T>()`; one value per type.
    pub fn service<T: Send + Sync + 'static>(mut self, service: Arc<T>) -> Self {
        self.services.insert(service);
        self
    }

    /// Carries traces across messages with `propagator`: a send or post writes the caller's
    /// span into the message's metadata, each handler call runs in a span
    /// (`shardbox.handle`: kind, target_id, tenant, shard, attempt, signal) parented on it, and
    /// what the call emits carries the call's span. Off by default (no span per call, no
    /// metadata written). With the `otel` feature, [`crate::otel::TraceContext`] is the W3C
    /// trace context of OpenTelemetry; see [`trace_context`](Self::trace_context).
    pub fn trace_propagator(mut self, propagator: impl TracePropagator) -> Self {
        self.trace = Some(Arc::new(propagator));
        self
    }

    /// Carries OpenTelemetry's W3C trace context across messages
    /// ([`trace_propagator`](Self::trace_propagator) with [`crate::otel::TraceContext`]).
    #[cfg(feature = "otel")]
    pub fn trace_context(self) -> Self {
        self.trace_propagator(crate::otel::TraceContext)
    }

    /// Gives entity kind `kind` (its `KIND`) its own failure policy. A kind that no
    /// registered entity has fails [`build`](Self::build) with
    /// [`ConfigError::UnknownKind`], naming the registered kinds;
    /// [`kind_policy_of`](Self::kind_policy_of) takes the type instead.
    pub fn kind_policy(mut self, kind: &str, policy: FailurePolicy) -> Self {
        self.config = self.config.kind_policy(kind, policy);
        self
    }

    /// Gives entity type `E` (an aggregate, projection, reactor or process manager) its own
    /// failure policy: [`kind_policy`](Self::kind_policy) with `E`'s `KIND`, so that a
    /// misspelling does not compile. Write the second type parameter (the entity's family)
    /// as `_`:
    ///
    /// ```
    /// # use shardbox::prelude::*;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)] struct Pay;
    /// # impl Message for Pay { const TYPE: &'static str = "pay"; }
    /// # #[derive(Default, Serialize, Deserialize)] struct Payments;
    /// # impl Aggregate for Payments {
    /// #   const KIND: &'static str = "payments"; type Command = Pay; type Event = Pay;
    /// #   async fn handle(&self, _: &Pay, _: &Context<'_>) -> Result<Vec<Pay>, HandlerError> { Ok(vec![]) }
    /// #   fn apply(&mut self, _: &Pay) {}
    /// # }
    /// # async fn run() -> Result<(), DeliveryError> {
    /// let mut never_skip = FailurePolicy::default();
    /// never_skip.on_exhausted = ExhaustedOutcome::Block;
    /// let shardbox = Shardbox::builder()
    ///     .memory()
    ///     .aggregate::<Payments>()
    ///     .kind_policy_of::<Payments, _>(never_skip)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn kind_policy_of<E: EntityKind<F>, F>(self, policy: FailurePolicy) -> Self {
        self.kind_policy(E::KIND, policy)
    }

    /// Limits entity kind `kind`'s handler calls: at most `limits.max_concurrent` at once on a
    /// node, at most `limits.rate_per_second` started per second over the cluster (split
    /// evenly among the live nodes that register the kind). A limited call waits before it
    /// starts, where it stands: its target's later messages wait behind it, so order is kept.
    /// The build-time value; [`Shardbox::set_kind_settings`](crate::Shardbox::set_kind_settings)
    /// changes it while nodes run. An unknown kind fails [`build`](Self::build) with
    /// [`ConfigError::UnknownKind`].
    pub fn kind_limits(mut self, kind: &str, limits: KindLimits) -> Self {
        self.config = self.config.kind_limits(kind, limits);
        self
    }

    /// [`kind_limits`](Self::kind_limits) with `E`'s `KIND` (write the family as `_`).
    pub fn kind_limits_of<E: EntityKind<F>, F>(self, limits: KindLimits) -> Self {
        self.kind_limits(E::KIND, limits)
    }

    /// Uses a custom shard strategy (default: [`StableHashStrategy`]).
    pub fn strategy(mut self, strategy: impl ShardStrategy) -> Self {
        self.strategy = Arc::new(strategy);
        self
    }

    /// Installs a delivery monitor.
    pub fn monitor(mut self, monitor: impl DeliveryMonitor) -> Self {
        self.monitor = Arc::new(monitor);
        self
    }

    /// Uses another clock (tests drive a `ManualClock`).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Registers aggregate `A`.
    pub fn aggregate<A: Aggregate>(mut self) -> Self {
        self.handlers
            .push(Arc::new(AggregateHandler::<A>::default()));
        self
    }

    /// Registers projection `P`.
    pub fn projection<P: Projection>(mut self) -> Self {
        self.handlers
            .push(Arc::new(ProjectionHandler::<P>::default()));
        self
    }

    /// Registers SQL projection `projection`: a read model in the application's own tables,
    /// written inside the transaction of the stage that delivers its events (see
    /// [`SqlProjection`](crate::storage::SqlProjection) and docs/read-models.md). Needs the
    /// SQLite or PostgreSQL backend: `build` refuses it on the in-memory one.
    pub fn sql_projection<P: shardbox_storage::SqlProjection>(mut self, projection: P) -> Self {
        self.handlers
            .push(Arc::new(TransactionalProjectionHandler::new(
                shardbox_storage::Sql(projection),
            )));
        self
    }

    /// Registers a reactor.
    pub fn reactor<R: Reactor>(mut self, reactor: R) -> Self {
        self.handlers.push(Arc::new(ReactorHandler(reactor)));
        self
    }

    /// Registers process manager (saga) `P`: it receives the events of its set, routed by
    /// their correlation id, and its own commands (timeouts).
    pub fn process_manager<P: ProcessManager>(mut self) -> Self {
        self.handlers
            .push(Arc::new(ProcessManagerHandler::<P>::default()));
        self
    }

    /// Edits the station pipeline (default: `catch-up`, `live-delivery`, `cleanup`).
    pub fn stations(mut self, edit: impl FnOnce(&mut Pipeline) + Send + 'static) -> Self {
        self.pipeline_edits.push(Box::new(edit));
        self
    }

    /// Validates the configuration and builds the Shardbox.
    pub async fn build(self) -> Result<Shardbox, DeliveryError> {
        let config = self.config.build().map_err(named_as_builder)?;
        if let Some(e) = self.upcast_error {
            return Err(e.into());
        }
        let storage = self.storage.ok_or(ConfigError::Missing {
            field: "storage",
            reason: "call .storage(SqliteStorage::open(path).await?), .storage(PostgresStorage::connect(url).await?) or .memory()",
        })?;
        // Every node must split the Inbox alike: the first records its count, the others check.
        let recorded = storage.claim_shard_count(config.shard_count).await?;
        if recorded != config.shard_count {
            return Err(ConfigError::ShardCountMismatch {
                recorded,
                configured: config.shard_count,
            }
            .into());
        }
        // Tools without the application (the CLI, a standalone admin server) place rows as
        // the recorded strategy says, or refuse to (see `StrategyRecord`).
        let record = self.strategy.record();
        if let Some(before) = storage.record_shard_strategy(&record).await? {
            if before != record {
                tracing::warn!(
                    before = %before.describe(),
                    now = %record.describe(),
                    "the shard strategy recorded in the database was another one: every node of an application must place targets alike (a target split over two shards can be served by two nodes at once)"
                );
            }
        }
        if let Some(h) = self.handlers.iter().find(|h| h.in_transaction()) {
            if !storage.runs_writes_in_transaction() {
                return Err(ConfigError::Invalid {
                    field: "sql_projection",
                    value: h.kind().to_owned(),
                    reason: "a SQL projection writes inside the stage's transaction, which only the SQLite and PostgreSQL backends run; build on SqliteStorage or PostgresStorage (the in-memory backend has no SQL)",
                }
                .into());
            }
        }
        // Over several databases, every target is placed in its database's shards.
        let strategy = shardbox_core::databases::DatabaseStrategy::over(self.strategy, &*storage);
        let mut registry = EntityRegistry::new(strategy, config.shard_count);
        for handler in self.handlers {
            registry.register(handler)?;
        }
        // A setting for a misspelled kind would apply to nothing, silently.
        config.check_kinds(&registry.kinds())?;
        registry.set_services(self.services);
        if let Some(trace) = self.trace {
            registry.set_trace_propagator(trace);
        }
        registry.set_upcasters(self.upcasters);
        let recent = RecentDeliveries::new(config.cache_capacity, config.dedup_window);
        let mut pipeline = Pipeline::new();
        pipeline
            .push(CatchUpStation::new())
            .push(LiveDelivery::new(recent))
            .push(Cleanup::new());
        for edit in self.pipeline_edits {
            edit(&mut pipeline);
        }
        tracing::info!(
            node = %config.node_id,
            storage = %storage.describe(),
            shards = config.shard_count,
            kinds = ?registry.kinds(),
            stations = ?pipeline.names(),
            "shardbox built"
        );
        let env = Arc::new(DeliveryEnv::new(
            Arc::new(registry),
            storage,
            config,
            self.monitor,
            self.clock,
        ));
        // Before anything is picked up or written: the node's time on the storage's clock.
        env.sync_clock().await;
        let delivery = Arc::new(Delivery::new(env.clone(), pipeline.into_stations()));
        Ok(Shardbox::new(env.clone(), Inbox::new(env), delivery))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field a rejected configuration names, and its message.
    async fn rejected(builder: ShardboxBuilder) -> (&'static str, String) {
        match builder.memory().build().await {
            Err(DeliveryError::Config(err @ ConfigError::Invalid { field, .. })) => {
                (field, err.to_string())
            }
            Err(other) => panic!("expected an invalid configuration, got {other}"),
            Ok(_) => panic!("expected an invalid configuration, got a Shardbox"),
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Tick;
    impl shardbox_core::Message for Tick {
        const TYPE: &'static str = "builder-test.tick";
    }

    #[derive(Default, serde::Serialize, serde::Deserialize)]
    struct Counter;
    impl Aggregate for Counter {
        const KIND: &'static str = "counter";
        type Command = Tick;
        type Event = Tick;
        async fn handle(
            &self,
            _: &Tick,
            _: &shardbox_core::Context<'_>,
        ) -> Result<Vec<Tick>, shardbox_core::HandlerError> {
            Ok(Vec::new())
        }
        fn apply(&mut self, _: &Tick) {}
    }

    #[derive(Default, serde::Serialize, serde::Deserialize)]
    struct Totals;
    impl Projection for Totals {
        const KIND: &'static str = "totals";
        type Event = Tick;
        async fn apply(
            &mut self,
            _: &Tick,
            _: &shardbox_core::Context<'_>,
        ) -> Result<(), shardbox_core::HandlerError> {
            Ok(())
        }
    }

    /// A kind-keyed setting for a kind nobody registered (`countr` for `counter`) would
    /// silently apply to nothing: the build fails naming the setting, the kind and the
    /// registered kinds.
    #[tokio::test]
    async fn settings_for_a_misspelled_kind_fail_the_build_naming_the_registered_kinds() {
        let registered = || {
            Shardbox::builder()
                .memory()
                .aggregate::<Counter>()
                .projection::<Totals>()
        };
        let cases = [
            (
                registered().kind_policy("countr", FailurePolicy::default()),
                "kind_policy",
            ),
            (
                registered().kind_handler_timeout("countr", Duration::from_secs(5)),
                "kind_handler_timeout",
            ),
        ];
        for (builder, setting) in cases {
            match builder.build().await {
                Err(DeliveryError::Config(err @ ConfigError::UnknownKind { .. })) => {
                    let message = err.to_string();
                    assert!(
                        message.contains(&format!("`{setting}(\"countr\", …)`"))
                            && message.contains("registered kinds: `counter`, `totals`"),
                        "{message}"
                    );
                }
                Err(other) => panic!("{setting}: expected UnknownKind, got {other}"),
                Ok(_) => panic!("{setting}: a setting for `countr` built"),
            }
        }
        // The right names build, as strings and as types.
        registered()
            .kind_policy("counter", FailurePolicy::default())
            .kind_handler_timeout("totals", Duration::from_secs(5))
            .build()
            .await
            .expect("registered kinds");
        let mut blocking = FailurePolicy::default();
        blocking.on_exhausted = shardbox_core::ExhaustedOutcome::Block;
        let sb = registered()
            .kind_policy_of::<Counter, _>(blocking)
            .kind_handler_timeout_of::<Totals, _>(Duration::from_secs(7))
            .build()
            .await
            .expect("typed settings");
        let config = sb.config();
        assert_eq!(config.policy_of("counter"), &blocking);
        assert_eq!(config.handler_timeout_of("totals"), Duration::from_secs(7));
    }

    #[tokio::test]
    async fn config_errors_name_the_builder_method_the_user_called() {
        let b = Shardbox::builder;
        let mut bad_policy = FailurePolicy::default();
        bad_policy.max_attempts = 0;
        let cases = [
            (b().shards(0), "shards"),
            (b().page_size(0), "page_size"),
            (
                b().dedup_window(Duration::from_secs(8 * 24 * 3600)),
                "dedup_window",
            ),
            (
                b().lease_duration(Duration::from_millis(5)),
                "lease_duration",
            ),
            (b().workers(0), "workers"),
            (b().max_payload_bytes(0), "max_payload_bytes"),
            (b().failure_policy(bad_policy), "failure_policy"),
            (b().kind_policy("payment", bad_policy), "kind_policy"),
        ];
        for (builder, method) in cases {
            let (field, message) = rejected(builder).await;
            assert_eq!(field, method, "{message}");
            assert!(message.contains(&format!("`{method}`")), "{message}");
        }
    }
}

//! The [`Shardbox`] handle: send, post, start nodes, read entity state.

use crate::builder::ShardboxBuilder;
use serde::de::DeserializeOwned;
use shardbox_core::storage::{EntityKey, StorageReads};
use shardbox_core::DeliveryEnv;
use shardbox_core::{
    Aggregate, CommandOutcome, Delivery, DeliveryConfig, DeliveryError, DeliveryReport,
    EventSource, Inbox, InboxWrite, LocalRunner, Message, NewMessage, OutcomeWait, ProcessManager,
    Projection, ReshardOptions, ReshardReport, SendOptions, SendReceipt, ShardIndex,
    StationContext, Upcasters, WorkerId,
};
use std::sync::Arc;
use tracing::Instrument;

/// A running node: the local workers serving the shards. Returned by [`Shardbox::start`].
pub use shardbox_core::RunnerHandle as Node;

/// A configured delivery: the Inbox to send into and the workers to start.
#[derive(Clone)]
pub struct Shardbox {
    env: Arc<DeliveryEnv>,
    inbox: Inbox,
    delivery: Arc<Delivery>,
}

impl std::fmt::Debug for Shardbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shardbox")
            .field("node", &self.env.config.node_id)
            .field("storage", &self.env.storage.describe())
            .field("registry", &self.env.registry)
            .finish()
    }
}

impl Shardbox {
    /// A builder with safe defaults.
    pub fn builder() -> ShardboxBuilder {
        ShardboxBuilder::default()
    }

    pub(crate) fn new(env: Arc<DeliveryEnv>, inbox: Inbox, delivery: Arc<Delivery>) -> Self {
        Shardbox {
            env,
            inbox,
            delivery,
        }
    }

    /// Sends `command` to aggregate `A` instance `id`.
    pub async fn send<A: Aggregate>(
        &self,
        id: &str,
        command: &A::Command,
    ) -> Result<SendReceipt, DeliveryError> {
        self.inbox
            .send::<A>(id, command, SendOptions::default())
            .await
    }

    /// Sends with options (signal id, tenant, delay, TTL, metadata).
    pub async fn send_with<A: Aggregate>(
        &self,
        id: &str,
        command: &A::Command,
        options: SendOptions,
    ) -> Result<SendReceipt, DeliveryError> {
        self.inbox.send::<A>(id, command, options).await
    }

    /// Awaits what became of the command `receipt` was given for, at most `timeout`: handled
    /// (with the ids of the events it emitted), dead-lettered, dropped or blocked (with the
    /// last error), expired — decided on this node or on any node sharing the database —
    /// or [`CommandOutcome::Unknown`] once the deduplication window after its outcome has
    /// passed. Not decided in time: [`DeliveryError::OutcomeTimeout`]. See
    /// [`Shardbox::outcome_with`] for the fallback poll.
    ///
    /// ```no_run
    /// # async fn f(sb: shardbox::Shardbox, receipt: shardbox::SendReceipt) -> Result<(), shardbox::DeliveryError> {
    /// use std::time::Duration;
    /// match sb.outcome(&receipt, Duration::from_secs(2)).await? {
    ///     shardbox::CommandOutcome::Handled { events } => println!("emitted {events:?}"),
    ///     other => println!("not handled: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn outcome(
        &self,
        receipt: &SendReceipt,
        timeout: std::time::Duration,
    ) -> Result<CommandOutcome, DeliveryError> {
        self.inbox
            .outcome(receipt, OutcomeWait::timeout(timeout))
            .await
    }

    /// [`Shardbox::outcome`] with the wait spelled out (timeout and the fallback poll, which
    /// only stands in for a lost notification).
    pub async fn outcome_with(
        &self,
        receipt: &SendReceipt,
        wait: OutcomeWait,
    ) -> Result<CommandOutcome, DeliveryError> {
        self.inbox.outcome(receipt, wait).await
    }

    /// Read-your-writes: awaits, at most `timeout`, until the projection of kind `kind` (a
    /// JSON-state or SQL projection registered on this node) has applied what the send
    /// `receipt` was given for produced — the events its command emitted, or the posted
    /// event — so that a read of the projection shows it. Applied on another node sharing the
    /// PostgreSQL database, it is heard by notification. Returns how many copies (an event
    /// to one instance of the projection) were applied (0 if it does not follow those
    /// events); see
    /// [`Inbox::projected`](shardbox_core::Inbox::projected) for the errors. `wait` is a
    /// timeout, or an [`OutcomeWait`] that also sets the fallback poll.
    ///
    /// ```no_run
    /// # async fn f(sb: shardbox::Shardbox, receipt: shardbox::SendReceipt) -> Result<(), shardbox::DeliveryError> {
    /// use std::time::Duration;
    /// sb.projected(&receipt, "order_list", Duration::from_secs(2)).await?;
    /// // A query of the order list now shows the order.
    /// # Ok(()) }
    /// ```
    pub async fn projected(
        &self,
        receipt: &SendReceipt,
        kind: &str,
        wait: impl Into<OutcomeWait>,
    ) -> Result<usize, DeliveryError> {
        self.inbox.projected(receipt, kind, wait.into()).await
    }

    /// Sends many commands to instances of `A` in one write (bulk loads); see
    /// [`Inbox::send_many`](shardbox_core::Inbox::send_many).
    pub async fn send_many<A: Aggregate>(
        &self,
        commands: &[(&str, A::Command)],
    ) -> Result<shardbox_core::storage::WriteReport, DeliveryError> {
        self.inbox
            .send_many::<A>(commands, SendOptions::default())
            .await
    }

    /// Posts `event` produced by `source` to every subscribed kind.
    pub async fn post<E: Message>(
        &self,
        source: EventSource,
        event: &E,
    ) -> Result<SendReceipt, DeliveryError> {
        self.inbox.post(source, event, SendOptions::default()).await
    }

    /// Posts many events in one write, in order (bulk imports of history); see
    /// [`Inbox::post_many`](shardbox_core::Inbox::post_many).
    pub async fn post_many<E: Message>(
        &self,
        events: &[(EventSource, E)],
    ) -> Result<shardbox_core::storage::WriteReport, DeliveryError> {
        self.inbox
            .post_many::<E>(events, SendOptions::default())
            .await
    }

    /// Posts with options.
    pub async fn post_with<E: Message>(
        &self,
        source: EventSource,
        event: &E,
        options: SendOptions,
    ) -> Result<SendReceipt, DeliveryError> {
        self.inbox.post(source, event, options).await
    }

    /// Starts this node's workers on the current tokio runtime. The same call on every node.
    /// The returned [`Node`] owns every task it starts (workers, poller, lease watch, TTL
    /// sweep, catch-up resume); call `node.shutdown().await` to stop them.
    pub fn start(&self) -> Node {
        let node = LocalRunner::start(self.delivery.clone());
        let span = tracing::info_span!("catch_up_resume", node = %self.env.config.node_id);
        node.spawn_owned(
            self.clone()
                .resume_catch_ups_periodically(node.stop_signal())
                .instrument(span),
        );
        node
    }

    /// Serves one shard now, on the calling task (tests, manual driving): stages until it
    /// has no due message, then a release.
    ///
    /// Bounded: after [`MAX_DELIVER_STAGES`](crate::MAX_DELIVER_STAGES) stages with messages
    /// still due — handlers that keep writing to the shard, such as a reactor that reacts to
    /// the events of its own commands — the shard is released and the call fails with
    /// [`DeliveryError::StageLimit`]. What the stages did is committed; give the cycle an
    /// end, or call again to go on.
    pub async fn deliver(&self, shard: ShardIndex) -> Result<DeliveryReport, DeliveryError> {
        self.delivery.deliver(shard, WorkerId(0)).await
    }

    /// Serves every shard once, on the calling task; returns the summed report. Over several
    /// databases it first relays what the outboxes hold (see docs/clustering.md). Each shard
    /// as [`Shardbox::deliver`], bounded alike: the first shard past
    /// [`MAX_DELIVER_STAGES`](crate::MAX_DELIVER_STAGES) stages ends the call with
    /// [`DeliveryError::StageLimit`] (the shards after it are not served).
    pub async fn deliver_all(&self) -> Result<DeliveryReport, DeliveryError> {
        // Over several databases, rows written for another database wait in their outbox
        // for a relay: what a running node's relay task does, done here first.
        if let Some(dbs) = shardbox_core::databases::Databases::of(&*self.env.storage) {
            dbs.drain_outboxes().await?;
        }
        let mut total = DeliveryReport::default();
        // The count as this process knows it now (a re-sharding may have changed it).
        for s in 0..self.env.registry.shard_count() {
            total.absorb(&self.deliver(ShardIndex(s)).await?);
        }
        Ok(total)
    }

    /// The framework-kept state of aggregate `A` instance `id` (`None` if it has none yet),
    /// in the default tenant; [`Shardbox::aggregate_state_in`] reads any tenant's.
    pub async fn aggregate_state<A: Aggregate>(
        &self,
        id: &str,
    ) -> Result<Option<A>, DeliveryError> {
        self.state_at(A::KIND, Some(A::STATE_VERSION), "", id).await
    }

    /// The framework-kept state of projection `P` instance `id`, in the default tenant;
    /// [`Shardbox::projection_state_in`] reads any tenant's.
    pub async fn projection_state<P: Projection>(
        &self,
        id: &str,
    ) -> Result<Option<P>, DeliveryError> {
        self.state_at(P::KIND, Some(<P as Projection>::STATE_VERSION), "", id)
            .await
    }

    /// The framework-kept state of process manager `P` instance `id` (`None` before it
    /// started and after it finished).
    pub async fn process_state<P: ProcessManager>(
        &self,
        id: &str,
    ) -> Result<Option<P>, DeliveryError> {
        self.state_at(P::KIND, Some(<P as ProcessManager>::STATE_VERSION), "", id)
            .await
    }

    /// The state of any kind, tenant and id, deserialized as `T` as it is stored (not
    /// upcast: the typed reads, [`Shardbox::aggregate_state`] and its siblings, upcast it to
    /// the type's `STATE_VERSION`). A state that does not deserialize is
    /// [`DeliveryError::UndecodableState`], naming the kind, tenant, id and stored version.
    pub async fn state_of<T: DeserializeOwned>(
        &self,
        kind: &str,
        tenant: &str,
        id: &str,
    ) -> Result<Option<T>, DeliveryError> {
        self.state_at(kind, None, tenant, id).await
    }

    /// The state of `kind`, tenant and id as `T`: upcast to state version `current` first if
    /// one is given (the type's `STATE_VERSION`), as delivery does.
    pub(crate) async fn state_at<T: DeserializeOwned>(
        &self,
        kind: &str,
        current: Option<u32>,
        tenant: &str,
        id: &str,
    ) -> Result<Option<T>, DeliveryError> {
        let key = EntityKey {
            kind: kind.to_owned(),
            tenant: tenant.to_owned(),
            id: id.to_owned(),
        };
        let Some(state) = self.env.storage.load_states(&[key]).await?.pop() else {
            return Ok(None);
        };
        let undecodable = |reason: String| DeliveryError::UndecodableState {
            kind: kind.to_owned(),
            tenant: tenant.to_owned(),
            id: id.to_owned(),
            version: state.state_version,
            reason,
        };
        let bytes = match current {
            Some(current) => self
                .upcasters()
                .upcast_state(kind, state.state_version, current, &state.state)
                .map_err(|e| undecodable(e.to_string()))?,
            None => std::borrow::Cow::Borrowed(&state.state[..]),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| undecodable(format!("it does not deserialize: {e}")))
    }

    /// The running nodes sharing this database: every node beats every `poll_interval` while
    /// it runs, leaves at `shutdown()`, and drops out one `lease_duration` after its last beat
    /// if it dies.
    pub async fn members(&self) -> Result<Vec<shardbox_core::storage::Member>, DeliveryError> {
        Ok(self.env.storage.members(self.env.clock.now()).await?)
    }

    /// Changes the Inbox's shard count to `to` while nodes run and traffic flows: the
    /// operator action behind `shardbox reshard --shards N`. The running nodes hand their
    /// shards over at their next poll round and pause; this call then holds every shard's
    /// lease, moves every row to its target's shard among `to` in one transaction (sends
    /// wait for it, then go on — a sender addressing by the old count is re-addressed, it
    /// sees no error), and the nodes serve the new layout at their next round. Nothing is
    /// lost, per-target order and exactly-once state changes hold across it; delayed,
    /// retrying, blocked and held rows, dead letters and running catch-ups keep their meaning.
    ///
    /// This `Shardbox` need not run a node. Afterwards, start new nodes with `.shards(to)`
    /// (one configured with the old count is refused). Refused, with nothing changed, if
    /// another re-sharding is in progress or the nodes do not hand every shard over within
    /// two minutes (see [`Shardbox::reshard_with`]). See docs/clustering.md.
    ///
    /// ```no_run
    /// # async fn f(shardbox: shardbox::Shardbox) -> Result<(), shardbox::DeliveryError> {
    /// let report = shardbox.reshard(32).await?;
    /// println!("{} -> {} shards, {} rows moved", report.from, report.to, report.moves.inbox_moved);
    /// # Ok(()) }
    /// ```
    pub async fn reshard(&self, to: u32) -> Result<ReshardReport, DeliveryError> {
        self.reshard_with(to, &ReshardOptions::default()).await
    }

    /// [`Shardbox::reshard`] with options (how long to wait for the nodes).
    pub async fn reshard_with(
        &self,
        to: u32,
        options: &ReshardOptions,
    ) -> Result<ReshardReport, DeliveryError> {
        shardbox_core::reshard(&self.env.seat, self.env.registry.addressing(), to, options).await
    }

    /// A snapshot of this node's delivery counters (also exported via the `metrics` crate).
    pub fn metrics(&self) -> shardbox_core::MetricsSnapshot {
        self.env.metrics.snapshot()
    }

    /// The storage's reads (a read-only view: counts, lock table, events, states, catch-ups,
    /// dead letters). Nothing written goes past the application's own calls or a stage's
    /// fenced commit, so no write is reachable here; a test or tool that must write beside
    /// the delivery keeps the storage it built the `Shardbox` with
    /// ([`ShardboxBuilder::shared_storage`](ShardboxBuilder::shared_storage)).
    pub fn storage(&self) -> StorageReads {
        StorageReads::new(self.env.storage.clone())
    }

    /// The upcasters registered on the builder ([`ShardboxBuilder::upcast`]): for a tool that
    /// reads stored events itself ([`NewEvent::upcast_as`](shardbox_core::NewEvent::upcast_as)).
    pub fn upcasters(&self) -> &Upcasters {
        self.env.registry.upcasters()
    }

    /// The validated configuration.
    pub fn config(&self) -> &DeliveryConfig {
        &self.env.config
    }

    /// The Inbox (for raw sends of already serialized messages).
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// The shard that messages to `kind` instance `id` go to (the configured strategy).
    pub fn shard_of(&self, kind: &str, id: &str) -> ShardIndex {
        self.env.registry.shard_of(kind, id)
    }

    /// Addresses an already serialized message: its shard, for a raw write to the storage
    /// the `Shardbox` was built with (tests, imports).
    pub fn address(&self, message: NewMessage) -> InboxWrite {
        self.env.registry.address(message)
    }

    /// What this delivery's stations see (to drive a [`Conveyor`](shardbox_core::Conveyor)
    /// by hand, e.g. in a station's tests).
    pub fn station_context(&self) -> &Arc<StationContext> {
        self.env.station_context()
    }

    /// The delivery environment (internal to the facade).
    pub(crate) fn env(&self) -> &Arc<DeliveryEnv> {
        &self.env
    }

    pub(crate) fn delivery(&self) -> &Arc<Delivery> {
        &self.delivery
    }
}

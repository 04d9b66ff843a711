//! Shared pieces of the stations' tests: the test entities (an aggregate that fails on
//! demand and a projection of its events), a handler wrapper that records every call, and a
//! fixture that builds a Conveyor over a hand-made page on the in-memory backend with a
//! manual clock (so that pages the storage would never return can be tried).
#![allow(dead_code)] // each test crate uses a part

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox_core::memory::MemoryStorage;
use shardbox_core::storage::{EntityKey, Page, StageCommit};
use shardbox_core::DedupKey;
use shardbox_core::{
    Aggregate, Backoff, BatchResult, BatchRun, Context, Conveyor, DeliveryConfig,
    DeliveryConfigBuilder, DeliveryEnv, DeliveryMonitor, EntityHandler, EntityRegistry,
    ExhaustedOutcome, FailurePolicy, HandlerError, InboxMessage, Intent, Lease, ManualClock,
    Message, MessageKind, MessageStatus, Metadata, NewEvent, NewMessage, NodeId, NoopMonitor,
    Projection, ShardIndex, SignalId, StableHashStrategy, WorkRegistry, WorkerId,
};
use shardbox_core::{AggregateHandler, ProjectionHandler};
use shardbox_stations::{LiveDelivery, RecentDeliveries};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// The test entities: an aggregate that fails on one command, and a projection of its events.

/// Records the numbers it was sent, in handling order.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counter {
    pub seen: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CounterCommand {
    /// Emits `Added(n)`.
    Add(u32),
    /// Always refused.
    Fail,
    /// Refused while fewer than `attempts` attempts have failed, then emits `Added(n)`.
    FailUntil { attempts: u32, n: u32 },
}

impl Message for CounterCommand {
    const TYPE: &'static str = "counter.command";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Added(pub u32);

impl Message for Added {
    const TYPE: &'static str = "counter.added";
}

impl Aggregate for Counter {
    const KIND: &'static str = "counter";
    type Command = CounterCommand;
    type Event = Added;

    async fn handle(
        &self,
        command: &CounterCommand,
        cx: &Context<'_>,
    ) -> Result<Vec<Added>, HandlerError> {
        match command {
            CounterCommand::Add(n) => Ok(vec![Added(*n)]),
            CounterCommand::Fail => Err(HandlerError::new(format!(
                "counter {} refuses Fail",
                cx.target_id
            ))),
            CounterCommand::FailUntil { attempts, n } => {
                if cx.attempts < *attempts {
                    Err(HandlerError::new(format!(
                        "not yet: attempt {} of {}",
                        cx.attempts + 1,
                        attempts + 1
                    )))
                } else {
                    Ok(vec![Added(*n)])
                }
            }
        }
    }

    fn apply(&mut self, event: &Added) {
        self.seen.push(event.0);
    }
}

/// Sums the counters' numbers per counter id.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub total: u64,
    pub events: u32,
}

impl Projection for Totals {
    const KIND: &'static str = "totals";
    type Event = Added;

    async fn apply(&mut self, event: &Added, _cx: &Context<'_>) -> Result<(), HandlerError> {
        self.total += u64::from(event.0);
        self.events += 1;
        Ok(())
    }
}

/// One handler call: kind, target id and the seqs of its batch, in the order given.
pub type Calls = Arc<Mutex<Vec<(String, String, Vec<i64>)>>>;

/// Wraps a handler and records every `handle_batch` call.
struct Recording {
    inner: Arc<dyn EntityHandler>,
    calls: Calls,
}

#[async_trait::async_trait]
impl EntityHandler for Recording {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn is_stateful(&self) -> bool {
        self.inner.is_stateful()
    }
    fn state_version(&self) -> u32 {
        self.inner.state_version()
    }
    fn command_type(&self) -> Option<&'static str> {
        self.inner.command_type()
    }
    fn event_types(&self) -> &'static [&'static str] {
        self.inner.event_types()
    }
    fn route(
        &self,
        event: &NewEvent,
        upcasters: &shardbox_core::Upcasters,
    ) -> Result<Vec<String>, HandlerError> {
        self.inner.route(event, upcasters)
    }
    async fn handle_batch(
        &self,
        state: Option<shardbox_core::StoredState<'_>>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let target = batch
            .first()
            .map(|m| m.message.target_id.clone())
            .unwrap_or_default();
        self.calls.lock().unwrap().push((
            self.inner.kind().to_owned(),
            target,
            batch.iter().map(|m| m.seq).collect(),
        ));
        self.inner.handle_batch(state, batch, run).await
    }
}

// ---------------------------------------------------------------------------------------------
// Fixture.

pub fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

pub fn ms(n: i64) -> chrono::Duration {
    chrono::Duration::milliseconds(n)
}

pub fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

/// Three attempts, exponential back-off 1 s, 2 s, … capped at 10 s.
pub fn policy(on_exhausted: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy::new(
        3,
        Backoff::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
        },
        on_exhausted,
    )
}

pub fn config() -> DeliveryConfigBuilder {
    DeliveryConfig::builder()
        .shard_count(1)
        .page_size(50)
        .dedup_window(Duration::from_secs(60))
        .node_id(NodeId("node-a".into()))
        .failure_policy(policy(ExhaustedOutcome::DeadLetter))
}

pub struct Fixture {
    pub env: Arc<DeliveryEnv>,
    pub storage: Arc<MemoryStorage>,
    pub clock: Arc<ManualClock>,
    pub lease: Lease,
    pub calls: Calls,
}

impl Fixture {
    pub async fn new(config: DeliveryConfig) -> Self {
        Self::with_monitor(config, Arc::new(NoopMonitor)).await
    }

    pub async fn with_monitor(config: DeliveryConfig, monitor: Arc<dyn DeliveryMonitor>) -> Self {
        Self::build(config, monitor, default_kinds()).await
    }

    /// A fixture whose registry holds `kinds` (in that order), each call recorded.
    pub async fn build(
        config: DeliveryConfig,
        monitor: Arc<dyn DeliveryMonitor>,
        kinds: Vec<Arc<dyn EntityHandler>>,
    ) -> Self {
        let calls = Calls::default();
        let mut registry = EntityRegistry::new(Arc::new(StableHashStrategy::new()), 1);
        for inner in kinds {
            registry
                .register(Arc::new(Recording {
                    inner,
                    calls: calls.clone(),
                }))
                .unwrap();
        }
        let storage = Arc::new(MemoryStorage::new());
        let clock = Arc::new(ManualClock::new(t0()));
        let lease = storage
            .pick_up(
                ShardIndex(0),
                &config.node_id,
                WorkerId(0),
                t0(),
                t0() + secs(30),
            )
            .await
            .unwrap()
            .expect("a fresh shard is free");
        let env = Arc::new(DeliveryEnv::new(
            Arc::new(registry),
            storage.clone(),
            config,
            monitor,
            clock.clone(),
        ));
        Fixture {
            env,
            storage,
            clock,
            lease,
            calls,
        }
    }

    pub fn conveyor(&self, messages: Vec<InboxMessage>) -> Conveyor {
        self.conveyor_with(Page {
            messages,
            ..Page::default()
        })
    }

    pub fn conveyor_with(&self, page: Page) -> Conveyor {
        Conveyor::new(
            self.env.station_context().clone(),
            self.lease.clone(),
            t0(),
            page,
        )
    }

    /// The handler calls so far, sorted (targets are independent of each other).
    pub fn calls(&self) -> Vec<(String, String, Vec<i64>)> {
        let mut calls = self.calls.lock().unwrap().clone();
        calls.sort();
        calls
    }
}

pub fn default_kinds() -> Vec<Arc<dyn EntityHandler>> {
    vec![
        Arc::new(AggregateHandler::<Counter>::default()),
        Arc::new(ProjectionHandler::<Totals>::default()),
    ]
}

pub fn live() -> LiveDelivery {
    LiveDelivery::new(RecentDeliveries::new(1_000, Duration::from_secs(60)))
}

/// A `to_deliver` command row for counter `target`, with signal `sig-<seq>`.
pub fn command(seq: i64, target: &str, command: &CounterCommand) -> InboxMessage {
    InboxMessage {
        seq,
        shard: ShardIndex(0),
        status: MessageStatus::ToDeliver,
        attempts: 0,
        last_error: None,
        first_failed_at: None,
        errors: Default::default(),
        keep_until: None,
        message: NewMessage {
            signal_id: SignalId(format!("sig-{seq}")),
            kind: MessageKind::Command,
            target_kind: "counter".into(),
            target_id: target.into(),
            tenant: String::new(),
            payload: serde_json::to_vec(command).unwrap(),
            payload_type: CounterCommand::TYPE.into(),
            payload_version: 1,
            metadata: Metadata::new(),
            received_at: t0() - secs(1),
            deliver_after: None,
            expires_at: None,
        },
    }
}

pub fn add(seq: i64, target: &str, n: u32) -> InboxMessage {
    command(seq, target, &CounterCommand::Add(n))
}

pub fn fail(seq: i64, target: &str, attempts: u32) -> InboxMessage {
    InboxMessage {
        attempts,
        ..command(seq, target, &CounterCommand::Fail)
    }
}

pub fn counter_key(id: &str) -> EntityKey {
    EntityKey {
        kind: "counter".into(),
        tenant: String::new(),
        id: id.into(),
    }
}

pub fn dedup_key(target: &str, signal: &str) -> DedupKey {
    DedupKey {
        tenant: String::new(),
        target_kind: "counter".into(),
        target_id: target.into(),
        signal_id: SignalId(signal.into()),
    }
}

pub fn delivered() -> Intent {
    Intent::Delivered {
        keep_until: Some(t0() + secs(60)),
    }
}

pub fn hold(until: DateTime<Utc>) -> Intent {
    Intent::Hold { until }
}

pub fn intents(conveyor: &Conveyor) -> Vec<Option<Intent>> {
    (0..conveyor.page().len())
        .map(|i| conveyor.intent(i).cloned())
        .collect()
}

/// The counter states written by the commit, by id.
pub fn counter_states(commit: &StageCommit) -> Vec<(String, Counter)> {
    let mut states: Vec<(String, Counter)> = commit
        .states
        .iter()
        .filter(|s| s.key.kind == "counter")
        .map(|s| {
            let bytes = s.state.as_ref().expect("a state, not a deletion");
            (s.key.id.clone(), serde_json::from_slice(bytes).unwrap())
        })
        .collect();
    states.sort_by(|a, b| a.0.cmp(&b.0));
    states
}

pub fn counter(seen: &[u32]) -> Counter {
    Counter {
        seen: seen.to_vec(),
    }
}

pub fn retry_error(intent: Option<&Intent>) -> (DateTime<Utc>, String) {
    match intent {
        Some(Intent::RetryAt { at, error }) => (*at, error.clone()),
        other => panic!("expected RetryAt, got {other:?}"),
    }
}

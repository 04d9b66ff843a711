//! The stock stations on hand-made pages: `LiveDelivery` and `Cleanup` run on a Conveyor whose
//! page is built here (so that pages the storage would never return can be tried), and their
//! decisions are read back from the Conveyor or from the commit it turns into. One end-to-end
//! test drives retries through `Delivery::deliver` on the in-memory backend with a manual
//! clock.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox_core::handler::{AggregateHandler, ProjectionHandler};
use shardbox_core::memory::MemoryStorage;
use shardbox_core::message::{DedupKey, InboxWrite};
use shardbox_core::storage::{
    DeadLetter, EntityKey, Page, RowChange, RowUpdate, StageCommit, WriteBatch,
};
use shardbox_core::{
    Aggregate, Backoff, BatchResult, Context, Conveyor, Delivery, DeliveryConfig,
    DeliveryConfigBuilder, DeliveryEnv, DeliveryMonitor, EntityHandler, EntityRegistry,
    EntityStore, EventSource, ExhaustedOutcome, FailureAction, FailureInfo, FailurePolicy,
    HandlerError, Inbox, InboxMessage, InboxStore, Intent, Lease, ManualClock, Message,
    MessageKind, MessageOutcome, MessageStatus, Metadata, NewEvent, NewMessage, NodeId,
    NoopMonitor, Projection, SendOptions, ShardIndex, SignalId, StableHashStrategy, StageReport,
    Station, WorkRegistry, WorkerId,
};
use shardbox_stations::{Cleanup, LiveDelivery, RecentDeliveries};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// The test entities: an aggregate that fails on one command, and a projection of its events.

/// Records the numbers it was sent, in handling order.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Counter {
    seen: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum CounterCommand {
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
struct Added(u32);

impl Message for Added {
    const TYPE: &'static str = "counter.added";
}

impl Aggregate for Counter {
    const KIND: &'static str = "counter";
    type Command = CounterCommand;
    type Event = Added;

    fn handle(
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
struct Totals {
    total: u64,
    events: u32,
}

impl Projection for Totals {
    const KIND: &'static str = "totals";
    type Event = Added;

    fn apply(&mut self, event: &Added, _cx: &Context<'_>) -> Result<(), HandlerError> {
        self.total += u64::from(event.0);
        self.events += 1;
        Ok(())
    }
}

/// One handler call: kind, target id and the seqs of its batch, in the order given.
type Calls = Arc<Mutex<Vec<(String, String, Vec<i64>)>>>;

/// Wraps a handler and records every `handle_batch` call.
struct Recording {
    inner: Arc<dyn EntityHandler>,
    calls: Calls,
}

impl EntityHandler for Recording {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn is_stateful(&self) -> bool {
        self.inner.is_stateful()
    }
    fn command_type(&self) -> Option<&'static str> {
        self.inner.command_type()
    }
    fn event_type(&self) -> Option<&'static str> {
        self.inner.event_type()
    }
    fn route(&self, event: &NewEvent) -> Result<Vec<String>, HandlerError> {
        self.inner.route(event)
    }
    fn handle_batch(
        &self,
        state: Option<&[u8]>,
        batch: &[&InboxMessage],
        now: DateTime<Utc>,
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
        self.inner.handle_batch(state, batch, now)
    }
}

// ---------------------------------------------------------------------------------------------
// Fixture.

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

fn ms(n: i64) -> chrono::Duration {
    chrono::Duration::milliseconds(n)
}

fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

/// Three attempts, exponential back-off 1 s, 2 s, … capped at 10 s.
fn policy(on_exhausted: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy {
        max_attempts: 3,
        backoff: Backoff::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
        },
        on_exhausted,
    }
}

fn config() -> DeliveryConfigBuilder {
    DeliveryConfig::builder()
        .shard_count(1)
        .page_size(50)
        .dedup_window(Duration::from_secs(60))
        .node_id(NodeId("node-a".into()))
        .failure_policy(policy(ExhaustedOutcome::DeadLetter))
}

struct Fixture {
    env: Arc<DeliveryEnv>,
    storage: Arc<MemoryStorage>,
    clock: Arc<ManualClock>,
    lease: Lease,
    calls: Calls,
}

impl Fixture {
    async fn new(config: DeliveryConfig) -> Self {
        Self::with_monitor(config, Arc::new(NoopMonitor)).await
    }

    async fn with_monitor(config: DeliveryConfig, monitor: Arc<dyn DeliveryMonitor>) -> Self {
        Self::build(config, monitor, default_kinds()).await
    }

    /// A fixture whose registry holds `kinds` (in that order), each call recorded.
    async fn build(
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

    fn conveyor(&self, messages: Vec<InboxMessage>) -> Conveyor {
        self.conveyor_with(Page {
            messages,
            ..Page::default()
        })
    }

    fn conveyor_with(&self, page: Page) -> Conveyor {
        Conveyor::new(self.env.clone(), self.lease.clone(), t0(), page)
    }

    /// The handler calls so far, sorted (targets are independent of each other).
    fn calls(&self) -> Vec<(String, String, Vec<i64>)> {
        let mut calls = self.calls.lock().unwrap().clone();
        calls.sort();
        calls
    }
}

fn default_kinds() -> Vec<Arc<dyn EntityHandler>> {
    vec![
        Arc::new(AggregateHandler::<Counter>::default()),
        Arc::new(ProjectionHandler::<Totals>::default()),
    ]
}

fn live() -> LiveDelivery {
    LiveDelivery::new(RecentDeliveries::new(1_000, Duration::from_secs(60)))
}

/// A `to_deliver` command row for counter `target`, with signal `sig-<seq>`.
fn command(seq: i64, target: &str, command: &CounterCommand) -> InboxMessage {
    InboxMessage {
        seq,
        shard: ShardIndex(0),
        status: MessageStatus::ToDeliver,
        attempts: 0,
        last_error: None,
        first_failed_at: None,
        keep_until: None,
        message: NewMessage {
            signal_id: SignalId(format!("sig-{seq}")),
            kind: MessageKind::Command,
            target_kind: "counter".into(),
            target_id: target.into(),
            tenant: String::new(),
            payload: serde_json::to_vec(command).unwrap(),
            payload_type: CounterCommand::TYPE.into(),
            metadata: Metadata::new(),
            received_at: t0() - secs(1),
            deliver_after: None,
            expires_at: None,
        },
    }
}

fn add(seq: i64, target: &str, n: u32) -> InboxMessage {
    command(seq, target, &CounterCommand::Add(n))
}

fn fail(seq: i64, target: &str, attempts: u32) -> InboxMessage {
    InboxMessage {
        attempts,
        ..command(seq, target, &CounterCommand::Fail)
    }
}

fn counter_key(id: &str) -> EntityKey {
    EntityKey {
        kind: "counter".into(),
        tenant: String::new(),
        id: id.into(),
    }
}

fn dedup_key(target: &str, signal: &str) -> DedupKey {
    DedupKey {
        tenant: String::new(),
        target_kind: "counter".into(),
        target_id: target.into(),
        signal_id: SignalId(signal.into()),
    }
}

fn delivered() -> Intent {
    Intent::Delivered {
        keep_until: Some(t0() + secs(60)),
    }
}

fn hold(until: DateTime<Utc>) -> Intent {
    Intent::Hold { until }
}

fn intents(conveyor: &Conveyor) -> Vec<Option<Intent>> {
    (0..conveyor.page().len())
        .map(|i| conveyor.intent(i).cloned())
        .collect()
}

/// The counter states written by the commit, by id.
fn counter_states(commit: &StageCommit) -> Vec<(String, Counter)> {
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

fn counter(seen: &[u32]) -> Counter {
    Counter {
        seen: seen.to_vec(),
    }
}

fn retry_error(intent: Option<&Intent>) -> (DateTime<Utc>, String) {
    match intent {
        Some(Intent::RetryAt { at, error }) => (*at, error.clone()),
        other => panic!("expected RetryAt, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// LiveDelivery.

#[tokio::test]
async fn live_groups_by_target_and_calls_each_handler_once_in_seq_order() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // Out of seq order on purpose: the Conveyor sorts, the station groups.
    let mut c = fx.conveyor(vec![
        add(4, "a", 40),
        add(1, "a", 10),
        add(2, "b", 20),
        add(6, "a", 60),
        add(3, "b", 30),
        add(5, "c", 50),
    ]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1, 4, 6]),
            ("counter".into(), "b".into(), vec![2, 3]),
            ("counter".into(), "c".into(), vec![5]),
        ]
    );
    assert_eq!(intents(&c), vec![Some(delivered()); 6]);

    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        counter_states(&commit),
        vec![
            ("a".into(), counter(&[10, 40, 60])),
            ("b".into(), counter(&[20, 30])),
            ("c".into(), counter(&[50])),
        ],
        "one state write per target, its messages applied in seq order"
    );
    assert_eq!(commit.states.len(), 3);
    let updates: Vec<RowUpdate> = (1..=6)
        .map(|seq| RowUpdate {
            seq,
            change: RowChange::Delivered {
                keep_until: t0() + secs(60),
            },
        })
        .collect();
    assert_eq!(commit.updates, updates);
    assert_eq!(report.delivered, 6);
    assert_eq!(report.page_len, 6);
}

#[tokio::test]
async fn live_leaves_rows_of_other_statuses_and_claimed_rows_alone() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // A replayed (catch-up) row is delivered with its target's live rows, in seq order, and
    // removed at delivery (its signal is unique to the job: nothing to deduplicate later).
    let mut catch_up = add(2, "a", 20);
    catch_up.status = MessageStatus::ToCatchUp;
    let mut done = add(4, "c", 40);
    done.status = MessageStatus::Delivered;
    let mut c = fx.conveyor(vec![add(1, "a", 10), catch_up, add(3, "b", 30), done]);
    c.record(2, hold(t0() + secs(7)));
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(delivered()),
            Some(Intent::Delivered { keep_until: None }),
            Some(hold(t0() + secs(7))),
            None
        ]
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![1, 2])]);
}

#[tokio::test]
async fn live_drops_a_duplicate_within_the_page() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut first = add(1, "a", 10);
    first.message.signal_id = SignalId("same".into());
    let mut again = add(2, "a", 20);
    again.message.signal_id = SignalId("same".into());
    // The same signal to another target is not a duplicate.
    let mut other_target = add(3, "b", 30);
    other_target.message.signal_id = SignalId("same".into());
    let mut c = fx.conveyor(vec![first, again, other_target]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(delivered()),
            Some(Intent::Duplicate),
            Some(delivered())
        ]
    );
    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1]),
            ("counter".into(), "b".into(), vec![3]),
        ]
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        counter_states(&commit),
        vec![("a".into(), counter(&[10])), ("b".into(), counter(&[30]))]
    );
    assert_eq!(
        commit.updates[1],
        RowUpdate {
            seq: 2,
            change: RowChange::Remove
        }
    );
    assert_eq!((report.delivered, report.duplicates), (2, 1));
}

#[tokio::test]
async fn live_drops_rows_the_cache_remembers_from_another_row_and_redelivers_the_same_row() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let recent = RecentDeliveries::new(1_000, Duration::from_secs(60));
    recent.remember(dedup_key("a", "sig-1"), 99);
    recent.remember(dedup_key("a", "sig-2"), 2);
    let station = LiveDelivery::new(recent);

    // seq 1 carries a key delivered as row 99: a duplicate. Row 2 was delivered before but
    // its commit was lost: the same row again, so it is delivered again.
    let mut c = fx.conveyor(vec![add(1, "a", 10), add(2, "a", 20)]);
    station.process(&mut c).await.unwrap();
    assert_eq!(
        intents(&c),
        vec![Some(Intent::Duplicate), Some(delivered())]
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![2])]);

    // The station remembers what it delivered: another row with signal sig-2 is a duplicate,
    // row 2 itself is still redelivered.
    let mut dup = add(10, "a", 30);
    dup.message.signal_id = SignalId("sig-2".into());
    let mut c = fx.conveyor(vec![dup]);
    station.process(&mut c).await.unwrap();
    assert_eq!(intents(&c), vec![Some(Intent::Duplicate)]);

    let mut c = fx.conveyor(vec![add(2, "a", 20)]);
    station.process(&mut c).await.unwrap();
    assert_eq!(intents(&c), vec![Some(delivered())]);
}

#[tokio::test]
async fn live_holds_a_waiting_target_until_its_retry_time() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let until = t0() + secs(5);
    let mut c = fx.conveyor_with(Page {
        messages: vec![add(1, "a", 10), add(2, "b", 20), add(3, "a", 30)],
        waiting: vec![(counter_key("a"), until)],
        ..Page::default()
    });
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![Some(hold(until)), Some(delivered()), Some(hold(until))]
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "b".into(), vec![2])]);
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(counter_states(&commit), vec![("b".into(), counter(&[20]))]);
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Hold { until }
        }
    );
    assert_eq!((report.held, report.delivered), (2, 1));
}

#[tokio::test]
async fn live_retries_a_failure_at_the_backoff_and_holds_only_its_target_behind_it() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // Row 2 already failed once: the second failure backs off base * 2 = 2 s.
    let mut c = fx.conveyor(vec![
        add(1, "a", 10),
        fail(2, "a", 1),
        add(3, "b", 30),
        add(4, "a", 40),
        add(5, "b", 50),
    ]);
    live().process(&mut c).await.unwrap();

    let retry_at = t0() + secs(2);
    assert_eq!(
        intents(&c),
        vec![
            Some(delivered()),
            Some(Intent::RetryAt {
                at: retry_at,
                error: "counter a refuses Fail".into()
            }),
            Some(delivered()),
            Some(hold(retry_at)),
            Some(delivered()),
        ]
    );
    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1, 2, 4]),
            ("counter".into(), "b".into(), vec![3, 5]),
        ]
    );

    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        counter_states(&commit),
        vec![
            ("a".into(), counter(&[10])),
            ("b".into(), counter(&[30, 50]))
        ],
        "the failed message and those behind it leave no trace in the state"
    );
    assert_eq!(
        commit.updates[1],
        RowUpdate {
            seq: 2,
            change: RowChange::RetryAt {
                at: retry_at,
                attempts: 2,
                error: "counter a refuses Fail".into()
            }
        }
    );
    assert_eq!(
        commit.updates[3],
        RowUpdate {
            seq: 4,
            change: RowChange::Hold { until: retry_at }
        }
    );
    assert!(commit.dead_letters.is_empty());
    assert_eq!((report.delivered, report.retried, report.held), (3, 1, 1));
    // Only the handled messages emitted events.
    let emitted: Vec<String> = commit
        .writes
        .events
        .iter()
        .map(|e| e.id.0.clone())
        .collect();
    let mut emitted = emitted;
    emitted.sort();
    assert_eq!(
        emitted,
        vec!["sig-1/event/0", "sig-3/event/0", "sig-5/event/0"]
    );
}

/// Refuses every message of kind `slow`, asking for the next attempt after the number of
/// seconds in its payload.
struct Slow;

impl EntityHandler for Slow {
    fn kind(&self) -> &'static str {
        "slow"
    }
    fn is_stateful(&self) -> bool {
        false
    }
    fn command_type(&self) -> Option<&'static str> {
        None
    }
    fn event_type(&self) -> Option<&'static str> {
        None
    }
    fn route(&self, _: &NewEvent) -> Result<Vec<String>, HandlerError> {
        Ok(Vec::new())
    }
    fn handle_batch(
        &self,
        _: Option<&[u8]>,
        batch: &[&InboxMessage],
        _: DateTime<Utc>,
    ) -> BatchResult {
        let delay: u64 = serde_json::from_slice(&batch[0].message.payload).unwrap();
        let mut outcomes = vec![MessageOutcome::Failed(
            HandlerError::new("busy").retry_after(Duration::from_secs(delay)),
        )];
        outcomes.resize(batch.len(), MessageOutcome::NotAttempted);
        BatchResult {
            outcomes,
            ..BatchResult::default()
        }
    }
}

fn slow(seq: i64, target: &str, delay_secs: u64) -> InboxMessage {
    let mut m = add(seq, target, 0);
    m.message.target_kind = "slow".into();
    m.message.payload = serde_json::to_vec(&delay_secs).unwrap();
    m
}

#[tokio::test]
async fn live_retries_no_sooner_than_the_handler_asks_up_to_the_backoff_cap() {
    let fx = Fixture::build(
        config().build().unwrap(),
        Arc::new(NoopMonitor),
        vec![Arc::new(Slow)],
    )
    .await;
    // The first failure backs off 1 s (cap 10 s): asking for 4 s gets 4 s, for 60 s gets 10 s.
    let mut c = fx.conveyor(vec![slow(1, "s", 4), slow(2, "s", 0), slow(3, "t", 60)]);
    live().process(&mut c).await.unwrap();
    let retry = |at| {
        Some(Intent::RetryAt {
            at,
            error: "busy".into(),
        })
    };
    assert_eq!(
        intents(&c),
        vec![
            retry(t0() + secs(4)),
            Some(hold(t0() + secs(4))),
            retry(t0() + secs(10)),
        ]
    );
}

#[tokio::test]
async fn live_dead_letters_an_exhausted_message_and_releases_its_target() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // Two attempts failed before; this is the third and last.
    let failing = fail(1, "a", 2);
    let mut c = fx.conveyor(vec![failing.clone(), add(2, "a", 20), add(3, "b", 30)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::DeadLetter {
                reason: "counter a refuses Fail".into()
            }),
            Some(hold(t0())),
            Some(delivered()),
        ]
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.dead_letters,
        vec![DeadLetter {
            original: failing,
            reason: "counter a refuses Fail".into(),
            attempts: 3,
            first_attempt_at: Some(t0()),
            last_attempt_at: t0(),
        }]
    );
    assert_eq!(
        commit.updates[..2],
        [
            RowUpdate {
                seq: 1,
                change: RowChange::Remove
            },
            RowUpdate {
                seq: 2,
                change: RowChange::Hold { until: t0() }
            },
        ]
    );
    assert_eq!(counter_states(&commit), vec![("b".into(), counter(&[30]))]);
    assert_eq!(
        (
            report.dead_lettered,
            report.held,
            report.delivered,
            report.retried
        ),
        (1, 1, 1, 0)
    );
}

#[tokio::test]
async fn live_drops_an_exhausted_message_under_a_drop_policy() {
    let fx = Fixture::new(
        config()
            .kind_policy("counter", policy(ExhaustedOutcome::Drop))
            .build()
            .unwrap(),
    )
    .await;
    let mut c = fx.conveyor(vec![fail(1, "a", 2), add(2, "a", 20)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::Drop {
                reason: "counter a refuses Fail".into()
            }),
            Some(hold(t0())),
        ]
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert!(commit.dead_letters.is_empty());
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Remove
        }
    );
    assert_eq!(
        (report.dropped, report.dead_lettered, report.held),
        (1, 0, 1)
    );
}

#[tokio::test]
async fn live_sends_an_unknown_kind_through_the_failure_policy_naming_the_kind() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut ghost1 = add(1, "g", 1);
    ghost1.message.target_kind = "ghost".into();
    let mut ghost2 = add(2, "g", 2);
    ghost2.message.target_kind = "ghost".into();
    let mut ghost_last = add(3, "h", 3);
    ghost_last.message.target_kind = "ghost".into();
    ghost_last.attempts = 2;
    let mut c = fx.conveyor(vec![ghost1, ghost2, ghost_last, add(4, "a", 40)]);
    live().process(&mut c).await.unwrap();

    let (at, error) = retry_error(c.intent(0));
    assert_eq!(at, t0() + secs(1));
    assert!(error.contains("`ghost`"), "{error}");
    assert!(error.contains("node-a"), "{error}");
    assert_eq!(c.intent(1), Some(&hold(t0() + secs(1))));
    match c.intent(2) {
        Some(Intent::DeadLetter { reason }) => assert!(reason.contains("`ghost`"), "{reason}"),
        other => panic!("expected DeadLetter, got {other:?}"),
    }
    assert_eq!(c.intent(3), Some(&delivered()));
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![4])]);
}

#[tokio::test]
async fn live_sends_an_undecodable_payload_through_the_failure_policy() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut garbage = add(1, "a", 10);
    garbage.message.payload = b"{not json".to_vec();
    let mut wrong_type = add(3, "b", 30);
    wrong_type.message.payload_type = "other.command".into();
    wrong_type.attempts = 2;
    let mut c = fx.conveyor(vec![garbage, add(2, "a", 20), wrong_type, add(4, "c", 40)]);
    live().process(&mut c).await.unwrap();

    let (at, error) = retry_error(c.intent(0));
    assert_eq!(at, t0() + secs(1));
    assert!(error.contains("does not deserialize"), "{error}");
    assert_eq!(c.intent(1), Some(&hold(t0() + secs(1))));
    match c.intent(2) {
        Some(Intent::DeadLetter { reason }) => {
            assert!(reason.contains("`other.command`"), "{reason}")
        }
        other => panic!("expected DeadLetter, got {other:?}"),
    }
    assert_eq!(c.intent(3), Some(&delivered()));
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(counter_states(&commit), vec![("c".into(), counter(&[40]))]);
}

#[tokio::test]
async fn live_expires_a_message_whose_ttl_ran_out() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut expired = add(1, "a", 10);
    expired.message.expires_at = Some(t0());
    let mut just_alive = add(2, "a", 20);
    just_alive.message.expires_at = Some(t0() + ms(1));
    let mut c = fx.conveyor(vec![expired, just_alive]);
    live().process(&mut c).await.unwrap();

    assert_eq!(intents(&c), vec![Some(Intent::Expired), Some(delivered())]);
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![2])]);
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Remove
        }
    );
    assert_eq!(counter_states(&commit), vec![("a".into(), counter(&[20]))]);
    assert_eq!((report.expired, report.delivered), (1, 1));
}

/// What a monitor was shown of a failure: seq, attempts, reason, time.
type SeenFailure = (i64, u32, String, DateTime<Utc>);

/// Answers every failure with one action and records what it was shown.
struct FixedAnswer {
    action: FailureAction,
    seen: Mutex<Vec<SeenFailure>>,
}

impl DeliveryMonitor for FixedAnswer {
    fn on_handler_failure(&self, failure: &FailureInfo<'_>) -> FailureAction {
        self.seen.lock().unwrap().push((
            failure.message.seq,
            failure.attempts,
            failure.error.reason.clone(),
            failure.now,
        ));
        self.action
    }
}

#[tokio::test]
async fn live_obeys_the_monitor_answer_to_a_failure() {
    let reason = "counter a refuses Fail".to_owned();
    let cases = [
        (FailureAction::MarkDelivered, delivered(), t0()),
        (
            FailureAction::DeadLetter,
            Intent::DeadLetter {
                reason: reason.clone(),
            },
            t0(),
        ),
        (
            FailureAction::Drop,
            Intent::Drop {
                reason: reason.clone(),
            },
            t0(),
        ),
        (
            FailureAction::RetryAt(t0() + secs(42)),
            Intent::RetryAt {
                at: t0() + secs(42),
                error: reason.clone(),
            },
            t0() + secs(42),
        ),
        (
            FailureAction::RetryAt(t0() - secs(5)),
            Intent::RetryAt {
                at: t0(),
                error: reason.clone(),
            },
            t0(),
        ),
        (
            FailureAction::FollowPolicy,
            Intent::RetryAt {
                at: t0() + secs(1),
                error: reason.clone(),
            },
            t0() + secs(1),
        ),
    ];
    for (action, expected, behind) in cases {
        let monitor = Arc::new(FixedAnswer {
            action,
            seen: Mutex::new(Vec::new()),
        });
        let fx = Fixture::with_monitor(config().build().unwrap(), monitor.clone()).await;
        // The first attempt: the policy alone would retry it in 1 s.
        let mut c = fx.conveyor(vec![fail(1, "a", 0), add(2, "a", 20)]);
        live().process(&mut c).await.unwrap();

        assert_eq!(
            intents(&c),
            vec![Some(expected), Some(hold(behind))],
            "{action:?}"
        );
        assert_eq!(
            *monitor.seen.lock().unwrap(),
            vec![(1, 1, reason.clone(), t0())],
            "{action:?}"
        );
        let (commit, _) = c.into_commit(t0() + secs(30));
        assert!(commit.states.is_empty(), "{action:?}: nothing was handled");
        assert_eq!(
            commit.dead_letters.len(),
            usize::from(action == FailureAction::DeadLetter),
            "{action:?}"
        );
    }
}

#[tokio::test]
async fn live_removes_delivered_rows_at_once_with_a_zero_dedup_window() {
    let fx = Fixture::new(config().dedup_window(Duration::ZERO).build().unwrap()).await;
    let mut c = fx.conveyor(vec![add(1, "a", 10)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(c.intent(0), Some(&Intent::Delivered { keep_until: None }));
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.updates,
        vec![RowUpdate {
            seq: 1,
            change: RowChange::Remove
        }]
    );
    assert_eq!(counter_states(&commit), vec![("a".into(), counter(&[10]))]);
    assert_eq!(report.delivered, 1);
}

#[tokio::test]
async fn live_fans_emitted_events_out_to_the_projection() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut row = add(1, "a", 5);
    row.message.metadata.insert("trace".into(), "t-1".into());
    let mut c = fx.conveyor(vec![row]);
    live().process(&mut c).await.unwrap();
    let (commit, report) = c.into_commit(t0() + secs(30));

    let mut metadata = Metadata::new();
    metadata.insert("trace".into(), "t-1".into());
    let payload = serde_json::to_vec(&Added(5)).unwrap();
    let event = NewEvent {
        id: SignalId("sig-1/event/0".into()),
        event_type: "counter.added".into(),
        source: EventSource {
            kind: "counter".into(),
            id: "a".into(),
        },
        tenant: String::new(),
        occurred_at: t0(),
        payload: payload.clone(),
        metadata: metadata.clone(),
    };
    let copy = InboxWrite {
        shard: ShardIndex(0),
        message: NewMessage {
            signal_id: SignalId("sig-1/event/0".into()),
            kind: MessageKind::Event,
            target_kind: "totals".into(),
            target_id: "a".into(),
            tenant: String::new(),
            payload,
            payload_type: "counter.added".into(),
            metadata,
            received_at: t0(),
            deliver_after: None,
            expires_at: None,
        },
    };
    assert_eq!(
        commit.writes,
        WriteBatch {
            events: vec![event],
            messages: vec![copy],
        }
    );
    assert_eq!(report.fanned_out, 1);
}

/// The shape a stricter read model expects under the same event type name: `Added` payloads
/// do not decode as this, so routing them fails.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StrictAdded {
    amount: u32,
    note: String,
}

impl Message for StrictAdded {
    const TYPE: &'static str = "counter.added";
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct StrictView;

impl Projection for StrictView {
    const KIND: &'static str = "strict";
    type Event = StrictAdded;

    fn apply(&mut self, _: &StrictAdded, _: &Context<'_>) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// One subscriber that cannot route an emitted event must not cost the others their copy, and
/// its own copy goes to the dead letters rather than vanishing.
#[tokio::test]
async fn live_fans_out_to_every_other_subscriber_when_one_cannot_route_the_event() {
    let fx = Fixture::build(
        config().build().unwrap(),
        Arc::new(NoopMonitor),
        vec![
            Arc::new(AggregateHandler::<Counter>::default()),
            Arc::new(ProjectionHandler::<StrictView>::default()),
            Arc::new(ProjectionHandler::<Totals>::default()),
        ],
    )
    .await;
    let mut c = fx.conveyor(vec![add(1, "a", 5)]);
    live().process(&mut c).await.unwrap();
    assert_eq!(c.intent(0), Some(&delivered()));
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(commit.writes.events.len(), 1);
    let copies: Vec<(String, String)> = commit
        .writes
        .messages
        .iter()
        .map(|w| (w.message.target_kind.clone(), w.message.target_id.clone()))
        .collect();
    assert_eq!(copies, vec![("totals".to_owned(), "a".to_owned())]);
    assert_eq!(commit.dead_letters.len(), 1, "the unroutable copy is kept");
    let dead = &commit.dead_letters[0];
    assert_eq!(dead.original.message.target_kind, "strict");
    assert!(
        dead.reason.contains("could not be routed to `strict`"),
        "{}",
        dead.reason
    );
}

// ---------------------------------------------------------------------------------------------
// Cleanup.

#[tokio::test]
async fn cleanup_asks_to_purge_one_page_of_delivered_rows_when_the_read_saw_one() {
    let fx = Fixture::new(config().page_size(17).build().unwrap()).await;
    let mut c = fx.conveyor_with(Page {
        messages: vec![add(1, "a", 10)],
        purge_due: true,
        ..Page::default()
    });
    Cleanup::new().process(&mut c).await.unwrap();

    assert_eq!(c.intent(0), None, "cleanup claims no row of the page");
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(commit.purge_delivered, 17);
    assert_eq!(Cleanup::new().name(), "cleanup");

    // Nothing past its window when the page was read: no purge.
    let mut c = fx.conveyor(vec![add(1, "a", 10)]);
    Cleanup::new().process(&mut c).await.unwrap();
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(commit.purge_delivered, 0);
}

// ---------------------------------------------------------------------------------------------
// End to end through Delivery::deliver.

#[tokio::test]
async fn a_message_failing_twice_is_retried_at_the_backoff_times_and_applied_once() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // The fixture's lease would block the worker: give it back.
    fx.storage.release(&fx.lease).await.unwrap();
    let delivery = Delivery::new(
        fx.env.clone(),
        vec![
            Arc::new(LiveDelivery::new(RecentDeliveries::new(
                1_000,
                Duration::from_secs(60),
            ))) as Arc<dyn Station>,
            Arc::new(Cleanup::new()),
        ],
    );
    let shard = ShardIndex(0);
    let worker = WorkerId(1);
    Inbox::new(fx.env.clone())
        .send::<Counter>(
            "a",
            &CounterCommand::FailUntil { attempts: 2, n: 7 },
            SendOptions::default().signal_id("cmd-1"),
        )
        .await
        .unwrap();

    // First attempt at t0 fails: retry after 1 s.
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(
        (
            report.stages,
            report.totals.retried,
            report.totals.delivered
        ),
        (1, 1, 0)
    );
    let rows = fx.storage.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].attempts, 1);
    assert_eq!(rows[0].message.deliver_after, Some(t0() + secs(1)));
    assert_eq!(
        rows[0].last_error.as_deref(),
        Some("not yet: attempt 1 of 3")
    );
    assert_eq!(
        fx.storage.next_due(shard, t0()).await.unwrap(),
        Some(t0() + secs(1))
    );

    // Not a millisecond early.
    fx.clock.advance(ms(999));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(report.stages, 0);
    assert_eq!(fx.calls().len(), 1);

    // Second attempt at t0 + 1 s fails: retry after 2 s more.
    fx.clock.advance(ms(1));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(
        (
            report.stages,
            report.totals.retried,
            report.totals.delivered
        ),
        (1, 1, 0)
    );
    let rows = fx.storage.rows();
    assert_eq!(rows[0].attempts, 2);
    assert_eq!(rows[0].message.deliver_after, Some(t0() + secs(3)));
    assert_eq!(
        rows[0].last_error.as_deref(),
        Some("not yet: attempt 2 of 3")
    );

    fx.clock.advance(ms(1_999));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(report.stages, 0);
    assert_eq!(fx.calls().len(), 2);
    assert!(fx
        .storage
        .load_states(&[counter_key("a")])
        .await
        .unwrap()
        .is_empty());

    // Third attempt at t0 + 3 s succeeds; its event reaches the projection in the next stage.
    fx.clock.advance(ms(1));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(
        report.totals,
        StageReport {
            page_len: 2,
            delivered: 2,
            fanned_out: 1,
            elapsed: report.totals.elapsed,
            ..StageReport::default()
        }
    );
    assert_eq!(report.stages, 2);
    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1]),
            ("counter".into(), "a".into(), vec![1]),
            ("counter".into(), "a".into(), vec![1]),
            ("totals".into(), "a".into(), vec![2]),
        ]
    );

    let totals_key = EntityKey {
        kind: "totals".into(),
        tenant: String::new(),
        id: "a".into(),
    };
    let states = fx
        .storage
        .load_states(&[counter_key("a"), totals_key.clone()])
        .await
        .unwrap();
    assert_eq!(states.len(), 2);
    for s in &states {
        assert_eq!(s.version, 1, "{:?} written once", s.key);
        assert_eq!(s.updated_at, t0() + secs(3));
        if s.key == totals_key {
            let totals: Totals = serde_json::from_slice(&s.state).unwrap();
            assert_eq!(
                totals,
                Totals {
                    total: 7,
                    events: 1
                }
            );
        } else {
            let c: Counter = serde_json::from_slice(&s.state).unwrap();
            assert_eq!(c, counter(&[7]));
        }
    }
    let rows = fx.storage.rows();
    assert_eq!(
        rows.iter()
            .map(|r| (r.seq, r.status, r.keep_until))
            .collect::<Vec<_>>(),
        vec![
            (1, MessageStatus::Delivered, Some(t0() + secs(63))),
            (2, MessageStatus::Delivered, Some(t0() + secs(63))),
        ]
    );
    assert!(fx.storage.dead_letters().is_empty());

    // Nothing is left to do.
    fx.clock.advance(secs(10));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(report.stages, 0);
    assert_eq!(fx.calls().len(), 4);
}

#[tokio::test]
async fn live_blocks_an_exhausted_message_under_a_block_policy_and_holds_only_its_target() {
    let config = config()
        .failure_policy(policy(ExhaustedOutcome::Block))
        .poll_interval(Duration::from_millis(700))
        .build()
        .unwrap();
    let fx = Fixture::new(config).await;
    let failing = fail(1, "a", 2);
    let mut c = fx.conveyor(vec![failing, add(2, "a", 20), add(3, "b", 30)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::Block {
                reason: "counter a refuses Fail".into()
            }),
            Some(Intent::BehindBlock),
            Some(delivered()),
        ],
        "a's later message is parked behind the block until an unblock; b goes on"
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Block {
                attempts: 3,
                error: "counter a refuses Fail".into()
            }
        }
    );
    assert_eq!(
        commit.updates[1],
        RowUpdate {
            seq: 2,
            change: RowChange::BehindBlock
        }
    );
    assert!(commit.dead_letters.is_empty());
    assert_eq!((report.blocked, report.held, report.delivered), (1, 1, 1));
}

#[tokio::test]
async fn live_parks_a_blocked_targets_rows_and_serves_the_rest() {
    let config = config()
        .poll_interval(Duration::from_millis(400))
        .build()
        .unwrap();
    let fx = Fixture::new(config).await;
    let mut c = fx.conveyor_with(Page {
        messages: vec![add(1, "a", 10), add(2, "b", 20), add(3, "a", 30)],
        blocked: vec![counter_key("a")],
        ..Page::default()
    });
    assert_eq!(c.blocked(), [counter_key("a")]);
    live().process(&mut c).await.unwrap();
    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::BehindBlock),
            Some(delivered()),
            Some(Intent::BehindBlock)
        ],
        "parked, with no time of their own: not a poll interval at a time"
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "b".into(), vec![2])]);
}

#[tokio::test]
async fn a_monitor_can_block_a_target_on_its_first_failure() {
    struct BlockAtOnce;
    impl DeliveryMonitor for BlockAtOnce {
        fn on_handler_failure(&self, _: &FailureInfo<'_>) -> FailureAction {
            FailureAction::Block
        }
    }
    let fx = Fixture::with_monitor(config().build().unwrap(), Arc::new(BlockAtOnce)).await;
    let mut c = fx.conveyor(vec![fail(1, "a", 0), add(2, "a", 20)]);
    live().process(&mut c).await.unwrap();
    assert!(
        matches!(c.intent(0), Some(Intent::Block { .. })),
        "{:?}",
        c.intent(0)
    );
    assert_eq!(c.intent(1), Some(&Intent::BehindBlock));
}

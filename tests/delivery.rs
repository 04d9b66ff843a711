//! The delivery loop end to end on the in-memory backend, driven by hand with a ManualClock:
//! fencing, monitor control, delays, reactors, unknown kinds, configuration errors.

mod common;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use common::{Tally, TallyCommand, TallyEvent, TallyView};
use shardbox::core::memory::MemoryStorage;
use shardbox::core::storage::WriteBatch;
use shardbox::core::{Conveyor, DeliveryMonitor, NodeId, Storage, WorkerId};
use shardbox::core::{MessageKind, NewMessage};
use shardbox::core::{StageInfo, StageReport};
use shardbox::prelude::*;
use shardbox::{
    Backoff, Clock, DeliveryError, ExhaustedOutcome, FailurePolicy, ManualClock, ShardIndex,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

async fn build(
    storage: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
    edit: impl FnOnce(shardbox::ShardboxBuilder) -> shardbox::ShardboxBuilder,
) -> Shardbox {
    edit(
        Shardbox::builder()
            .shared_storage(storage)
            .clock(clock)
            .shards(4)
            .lease_duration(Duration::from_secs(10))
            .aggregate::<Tally>(),
    )
    .build()
    .await
    .expect("build")
}

/// Writes, as another application version would, a command for kind `ghost`, which no node
/// of these tests registers.
async fn write_ghost(sb: &Shardbox, storage: &(impl Storage + ?Sized), at: DateTime<Utc>) {
    let ghost = NewMessage {
        signal_id: "ghost-1".into(),
        kind: MessageKind::Command,
        target_kind: "ghost".into(),
        target_id: "g".into(),
        tenant: String::new(),
        payload: b"{}".to_vec(),
        payload_type: "ghost.command".into(),
        payload_version: 1,
        metadata: Default::default(),
        received_at: at,
        deliver_after: None,
        expires_at: None,
    };
    storage
        .write(WriteBatch {
            events: vec![],
            messages: vec![sb.address(ghost)],
        })
        .await
        .unwrap();
}

/// A station that, the first time it runs, stalls past the lease while another node takes
/// the shard over.
struct Stall {
    clock: Arc<ManualClock>,
    storage: Arc<dyn Storage>,
    fired: AtomicUsize,
}

#[async_trait]
impl shardbox::Station for Stall {
    fn name(&self) -> &str {
        "stall"
    }
    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        if self.fired.fetch_add(1, Ordering::SeqCst) == 0 {
            self.clock.advance(chrono::Duration::seconds(11));
            let now = self.clock.now();
            let other = self
                .storage
                .pick_up(
                    conveyor.lease().shard,
                    &NodeId("other-node".into()),
                    WorkerId(9),
                    now,
                    now + chrono::Duration::seconds(10),
                )
                .await?;
            assert!(other.is_some(), "the expired lease is taken over");
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_worker_that_lost_its_lease_commits_nothing_and_the_next_owner_delivers_once() {
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(t0()));
    let stall = Stall {
        clock: clock.clone(),
        storage: storage.clone(),
        fired: AtomicUsize::new(0),
    };
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.stations(move |p| {
            p.push(stall);
        })
    })
    .await;
    sb.send::<Tally>("t-1", &TallyCommand::Add(7))
        .await
        .unwrap();
    let shard = sb.shard_of("tally", "t-1");

    let stalled = sb.deliver(shard).await.unwrap();
    assert!(stalled.picked_up && stalled.lease_lost, "{stalled:?}");
    assert_eq!(stalled.stages, 0);
    assert_eq!(sb.aggregate_state::<Tally>("t-1").await.unwrap(), None);
    assert_eq!(storage.counts(Some(shard)).await.unwrap().to_deliver, 1);

    // The other node's lease expires; this node picks up again and delivers once.
    clock.advance(chrono::Duration::seconds(11));
    let report = sb.deliver(shard).await.unwrap();
    assert_eq!(report.totals.delivered, 1, "{report:?}");
    assert_eq!(
        sb.aggregate_state::<Tally>("t-1")
            .await
            .unwrap()
            .unwrap()
            .sum,
        7
    );
    let sessions = storage.sessions().await.unwrap();
    let session = sessions.iter().find(|s| s.shard == shard).unwrap();
    assert_eq!(session.epoch.0, 3, "picked up three times");
    let m = sb.metrics();
    assert_eq!(
        (m.lease_pick_ups, m.lease_losses, m.delivered),
        (2, 1, 1),
        "{m:?}"
    );
}

#[tokio::test]
async fn pick_up_is_refused_while_another_worker_holds_the_shard() {
    struct Refusals(Arc<AtomicUsize>);
    impl DeliveryMonitor for Refusals {
        fn on_pick_up_refused(&self, _: ShardIndex) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(t0()));
    let refused = Arc::new(AtomicUsize::new(0));
    let r = refused.clone();
    let sb = build(storage.clone(), clock.clone(), move |b| {
        b.monitor(Refusals(r))
    })
    .await;
    sb.send::<Tally>("t-1", &TallyCommand::Add(1))
        .await
        .unwrap();
    let shard = sb.shard_of("tally", "t-1");
    let now = clock.now();
    storage
        .pick_up(
            shard,
            &NodeId("x".into()),
            WorkerId(0),
            now,
            now + chrono::Duration::seconds(10),
        )
        .await
        .unwrap()
        .expect("free shard");
    let report = sb.deliver(shard).await.unwrap();
    assert!(!report.picked_up);
    assert_eq!(refused.load(Ordering::SeqCst), 1);
    assert_eq!(sb.metrics().lease_refusals, 1);
    assert_eq!(storage.counts(Some(shard)).await.unwrap().to_deliver, 1);
}

#[tokio::test]
async fn the_monitor_can_stop_a_worker_after_a_stage() {
    struct OneStage;
    impl DeliveryMonitor for OneStage {
        fn should_continue(&self, _: &StageInfo, _: &StageReport) -> bool {
            false
        }
    }
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock, |b| b.page_size(2).monitor(OneStage)).await;
    for i in 0..5 {
        sb.send::<Tally>("t-1", &TallyCommand::Record(i))
            .await
            .unwrap();
    }
    let shard = sb.shard_of("tally", "t-1");
    let report = sb.deliver(shard).await.unwrap();
    assert_eq!((report.stages, report.totals.delivered), (1, 2));
    assert_eq!(
        sb.aggregate_state::<Tally>("t-1")
            .await
            .unwrap()
            .unwrap()
            .applied,
        [0, 1]
    );
    let report = sb.deliver(shard).await.unwrap();
    assert_eq!(report.totals.delivered, 2);
    assert_eq!(
        sb.aggregate_state::<Tally>("t-1")
            .await
            .unwrap()
            .unwrap()
            .applied,
        [0, 1, 2, 3]
    );
}

#[tokio::test]
async fn a_delayed_message_is_not_delivered_before_it_is_due() {
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| b).await;
    let later = SendOptions::default().delay(Duration::from_secs(30));
    sb.send_with::<Tally>("t-1", &TallyCommand::Record(1), later)
        .await
        .unwrap();
    sb.send::<Tally>("t-1", &TallyCommand::Record(2))
        .await
        .unwrap();
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 1);
    clock.advance(chrono::Duration::seconds(29));
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 0);
    clock.advance(chrono::Duration::seconds(1));
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 1);
    let state = sb.aggregate_state::<Tally>("t-1").await.unwrap().unwrap();
    assert_eq!(
        state.applied,
        [2, 1],
        "a scheduled command is delivered when due"
    );
}

/// Delivered rows are kept for the deduplication window and purged by a later stage of
/// their shard once it has passed (SQLite: the page read tells the stage a purge has work).
#[tokio::test]
async fn delivered_rows_are_purged_by_a_later_stage_after_their_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(
        shardbox::storage::SqliteStorage::open(dir.path().join("purge.db"))
            .await
            .expect("open"),
    );
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.dedup_window(Duration::from_secs(60))
    })
    .await;
    for i in 0..3 {
        sb.send::<Tally>("t-1", &TallyCommand::Record(i))
            .await
            .unwrap();
    }
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 3);
    let counts = storage.counts(None).await.unwrap();
    assert_eq!(counts.delivered, 3, "kept for the window");

    clock.advance(chrono::Duration::seconds(59));
    sb.send::<Tally>("t-1", &TallyCommand::Record(3))
        .await
        .unwrap();
    assert_eq!(sb.deliver_all().await.unwrap().totals.purged, 0);
    assert_eq!(storage.counts(None).await.unwrap().delivered, 4);

    clock.advance(chrono::Duration::seconds(1));
    sb.send::<Tally>("t-1", &TallyCommand::Record(4))
        .await
        .unwrap();
    assert_eq!(
        sb.deliver_all().await.unwrap().totals.purged,
        3,
        "the first three, past their window"
    );
    assert_eq!(storage.counts(None).await.unwrap().delivered, 2);
}

/// A running node cleans up a shard that gets no new traffic: once the window has passed,
/// the periodic sweep wakes the shard and a stage with an empty page purges its delivered
/// rows, so a re-send of the same signal is delivered again instead of being refused as a
/// duplicate of a row kept forever. On memory and SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_shard_is_purged_by_the_running_node_after_the_window() {
    async fn check(storage: Arc<dyn Storage>) {
        let clock = Arc::new(ManualClock::new(t0()));
        let sb = build(storage.clone(), clock.clone(), |b| {
            b.dedup_window(Duration::from_secs(60))
                .ttl_sweep_interval(Duration::from_millis(50))
        })
        .await;
        let node = sb.start();
        let again = SendOptions::default().signal_id("sig-idle");
        sb.send_with::<Tally>("t-1", &TallyCommand::Record(7), again.clone())
            .await
            .unwrap();
        assert!(node.drain(Duration::from_secs(10)).await.unwrap());
        assert_eq!(storage.counts(None).await.unwrap().delivered, 1);

        clock.advance(chrono::Duration::seconds(61));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while storage.counts(None).await.unwrap().delivered > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the idle shard's delivered row was never purged"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let resent = sb
            .send_with::<Tally>("t-1", &TallyCommand::Record(7), again)
            .await
            .unwrap();
        assert_eq!(
            resent.report.written, 1,
            "the window has passed: not a duplicate"
        );
        assert!(node.drain(Duration::from_secs(10)).await.unwrap());
        node.shutdown().await.unwrap();
        let state = sb.aggregate_state::<Tally>("t-1").await.unwrap().unwrap();
        assert_eq!(state.applied, [7, 7]);
    }
    check(Arc::new(MemoryStorage::new())).await;
    let dir = tempfile::tempdir().expect("tempdir");
    check(Arc::new(
        shardbox::storage::SqliteStorage::open(dir.path().join("idle.db"))
            .await
            .expect("open"),
    ))
    .await;
}

/// A running node forgets the outcomes of commands that were never handled: a shard whose
/// only command was dead-lettered holds no delivered row to purge, yet once the window has
/// passed the periodic sweep asks for a purging stage and the outcome record goes (before,
/// it stayed for good). On memory and SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_shards_outcome_records_are_purged_after_the_window() {
    async fn check<S: Storage + shardbox::core::storage::Inspect>(storage: Arc<S>) {
        let clock = Arc::new(ManualClock::new(t0()));
        let policy = FailurePolicy::new(
            1,
            Backoff::Fixed(Duration::from_secs(1)),
            ExhaustedOutcome::DeadLetter,
        );
        let sb = build(storage.clone(), clock.clone(), |b| {
            b.dedup_window(Duration::from_secs(60))
                .ttl_sweep_interval(Duration::from_millis(50))
                .failure_policy(policy)
        })
        .await;
        let node = sb.start();
        // A command for a kind no node handles: dead-lettered at its first attempt.
        write_ghost(&sb, storage.as_ref(), clock.now()).await;
        assert!(node.drain(Duration::from_secs(10)).await.unwrap());
        assert_eq!(storage.dead_letters().await.unwrap().len(), 1);
        assert_eq!(storage.outcome_records().await.unwrap(), 1);
        assert_eq!(storage.counts(None).await.unwrap().delivered, 0);

        clock.advance(chrono::Duration::seconds(61));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while storage.outcome_records().await.unwrap() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the idle shard's outcome record was never purged"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        node.shutdown().await.unwrap();
    }
    check(Arc::new(MemoryStorage::new())).await;
    let dir = tempfile::tempdir().expect("tempdir");
    check(Arc::new(
        shardbox::storage::SqliteStorage::open(dir.path().join("idle-outcomes.db"))
            .await
            .expect("open"),
    ))
    .await;
}

/// The shard count is recorded by the first node; a node configured with another one is
/// refused at build with an error that gives both numbers and what to do, and one with the
/// recorded count builds. On memory, SQLite and PostgreSQL.
#[tokio::test]
async fn a_node_with_another_shard_count_is_refused() {
    async fn check(storage: Arc<dyn Storage>) {
        let clock = Arc::new(ManualClock::new(t0()));
        let first = build(storage.clone(), clock.clone(), |b| b.shards(16)).await;
        first
            .send::<Tally>("t-1", &TallyCommand::Record(1))
            .await
            .unwrap();
        let refused = Shardbox::builder()
            .shared_storage(storage.clone())
            .shards(8)
            .aggregate::<Tally>()
            .build()
            .await
            .expect_err("another shard count");
        match &refused {
            DeliveryError::Config(shardbox::ConfigError::ShardCountMismatch {
                recorded,
                configured,
            }) => assert_eq!((*recorded, *configured), (16, 8)),
            other => panic!("expected ShardCountMismatch, got {other:?}"),
        }
        let text = refused.to_string();
        assert!(
            text.contains("16") && text.contains("8") && text.contains(".shards(16)"),
            "{text}"
        );
        build(storage, clock, |b| b.shards(16)).await;
    }
    check(Arc::new(MemoryStorage::new())).await;
    let dir = tempfile::tempdir().expect("tempdir");
    check(Arc::new(
        shardbox::storage::SqliteStorage::open(dir.path().join("count.db"))
            .await
            .expect("open"),
    ))
    .await;
    if let Some(url) = common::pg_url("a_node_with_another_shard_count_is_refused") {
        let schema = common::PgSchema::new(&url, "shard_count");
        check(Arc::new(schema.connect(2).await)).await;
    }
}

/// The deduplication window is measured on the configured clock, by every node alike: a
/// signal sent again after the window (the manual clock moved on, no real time passed) is
/// delivered again by the node that delivered it first (its recent-delivery cache still holds
/// the key) exactly as by a node that never saw it.
#[tokio::test]
async fn a_duplicate_after_the_window_is_delivered_again_by_a_warm_node_as_by_a_cold_one() {
    /// Delivers signal `sig` to `t-1`, lets the window pass on the manual clock, purges the
    /// delivered row, sends `sig` again and delivers it: on the first node (`warm`) or on a
    /// fresh one. Returns what `t-1` applied.
    async fn resend_after_the_window(warm: bool) -> Vec<u64> {
        let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let clock = Arc::new(ManualClock::new(t0()));
        let window = |b: shardbox::ShardboxBuilder| b.dedup_window(Duration::from_secs(60));
        let first = build(storage.clone(), clock.clone(), window).await;
        let again = SendOptions::default().signal_id("sig-7");
        first
            .send_with::<Tally>("t-1", &TallyCommand::Record(7), again.clone())
            .await
            .unwrap();
        assert_eq!(first.deliver_all().await.unwrap().totals.delivered, 1);
        clock.advance(chrono::Duration::seconds(61));
        // A later stage of the shard purges the row kept for the window.
        first
            .send::<Tally>("t-1", &TallyCommand::Record(8))
            .await
            .unwrap();
        let r = first.deliver_all().await.unwrap();
        assert_eq!((r.totals.delivered, r.totals.purged), (1, 1));
        let resent = first
            .send_with::<Tally>("t-1", &TallyCommand::Record(7), again)
            .await
            .unwrap();
        assert_eq!(resent.report.written, 1, "the window has passed");
        let node = if warm {
            first
        } else {
            build(storage, clock, window).await
        };
        node.deliver_all().await.unwrap();
        node.aggregate_state::<Tally>("t-1")
            .await
            .unwrap()
            .unwrap()
            .applied
    }
    let cold = resend_after_the_window(false).await;
    assert_eq!(cold, [7, 8, 7]);
    assert_eq!(
        resend_after_the_window(true).await,
        cold,
        "the warm node's cache must not outlast the window on the configured clock"
    );
}

#[tokio::test]
async fn events_fan_out_to_projections_and_reactors_turn_them_into_commands() {
    /// Every `Added(x)` to a tally makes the `mirror-<id>` tally add `x` too.
    struct Mirror;
    impl Reactor for Mirror {
        const KIND: &'static str = "mirror";
        type Event = TallyEvent;
        async fn react(
            &self,
            event: &TallyEvent,
            cx: &Context<'_>,
        ) -> Result<Vec<Outgoing>, HandlerError> {
            match event {
                TallyEvent::Added(x) if !cx.target_id.starts_with("mirror-") => {
                    Ok(vec![Outgoing::command::<Tally>(
                        format!("mirror-{}", cx.target_id),
                        &TallyCommand::Add(*x),
                    )?])
                }
                _ => Ok(vec![]),
            }
        }
    }
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock, |b| {
        b.reactor(Mirror).projection::<TallyView>()
    })
    .await;
    sb.send::<Tally>("a", &TallyCommand::Add(3)).await.unwrap();
    sb.send::<Tally>("a", &TallyCommand::Add(4)).await.unwrap();
    for _ in 0..4 {
        sb.deliver_all().await.unwrap();
    }
    assert_eq!(
        sb.aggregate_state::<Tally>("a").await.unwrap().unwrap().sum,
        7
    );
    assert_eq!(
        sb.aggregate_state::<Tally>("mirror-a")
            .await
            .unwrap()
            .unwrap()
            .sum,
        7
    );
    let view = sb
        .projection_state::<TallyView>("a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((view.events, view.sum), (2, 7));
    let mirror_view = sb
        .projection_state::<TallyView>("mirror-a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((mirror_view.events, mirror_view.sum), (2, 7));
    assert_eq!(
        storage.last_event_seq().await.unwrap(),
        4,
        "2 events of a, 2 of mirror-a"
    );
}

/// A reactor that reacts to the events of its own commands, in one shard: `deliver_all`
/// once never returned; it now stops after `MAX_DELIVER_STAGES` stages with a typed error
/// that says why and what to do, with what the stages did committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliver_stops_a_reactor_that_feeds_itself_at_the_stage_limit() {
    /// Every `Added(x)` to a tally makes the same tally add `x` again.
    struct Echo;
    impl Reactor for Echo {
        const KIND: &'static str = "echo";
        type Event = TallyEvent;
        async fn react(
            &self,
            event: &TallyEvent,
            cx: &Context<'_>,
        ) -> Result<Vec<Outgoing>, HandlerError> {
            match event {
                TallyEvent::Added(x) => Ok(vec![Outgoing::command::<Tally>(
                    cx.target_id.to_owned(),
                    &TallyCommand::Add(*x),
                )?]),
                TallyEvent::Recorded(_) => Ok(vec![]),
            }
        }
    }
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(t0()));
    // One shard: the tally and its echo are served by the same call.
    let sb = build(storage.clone(), clock, |b| b.shards(1).reactor(Echo)).await;
    sb.send::<Tally>("a", &TallyCommand::Add(1)).await.unwrap();

    let called = tokio::time::timeout(Duration::from_secs(120), sb.deliver_all()).await;
    let err = called
        .expect("deliver_all returns although the reactor feeds itself")
        .expect_err("the loop is reported");
    match &err {
        DeliveryError::StageLimit { shard, stages } => {
            assert_eq!(
                (*shard, *stages),
                (ShardIndex(0), shardbox::MAX_DELIVER_STAGES)
            );
        }
        other => panic!("expected StageLimit, got {other}"),
    }
    let text = err.to_string();
    for words in [
        "MAX_DELIVER_STAGES",
        "its own commands",
        "call deliver again",
    ] {
        assert!(text.contains(words), "{text} says {words}");
    }
    // The stages are committed, and the shard is free for the next call.
    let sum = sb.aggregate_state::<Tally>("a").await.unwrap().unwrap().sum;
    assert!(sum >= 2, "the cycle ran under commits: sum {sum}");
    assert_eq!(
        sb.metrics().delivered as usize,
        shardbox::MAX_DELIVER_STAGES
    );
    assert!(storage.sessions().await.unwrap()[0].lease_until.is_none());
}

#[tokio::test]
async fn rows_for_an_unregistered_kind_follow_the_failure_policy_and_never_stall_the_shard() {
    let memory = Arc::new(MemoryStorage::new());
    let storage: Arc<dyn Storage> = memory.clone();
    let clock = Arc::new(ManualClock::new(t0()));
    let policy = FailurePolicy::new(
        2,
        Backoff::Fixed(Duration::from_secs(5)),
        ExhaustedOutcome::DeadLetter,
    );
    let sb = build(storage.clone(), clock.clone(), move |b| {
        b.shards(1).failure_policy(policy)
    })
    .await;
    // Another application version wrote a row for a kind this node does not know.
    write_ghost(&sb, storage.as_ref(), clock.now()).await;
    sb.send::<Tally>("t-1", &TallyCommand::Add(1))
        .await
        .unwrap();
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.delivered, r.totals.retried), (1, 1), "{r:?}");
    clock.advance(chrono::Duration::seconds(5));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(r.totals.dead_lettered, 1, "{r:?}");
    let dead = memory.dead_letters();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].reason.contains("ghost"), "{}", dead[0].reason);
    assert_eq!(dead[0].attempts, 2);
    let m = sb.metrics();
    assert_eq!(
        (m.retries, m.dead_lettered, m.delivered),
        (1, 1, 1),
        "{m:?}"
    );
    assert_eq!(storage.counts(None).await.unwrap().pending(), 0);
}

#[tokio::test]
async fn bad_configuration_and_input_give_typed_errors() {
    let err = Shardbox::builder()
        .aggregate::<Tally>()
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("storage"), "{err}");
    let err = Shardbox::builder()
        .memory()
        .aggregate::<Tally>()
        .aggregate::<Tally>()
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("registered twice"), "{err}");
    let err = Shardbox::builder()
        .memory()
        .shards(0)
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`shards`"), "{err}");

    let sb = Shardbox::builder().memory().build().await.unwrap();
    let err = sb
        .send::<Tally>("t", &TallyCommand::Add(1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, DeliveryError::UnknownKind { ref kind, .. } if kind == "tally"),
        "{err}"
    );
    // The advice names the builder's real calls, every entity family's.
    let advice = err.to_string();
    for call in [
        ".aggregate::<T>()",
        ".projection::<T>()",
        ".reactor(r)",
        ".process_manager::<T>()",
    ] {
        assert!(advice.contains(call), "{call}: {advice}");
    }
    assert!(!advice.contains(".reactor::<T>()"), "{advice}");
    assert!(advice.contains("(registered kinds: none)"), "{advice}");
    // With kinds registered, it names them: a misspelling is seen at once.
    let sb = Shardbox::builder()
        .memory()
        .aggregate::<Tally>()
        .build()
        .await
        .unwrap();
    let err = sb
        .catch_up::<TallyView>(shardbox::CatchUp::all())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("(registered kinds: `tally`)"),
        "{err}"
    );
}

/// A station that awaits slow I/O for longer than the lease.
struct SlowIo(Duration);

#[async_trait]
impl shardbox::Station for SlowIo {
    fn name(&self) -> &str {
        "slow-io"
    }
    async fn process(&self, _: &mut Conveyor) -> Result<(), DeliveryError> {
        tokio::time::sleep(self.0).await;
        Ok(())
    }
}

#[tokio::test]
async fn a_slow_but_healthy_stage_keeps_its_lease_through_the_heartbeat() {
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(1)
        .lease_duration(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(50))
        .aggregate::<Tally>()
        .stations(|p| {
            p.push(SlowIo(Duration::from_millis(900)));
        })
        .build()
        .await
        .unwrap();
    sb.send::<Tally>("t-1", &TallyCommand::Add(2))
        .await
        .unwrap();
    let stage = tokio::spawn({
        let sb = sb.clone();
        async move { sb.deliver(ShardIndex(0)).await }
    });
    // Three lease durations into the stage, another node still cannot take the shard.
    let mut refused = 0;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(120)).await;
        let now = Utc::now();
        let other = storage
            .pick_up(
                ShardIndex(0),
                &NodeId("intruder".into()),
                WorkerId(1),
                now,
                now + chrono::Duration::milliseconds(300),
            )
            .await
            .unwrap();
        assert!(other.is_none(), "the heartbeat keeps the lease");
        refused += 1;
    }
    let report = stage.await.unwrap().unwrap();
    assert_eq!(refused, 6);
    assert!(!report.lease_lost, "{report:?}");
    assert_eq!(report.totals.delivered, 1);
    assert_eq!(
        sb.aggregate_state::<Tally>("t-1")
            .await
            .unwrap()
            .unwrap()
            .sum,
        2
    );
}

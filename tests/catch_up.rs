//! Catch-up: rebuilding a projection from the event store while live traffic flows, on
//! memory, SQLite and PostgreSQL. Every check compares against a fold computed by the test
//! itself from what it posted.

mod common;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox::core::storage::{CatchUpStatus, EntityKey, EntityStateWrite};
use shardbox::core::{DeliveryMonitor, NodeId, Storage, WorkerId};
use shardbox::core::{StageInfo, StageReport};
use shardbox::prelude::*;
use shardbox::{
    Backoff, CatchUp, DeadLetterFilter, DeliveryError, ExhaustedOutcome, FailurePolicy,
    ManualClock, ShardIndex, StorageError,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A booking on an account: event number `n` of that account, amount `amount`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Booked {
    n: u64,
    amount: i64,
}

impl Message for Booked {
    const TYPE: &'static str = "catch-up-test.booked";
}

/// The projection under rebuild: every booking number in order, and the balance.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Ledger {
    seen: Vec<u64>,
    balance: i64,
}

impl Projection for Ledger {
    const KIND: &'static str = "ledger";
    type Event = Booked;

    async fn apply(&mut self, e: &Booked, _: &Context<'_>) -> Result<(), HandlerError> {
        self.seen.push(e.n);
        self.balance += e.amount;
        Ok(())
    }
}

/// A second projection of the same events: how many bookings, and their sum of squares.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Tally {
    count: u64,
    squares: i64,
}

impl Projection for Tally {
    const KIND: &'static str = "tally";
    type Event = Booked;

    async fn apply(&mut self, e: &Booked, _: &Context<'_>) -> Result<(), HandlerError> {
        self.count += 1;
        self.squares += e.amount * e.amount;
        Ok(())
    }
}

/// The booking amount a [`Strict`] ledger refuses.
const POISON: i64 = 1013;

/// A ledger that refuses one amount: its replay cannot be applied directly.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Strict(Ledger);

impl Projection for Strict {
    const KIND: &'static str = "strict";
    type Event = Booked;

    async fn apply(&mut self, e: &Booked, ctx: &Context<'_>) -> Result<(), HandlerError> {
        if e.amount == POISON {
            return Err(HandlerError::new("poisoned booking"));
        }
        self.0.apply(e, ctx).await
    }
}

/// What the test posted, per account, in posting order.
#[derive(Default)]
struct History(BTreeMap<String, Vec<Booked>>);

impl History {
    fn fold(&self, id: &str) -> Ledger {
        let mut l = Ledger::default();
        for b in self.0.get(id).map(Vec::as_slice).unwrap_or(&[]) {
            l.seen.push(b.n);
            l.balance += b.amount;
        }
        l
    }
}

fn account(i: usize) -> String {
    format!("acc-{i:03}")
}

async fn post(sb: &Shardbox, history: &mut History, id: &str, amount: i64) {
    let list = history.0.entry(id.to_owned()).or_default();
    let b = Booked {
        n: list.len() as u64,
        amount,
    };
    sb.post(EventSource::external(id), &b).await.expect("post");
    list.push(b);
}

async fn build(storage: Arc<dyn Storage>, page: usize) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(8)
        .catch_up_page_size(page)
        .poll_interval(Duration::from_millis(50))
        .projection::<Ledger>()
        .build()
        .await
        .expect("build")
}

/// Overwrites the ledger states of `ids` with garbage, under each shard's lease, so that a
/// catch-up that does nothing cannot pass.
async fn corrupt(sb: &Shardbox, storage: &dyn Storage, ids: &[String]) {
    let garbage = serde_json::to_vec(&Ledger {
        seen: vec![999_999],
        balance: -1,
    })
    .unwrap();
    let mut by_shard: BTreeMap<ShardIndex, Vec<EntityStateWrite>> = BTreeMap::new();
    for id in ids {
        by_shard
            .entry(sb.shard_of(Ledger::KIND, id))
            .or_default()
            .push(EntityStateWrite {
                key: EntityKey {
                    kind: Ledger::KIND.into(),
                    tenant: String::new(),
                    id: id.clone(),
                },
                state: Some(garbage.clone()),
                state_version: 1,
            });
    }
    for (shard, states) in by_shard {
        let now = Utc::now();
        let lease = storage
            .pick_up(
                shard,
                &NodeId("vandal".into()),
                WorkerId(0),
                now,
                now + chrono::Duration::seconds(30),
            )
            .await
            .unwrap()
            .expect("shard free while no runner runs");
        let mut commit = shardbox::core::storage::StageCommit::new(
            lease.clone(),
            now,
            now + chrono::Duration::seconds(30),
        );
        commit.states = states;
        commit.states.sort_by(|a, b| a.key.cmp(&b.key));
        storage.commit_stage(commit).await.unwrap();
        storage.release(&lease).await.unwrap();
    }
}

async fn ledger(sb: &Shardbox, id: &str) -> Ledger {
    sb.projection_state::<Ledger>(id)
        .await
        .unwrap()
        .unwrap_or_default()
}

/// Imports `n` bookings in writes of 500 (in order): booking `i` goes to account
/// `i % accounts` with amount `amount(i)`.
async fn import(
    sb: &Shardbox,
    history: &mut History,
    n: usize,
    accounts: usize,
    amount: impl Fn(usize) -> i64,
) {
    for start in (0..n).step_by(500) {
        let mut batch = Vec::with_capacity(500);
        for i in start..(start + 500).min(n) {
            let id = account(i % accounts);
            let list = history.0.entry(id.clone()).or_default();
            let b = Booked {
                n: list.len() as u64,
                amount: amount(i),
            };
            list.push(b.clone());
            batch.push((EventSource::external(&id), b));
        }
        sb.post_many(&batch).await.expect("post many");
    }
}

/// 20,000 historical events over 500 accounts; the ledgers are corrupted; a catch-up of all
/// (or of a subset) runs while 4 tasks keep posting. At the end every rebuilt ledger equals
/// the fold over its full history; ledgers outside the subset are untouched.
///
/// `backlog`: the history is posted while no worker runs, so the catch-up starts with all of
/// it still pending as live rows (each of them covered by the replay, to be dropped or held);
/// otherwise it is delivered first.
async fn rebuild_under_load(storage: Arc<dyn Storage>, subset: bool, backlog: bool) {
    let (accounts, history) = (500, 20_000);
    let sb = build(storage.clone(), 1_000).await;
    let mut log = History::default();
    let node = (!backlog).then(|| sb.start());
    import(&sb, &mut log, history, accounts, |i| (i % 97) as i64 - 40).await;
    if let Some(node) = node {
        assert!(
            node.drain(Duration::from_secs(300)).await.unwrap(),
            "history delivered"
        );
        node.shutdown().await.unwrap();
    }
    let ids: Vec<String> = (0..accounts).map(account).collect();
    corrupt(&sb, &*storage, &ids).await;

    let chosen: Vec<String> = if subset {
        ids.iter().step_by(10).cloned().collect()
    } else {
        ids.clone()
    };
    let request = if subset {
        CatchUp::ids(chosen.clone())
    } else {
        CatchUp::all()
    };
    let job = sb
        .catch_up::<Ledger>(request)
        .await
        .expect("start catch-up");
    let node = sb.start();

    // 4 tasks keep posting while the catch-up runs, each to its own accounts.
    let log = Arc::new(tokio::sync::Mutex::new(log));
    let mut posters = Vec::new();
    for t in 0..4 {
        let (sb, log) = (sb.clone(), log.clone());
        posters.push(tokio::spawn(async move {
            for k in 0..(history / 80) {
                let id = account((t + 4 * k) % accounts);
                let mut h = log.lock().await;
                post(&sb, &mut h, &id, 7).await;
            }
        }));
    }
    let mid = job.progress().await.unwrap();
    assert!(mid.total_estimate >= history as i64 / if subset { 50 } else { 1 });
    let done = job.wait(Duration::from_secs(300)).await.unwrap();
    assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    for p in posters {
        p.await.unwrap();
    }
    // Live events held during the catch-up are due again a poll interval after they were
    // held: wait until nothing at all is pending, not only until nothing is due.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while sb.storage().counts(None).await.unwrap().pending() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "everything delivered in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await.unwrap();

    let log = log.lock().await;
    for id in &ids {
        let got = ledger(&sb, id).await;
        if chosen.contains(id) {
            assert_eq!(
                got,
                log.fold(id),
                "{id} equals the fold over its full history"
            );
        } else {
            // Untouched by the catch-up: the garbage, plus the live events posted meanwhile.
            assert_eq!(got.seen.first(), Some(&999_999), "{id} was not rebuilt");
        }
    }
    let progress = job.progress().await.unwrap();
    assert!(
        progress.replayed
            >= if subset {
                history as i64 / 10
            } else {
                history as i64
            },
        "{progress:?}"
    );
    assert_eq!(sb.storage().counts(None).await.unwrap().pending(), 0);
}

/// Two projection kinds catch up at once (all ids of each) while posting goes on, to existing
/// accounts and to accounts that appear only mid-way (no history, no state at the start).
/// Both end equal to folds over the full history.
async fn two_kinds_at_once_with_new_targets(storage: Arc<dyn Storage>) {
    let (accounts, history) = (50, 2_000);
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(8)
        .catch_up_page_size(150)
        .poll_interval(Duration::from_millis(50))
        .projection::<Ledger>()
        .projection::<Tally>()
        .build()
        .await
        .expect("build");
    let mut log = History::default();
    import(&sb, &mut log, history, accounts, |i| (i % 13) as i64 - 6).await;
    let ledgers = sb.catch_up::<Ledger>(CatchUp::all()).await.expect("ledger");
    let tallies = sb.catch_up::<Tally>(CatchUp::all()).await.expect("tally");
    let node = sb.start();
    // Mid-way: old accounts and 10 new ones (acc-050 .. acc-059).
    for k in 0..200 {
        post(&sb, &mut log, &account(k % (accounts + 10)), 3).await;
    }
    for job in [&ledgers, &tallies] {
        let done = job.wait(Duration::from_secs(120)).await.unwrap();
        assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    }
    assert!(node.drain(Duration::from_secs(120)).await.unwrap());
    node.shutdown().await.unwrap();
    for i in 0..accounts + 10 {
        let id = account(i);
        let fold = log.fold(&id);
        assert_eq!(ledger(&sb, &id).await, fold, "{id}");
        let tally = sb
            .projection_state::<Tally>(&id)
            .await
            .unwrap()
            .unwrap_or_default();
        let bookings = log.0.get(&id).map(Vec::as_slice).unwrap_or(&[]);
        assert_eq!(
            tally,
            Tally {
                count: bookings.len() as u64,
                squares: bookings.iter().map(|b| b.amount * b.amount).sum(),
            },
            "{id}"
        );
    }
}

/// A replayed event the projection refuses: its page is written to the Inbox instead of being
/// applied directly, the failure policy dead-letters the poisoned copy, its target goes on in
/// order, later pages are applied directly again, and the job completes.
async fn poison_event_in_replay_follows_the_failure_policy(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .catch_up_page_size(40)
        .poll_interval(Duration::from_millis(50))
        .projection::<Strict>()
        .kind_policy(
            Strict::KIND,
            FailurePolicy::new(
                2,
                Backoff::Fixed(Duration::from_millis(10)),
                ExhaustedOutcome::DeadLetter,
            ),
        )
        .build()
        .await
        .expect("build");
    let mut log = History::default();
    import(&sb, &mut log, 400, 20, |i| {
        if i == 123 {
            POISON
        } else {
            i as i64
        }
    })
    .await;
    // Every live row is still pending: the catch-up covers them all.
    let job = sb.catch_up::<Strict>(CatchUp::all()).await.unwrap();
    let node = sb.start();
    let done = job.wait(Duration::from_secs(120)).await.unwrap();
    assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    assert!(node.drain(Duration::from_secs(120)).await.unwrap());
    node.shutdown().await.unwrap();
    assert_eq!(done.replayed, 400);
    for i in 0..20 {
        let id = account(i);
        let mut expected = Ledger::default();
        for b in &log.0[&id] {
            if b.amount != POISON {
                expected.seen.push(b.n);
                expected.balance += b.amount;
            }
        }
        let got = sb.projection_state::<Strict>(&id).await.unwrap().unwrap();
        assert_eq!(got.0, expected, "{id}");
    }
    let letters = sb
        .storage()
        .list_dead_letters(&DeadLetterFilter {
            target_kind: Some(Strict::KIND.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        letters[0].letter.original.message.target_id,
        account(123 % 20)
    );
    assert_eq!(
        letters[0].letter.original.message.kind,
        shardbox::core::MessageKind::CatchUp
    );
}

/// Equal timestamps at catch-up page boundaries: every event has the same `occurred_at`, and
/// pages of 7 events replay all of them exactly once.
async fn equal_timestamps_across_pages(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(
        DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
    ));
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .clock(clock.clone())
        .shards(3) // over three databases too: one shard each at least
        .catch_up_page_size(7)
        .projection::<Ledger>()
        .build()
        .await
        .unwrap();
    let mut history = History::default();
    for i in 0..50 {
        post(&sb, &mut history, &account(i % 3), i as i64).await;
    }
    let job = sb.catch_up::<Ledger>(CatchUp::all()).await.unwrap();
    for _ in 0..40 {
        sb.deliver_all().await.unwrap();
        // Finalizing ticks are due one poll interval later.
        clock.advance(chrono::Duration::seconds(1));
    }
    assert_eq!(
        job.progress().await.unwrap().status,
        CatchUpStatus::Completed
    );
    for i in 0..3 {
        assert_eq!(ledger(&sb, &account(i)).await, history.fold(&account(i)));
    }
    assert_eq!(job.progress().await.unwrap().replayed, 50);
}

/// A job with zero targets completes at once; an overlapping job is refused with a typed
/// error; a disjoint one starts; catch-up of an unregistered projection is refused.
async fn zero_targets_and_overlap(storage: Arc<dyn Storage>) {
    let sb = build(storage, 100).await;
    let empty = sb
        .catch_up::<Ledger>(CatchUp::ids(Vec::<String>::new()))
        .await
        .unwrap();
    assert_eq!(
        empty.progress().await.unwrap().status,
        CatchUpStatus::Completed
    );

    let first = sb
        .catch_up::<Ledger>(CatchUp::ids(["a", "b"]))
        .await
        .unwrap();
    let refused = sb
        .catch_up::<Ledger>(CatchUp::ids(["b", "c"]))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, DeliveryError::Storage(StorageError::CatchUpOverlap { running_job, .. }) if running_job == first.id()),
        "{refused}"
    );
    let refused = sb.catch_up::<Ledger>(CatchUp::all()).await.unwrap_err();
    assert!(refused.to_string().contains("already running"), "{refused}");
    sb.catch_up::<Ledger>(CatchUp::ids(["c"]))
        .await
        .expect("disjoint ids start");
    // Ids that do not exist yet: the job runs and completes with empty ledgers.
    for _ in 0..10 {
        sb.deliver_all().await.unwrap();
    }
    assert_eq!(
        first.progress().await.unwrap().status,
        CatchUpStatus::Completed
    );
    assert_eq!(sb.projection_state::<Ledger>("a").await.unwrap(), None);

    let other = Shardbox::builder().memory().build().await.unwrap();
    let err = other.catch_up::<Ledger>(CatchUp::all()).await.unwrap_err();
    assert!(matches!(err, DeliveryError::UnknownKind { .. }), "{err}");
}

/// A worker serving the job's home shard is dropped after one replay step; another node over
/// the same storage resumes the job from its committed cursor and completes it.
async fn crash_mid_catch_up(storage: Arc<dyn Storage>) {
    struct OneStage;
    impl DeliveryMonitor for OneStage {
        fn should_continue(&self, _: &StageInfo, _: &StageReport) -> bool {
            false
        }
    }
    // Both nodes must agree on the shard count (as every node of a deployment must).
    let first = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(8)
        .catch_up_page_size(10)
        .monitor(OneStage)
        .projection::<Ledger>()
        .build()
        .await
        .unwrap();
    let mut history = History::default();
    for i in 0..95 {
        post(&first, &mut history, &account(i % 5), 1 + i as i64).await;
    }
    for _ in 0..30 {
        first.deliver_all().await.unwrap();
    }
    let job = first.catch_up::<Ledger>(CatchUp::all()).await.unwrap();
    let home = first.shard_of(shardbox::core::catch_up::TICK_KIND, &job.id().to_string());
    first.deliver(home).await.unwrap();
    if job.progress().await.unwrap().replayed == 0 {
        // Over several databases the first step only resets the targets in each database
        // and reads the set; the next one replays.
        first.deliver(home).await.unwrap();
    }
    let after_one = job.progress().await.unwrap();
    assert_eq!(
        after_one.replayed, 10,
        "one step of 10 events committed: {after_one:?}"
    );
    assert_eq!(after_one.status, CatchUpStatus::InProgress);
    drop(first);

    let second = build(storage, 10).await;
    let node = second.start();
    let done = job.wait(Duration::from_secs(60)).await.unwrap();
    assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    assert!(node.drain(Duration::from_secs(60)).await.unwrap());
    node.shutdown().await.unwrap();
    assert_eq!(done.replayed, 95, "every event replayed once: {done:?}");
    for i in 0..5 {
        assert_eq!(
            ledger(&second, &account(i)).await,
            history.fold(&account(i))
        );
    }
}

async fn rebuild_all_under_load(storage: Arc<dyn Storage>) {
    rebuild_under_load(storage, false, false).await;
}

async fn rebuild_all_with_history_pending(storage: Arc<dyn Storage>) {
    rebuild_under_load(storage, false, true).await;
}

async fn rebuild_subset_under_load(storage: Arc<dyn Storage>) {
    rebuild_under_load(storage, true, false).await;
}

// Every case also over three databases: the replay reads the set each database's events
// held once all were reset, merged; targets and sources are spread over the databases, so
// most live copies and replayed rows cross between them through the outboxes.
common::on_every_backend!(file = "catch_up", threads = 4, connections = 8, several = 4;
    rebuild_all_under_load,
    rebuild_all_with_history_pending,
    rebuild_subset_under_load,
    two_kinds_at_once_with_new_targets,
    poison_event_in_replay_follows_the_failure_policy,
    equal_timestamps_across_pages,
    zero_targets_and_overlap,
    crash_mid_catch_up,
);

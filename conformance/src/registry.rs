//! Lock-table cases: pick-up as compare-and-set, epochs, fencing of renew, release and commit.

use super::fixtures::*;
use chrono::Duration;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::ShardSession;
use shardbox_core::{LeaseEpoch, MessageStatus, ShardIndex, Storage, StorageError, WorkerId};
use std::sync::Arc;

/// A held lease cannot be picked up, not even by its own node; an expired one can, with the
/// next epoch.
pub async fn pick_up_refused_while_held<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(3);
    let a = pick(&store, 3, "node-a", t0()).await;
    assert_eq!(a.epoch, LeaseEpoch(1));
    assert_eq!(
        (a.shard, a.picked_at, a.lease_until),
        (shard, t0(), secs(30))
    );
    for (who, worker) in [("node-b", 1), ("node-a", 2)] {
        let refused = store
            .pick_up(shard, &node(who), WorkerId(worker), secs(10), secs(40))
            .await
            .expect("pick_up");
        assert_eq!(refused, None, "{who}/{worker} took a held lease");
    }
    let b = store
        .pick_up(shard, &node("node-b"), WorkerId(7), secs(30), secs(60))
        .await
        .expect("pick_up")
        .expect("a lease is free when lease_until has come");
    assert_eq!((b.epoch, b.worker_id), (LeaseEpoch(2), WorkerId(7)));
    assert_eq!(
        store.sessions().await.expect("sessions"),
        vec![ShardSession {
            shard,
            node_id: Some(node("node-b")),
            worker_id: Some(WorkerId(7)),
            epoch: LeaseEpoch(2),
            picked_at: Some(secs(30)),
            lease_until: Some(secs(60)),
        }]
    );
}

/// Release frees the shard at once and the next pick-up gets a higher epoch; a stale lease
/// can neither release nor renew.
pub async fn release_then_pick_up_gives_higher_epoch<S: Storage + Inspect>(store: S) {
    let a = pick(&store, 0, "node-a", t0()).await;
    store.release(&a).await.expect("release");
    let sessions = store.sessions().await.expect("sessions");
    assert_eq!(sessions[0].lease_until, None);
    let b = pick(&store, 0, "node-b", secs(1)).await;
    assert!(b.epoch > a.epoch, "{:?} after {:?}", b.epoch, a.epoch);

    store.release(&a).await.expect("a stale release is a no-op");
    let sessions = store.sessions().await.expect("sessions");
    assert_eq!(
        sessions[0].lease_until,
        Some(secs(31)),
        "b still holds the shard"
    );

    let renewed = store.renew(&b, secs(90)).await.expect("renew");
    assert_eq!((renewed.epoch, renewed.lease_until), (b.epoch, secs(90)));
    assert_eq!(
        store.sessions().await.expect("s")[0].lease_until,
        Some(secs(90))
    );
    let err = store.renew(&a, secs(99)).await.expect_err("stale renew");
    match err {
        StorageError::LeaseLost {
            shard,
            held,
            current,
        } => assert_eq!(
            (shard, held, current),
            (ShardIndex(0), a.epoch, Some(b.epoch))
        ),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

/// A worker whose expired lease was taken over commits nothing; the new owner commits.
pub async fn fenced_commit_refused_after_lease_taken<S: Storage + Inspect>(store: S) {
    store
        .write(messages(vec![command(0, "a", "m1")]))
        .await
        .expect("write");
    let a = pick(&store, 0, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    let seq = page.messages[0].seq;
    // The same node takes the shard over with another worker (say, after a restart): only
    // the epoch tells the two apart.
    let b = take_over(&store, 0, "node-a").await;
    let before = store.rows().await.expect("rows");

    let mut late = stage(&a, secs(32), vec![delivered(seq, secs(90))]);
    late.states = vec![state(key("a"), Some("stale"))];
    late.writes.events = vec![event("e-late", "Deposited", secs(32))];
    late.writes.messages = vec![command(5, "z", "fan-out")];
    late.purge_delivered = 10;
    let err = store.commit_stage(late).await.expect_err("fenced commit");
    match err {
        StorageError::LeaseLost {
            shard,
            held,
            current,
        } => assert_eq!(
            (shard, held, current),
            (ShardIndex(0), a.epoch, Some(b.epoch))
        ),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(
        store.rows().await.expect("rows"),
        before,
        "no row changed or added"
    );
    assert_no_state_nor_event(&store, &["a"]).await;
    let session = &store.sessions().await.expect("sessions")[0];
    assert_eq!(
        (session.worker_id, session.lease_until),
        (Some(WorkerId(2)), Some(secs(61))),
        "the loser did not renew the lease"
    );

    let report = store
        .commit_stage(stage(&b, secs(33), vec![delivered(seq, secs(90))]))
        .await
        .expect("the owner commits");
    assert_eq!(report.lease.epoch, b.epoch);
    assert_eq!(report.lease.lease_until, secs(33) + Duration::seconds(30));
    let rows = store.rows().await.expect("rows");
    assert_eq!(rows[0].status, MessageStatus::Delivered);
}

/// Of many workers picking up one free shard at once, exactly one wins.
pub async fn concurrent_pick_up_has_one_winner<S: Storage + Inspect>(store: S) {
    const WORKERS: u32 = 8;
    let store = Arc::new(store);
    let barrier = Arc::new(tokio::sync::Barrier::new(WORKERS as usize));
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let store = Arc::clone(&store);
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .pick_up(
                    ShardIndex(5),
                    &node(&format!("node-{w}")),
                    WorkerId(w),
                    t0(),
                    secs(30),
                )
                .await
                .expect("pick_up")
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        if let Some(lease) = task.await.expect("task") {
            winners.push(lease);
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].epoch, LeaseEpoch(1));
    let sessions = store.sessions().await.expect("sessions");
    assert_eq!(sessions[0].node_id, Some(winners[0].node_id.clone()));
}

/// The first claim records the shard count; every later one gets the recorded count back,
/// whatever it asks for, also when many claim at once.
pub async fn the_first_shard_count_claimed_is_recorded<S: Storage + Inspect>(store: S) {
    let store = Arc::new(store);
    assert_eq!(
        store.recorded_shard_count().await.expect("read"),
        None,
        "nothing recorded before a claim, and reading records nothing"
    );
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let mut tasks = Vec::new();
    for asked in [8_u32, 16, 32, 64] {
        let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store.claim_shard_count(asked).await.expect("claim")
        }));
    }
    let mut recorded = Vec::new();
    for task in tasks {
        recorded.push(task.await.expect("task"));
    }
    recorded.dedup();
    assert_eq!(
        recorded.len(),
        1,
        "one count recorded for all: {recorded:?}"
    );
    assert!([8, 16, 32, 64].contains(&recorded[0]));
    assert_eq!(
        store.claim_shard_count(128).await.expect("claim"),
        recorded[0],
        "a later claim gets the recorded count"
    );
    assert_eq!(
        store.recorded_shard_count().await.expect("read"),
        Some(recorded[0])
    );
}

/// Membership: a beat makes a node a member until its `alive_until`, with the kinds it
/// registered (the last beat's); a later beat keeps its `started_at`, a beat after it was
/// gone starts anew; `leave` removes it at once.
pub async fn members_beat_expire_and_leave<S: Storage + Inspect>(store: S) {
    use shardbox_core::{KindRole, RegisteredKind};
    let kind = |kind: &str, role| RegisteredKind {
        kind: kind.into(),
        role,
    };
    let (a, b) = (node("node-a"), node("node-b"));
    let first = [kind("account", KindRole::Aggregate)];
    let later = [
        kind("account", KindRole::Aggregate),
        kind("balance", KindRole::Projection),
    ];
    store.beat(&a, t0(), secs(10), &first).await.expect("beat");
    store.beat(&b, t0(), secs(5), &[]).await.expect("beat");
    store
        .beat(&a, secs(2), secs(12), &later)
        .await
        .expect("beat");
    let names = |m: Vec<shardbox_core::storage::Member>| {
        m.into_iter().map(|m| m.node_id.0).collect::<Vec<_>>()
    };
    let now = store.members(secs(3)).await.expect("members");
    assert_eq!(names(now.clone()), ["node-a", "node-b"]);
    assert_eq!(
        (now[0].started_at, now[0].beat_at, now[0].alive_until),
        (t0(), secs(2), secs(12))
    );
    assert_eq!(now[0].kinds, later, "the last beat's kinds");
    assert_eq!(now[1].kinds, []);
    assert_eq!(
        names(store.members(secs(5)).await.expect("members")),
        ["node-a"],
        "b's beat ran out"
    );
    store
        .beat(&b, secs(7), secs(17), &first)
        .await
        .expect("beat");
    let now = store.members(secs(8)).await.expect("members");
    assert_eq!(names(now.clone()), ["node-a", "node-b"]);
    assert_eq!(now[1].started_at, secs(7), "b re-joined");
    store.leave(&a).await.expect("leave");
    assert_eq!(
        names(store.members(secs(8)).await.expect("members")),
        ["node-b"]
    );
}

/// The store's clock, which every node's lease and membership times are read off: a store
/// with one (SQLite, PostgreSQL) reads the time of this machine's clock (the test database
/// runs beside the tests; a minute's leeway) and moves with real time; the memory backend has
/// none.
pub async fn clock_now_is_the_storage_clock<S: Storage + Inspect>(store: S) {
    let Some(first) = store.clock_now().await.expect("clock_now") else {
        return;
    };
    let here = chrono::Utc::now();
    assert!(
        (first - here).abs() < Duration::minutes(1),
        "the store's clock reads {first}, this machine's {here}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let second = store
        .clock_now()
        .await
        .expect("clock_now")
        .expect("a clock that read once reads again");
    let moved = second - first;
    assert!(
        moved >= Duration::milliseconds(40) && moved < Duration::seconds(10),
        "the store's clock moved {moved} in 50 ms"
    );
}

/// A database's place in a storage over several is recorded by the first claim and kept:
/// a later claim of another place gets the recorded one back (the storage over them refuses
/// then); reading records nothing, and a database never claimed has none.
pub async fn a_database_place_is_recorded_once<S: Storage + Inspect>(store: S) {
    use shardbox_core::storage::DatabasePlace;
    assert_eq!(store.recorded_database_place().await.expect("read"), None);
    let first = DatabasePlace { index: 1, of: 3 };
    assert_eq!(
        store.claim_database_place(first).await.expect("claim"),
        first
    );
    let other = DatabasePlace { index: 0, of: 2 };
    assert_eq!(
        store
            .claim_database_place(other)
            .await
            .expect("claim again"),
        first,
        "the first place stays"
    );
    assert_eq!(
        store.recorded_database_place().await.expect("read"),
        Some(first)
    );
}

/// The shard strategy a node records is read back as recorded, the last record wins, and
/// reading records nothing; a custom strategy's record is never rebuilt into a strategy.
pub async fn the_shard_strategy_recorded_is_read_back<S: Storage + Inspect>(store: S) {
    use shardbox_core::{ShardStrategy, StableHashStrategy, StrategyRecord};
    assert_eq!(
        store.recorded_shard_strategy().await.expect("read"),
        None,
        "nothing recorded before a node records, and reading records nothing"
    );
    let stock = StableHashStrategy::new().colocate("order", ["order", "payment"]);
    assert_eq!(
        store
            .record_shard_strategy(&stock.record())
            .await
            .expect("record"),
        None
    );
    let read = store
        .recorded_shard_strategy()
        .await
        .expect("read")
        .expect("recorded");
    assert_eq!(read, stock.record());
    let rebuilt = read.strategy().expect("the stock strategy is rebuilt");
    assert_eq!(
        rebuilt.shard_of("payment", "o-7", 64),
        stock.shard_of("payment", "o-7", 64)
    );
    let custom = StrategyRecord::Custom {
        name: "app::ByRegion".into(),
    };
    assert_eq!(
        store.record_shard_strategy(&custom).await.expect("record"),
        Some(stock.record()),
        "the earlier record is returned"
    );
    let read = store.recorded_shard_strategy().await.expect("read");
    assert_eq!(read.as_ref(), Some(&custom), "the last record wins");
    assert!(read.and_then(|r| r.strategy()).is_none());
}

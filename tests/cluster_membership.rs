//! Nodes joining and leaving while traffic flows, on memory, SQLite (two storages on one
//! file) and PostgreSQL: a node that joins takes shards over from the one already running; a
//! node that shuts down releases its shards at once — the other node serves them long before
//! their leases would have run out — and every command is applied once, in order.

mod common;

use common::Tally;
use shardbox::core::storage::EntityKey;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::NodeId;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TARGETS: usize = 300;
/// Far longer than the test: shards can only change hands by release, never by expiry.
const LEASE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);

/// What node A's monitor heard of its shards: the public hooks of `DeliveryMonitor`.
#[derive(Default, Clone)]
struct ShardEvents(Arc<std::sync::Mutex<Vec<(&'static str, u32)>>>);

impl shardbox::DeliveryMonitor for ShardEvents {
    fn on_picked_up(&self, lease: &shardbox::core::storage::Lease) {
        self.0.lock().unwrap().push(("picked_up", lease.shard.0));
    }
    fn on_released(&self, lease: &shardbox::core::storage::Lease) {
        self.0.lock().unwrap().push(("released", lease.shard.0));
    }
    fn on_handed_over(&self, shard: shardbox::ShardIndex) {
        self.0.lock().unwrap().push(("handed_over", shard.0));
    }
}

impl ShardEvents {
    fn all(&self) -> Vec<(&'static str, u32)> {
        self.0.lock().unwrap().clone()
    }
}

async fn node(storage: Arc<dyn Storage>, id: &str) -> Shardbox {
    node_with(storage, id, ShardEvents::default()).await
}

async fn node_with(storage: Arc<dyn Storage>, id: &str, events: ShardEvents) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .monitor(events)
        .shards(16)
        .workers(2)
        .lease_duration(LEASE)
        .poll_interval(POLL)
        .node_id(NodeId(id.into()))
        .aggregate::<Tally>()
        .build()
        .await
        .expect("build")
}

async fn wait_until(what: &str, timeout: Duration, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok().await {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn join_and_leave(a_storage: Arc<dyn Storage>, b_storage: Arc<dyn Storage>) {
    let a_events = ShardEvents::default();
    let a = node_with(a_storage, "member-a", a_events.clone()).await;
    let b = node(b_storage.clone(), "member-b").await;

    // Traffic: round n sends Record(n) to every target, in one write, every 30 ms, through
    // node A and node B in turn (clients talk to any node; a node hears its own writes at
    // once and others' at its poll, as the memory backend has no cross-node notification,
    // so without writes of its own a joining node finds work only when A falls behind).
    let ids: Vec<String> = (0..TARGETS).map(|t| format!("m-{t}")).collect();
    let rounds = common::Rounds::start(vec![a.clone(), b.clone()], ids, Duration::from_millis(30));

    let node_a = a.start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.metrics().delivered > 0, "node A delivers alone");

    // B joins and takes shards while A keeps serving.
    let node_b = b.start();
    wait_until(
        "the joining node delivers",
        Duration::from_secs(10),
        async || b.metrics().delivered > 0,
    )
    .await;
    let a_before = a.metrics().delivered;
    wait_until("both nodes deliver", Duration::from_secs(10), async || {
        a.metrics().delivered > a_before
    })
    .await;

    // A leaves: its leases are released at shutdown, not left to run out.
    node_a.shutdown().await.expect("shutdown A");
    assert_eq!(
        common::live_leases(b_storage.as_ref(), Some("member-a")).await,
        0,
        "a node that shut down holds no lease"
    );
    // A's monitor heard it: shards picked up, any handed over to B told once its lease was
    // released, and at shutdown every lease it picked up released.
    let events = a_events.all();
    let handed: Vec<u32> = events
        .iter()
        .filter(|(what, _)| *what == "handed_over")
        .map(|(_, shard)| *shard)
        .collect();
    // (Whether a shard changes hands by a hand-over depends on timing: B may find its
    // preferred shards free between A's turns and pick them up itself.)
    eprintln!("A handed over shards {handed:?}");
    for (i, (what, shard)) in events.iter().enumerate() {
        if *what == "handed_over" {
            let last = events[..i].iter().rev().find(|(_, s)| s == shard);
            assert_eq!(
                last,
                Some(&("released", *shard)),
                "shard {shard} released, then said handed over: {events:?}"
            );
        }
    }
    for shard in 0..16 {
        let count = |what| events.iter().filter(|e| **e == (what, shard)).count();
        assert_eq!(
            count("picked_up"),
            count("released"),
            "shard {shard}: every pick-up released by the shutdown: {events:?}"
        );
    }
    let rounds_at_leave = rounds.sent();
    wait_until("traffic goes on", Duration::from_secs(10), async || {
        rounds.sent() >= rounds_at_leave + 5
    })
    .await;
    let sent = rounds.stop().await;
    let left = Instant::now();
    assert!(
        node_b.drain(Duration::from_secs(20)).await.expect("drain"),
        "node B serves every shard after A left"
    );
    assert!(
        left.elapsed() < LEASE / 2,
        "served after release, not after lease expiry"
    );
    node_b.shutdown().await.expect("shutdown B");

    let keys: Vec<EntityKey> = (0..TARGETS)
        .map(|t| EntityKey {
            kind: "tally".into(),
            tenant: String::new(),
            id: format!("m-{t}"),
        })
        .collect();
    let want: Vec<u64> = (0..sent).collect();
    let states = b_storage.load_states(&keys).await.expect("states");
    assert_eq!(states.len(), TARGETS);
    for s in states {
        let tally: Tally = serde_json::from_slice(&s.state).expect("a tally");
        assert_eq!(tally.applied, want, "{}: once each, in order", s.key.id);
    }
    let (ma, mb) = (a.metrics(), b.metrics());
    eprintln!(
        "{sent} rounds; A delivered {} ({} pick-ups), B delivered {} ({} pick-ups)",
        ma.delivered, ma.lease_pick_ups, mb.delivered, mb.lease_pick_ups
    );
    assert_eq!(ma.delivered + mb.delivered, sent * TARGETS as u64);
}

/// The case on `backend`, two storages over one database (see `common::two_storages`).
async fn on(backend: &str) {
    let Some((a, b, _guard)) = common::two_storages(backend, "membership", 4).await else {
        return;
    };
    join_and_leave(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_nodes_join_and_leave() {
    on("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_nodes_join_and_leave() {
    on("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_nodes_join_and_leave() {
    on("postgres").await;
}

/// Membership: running nodes beat, and `members()` lists them with the kinds they registered
/// (so that a tool without the application knows what they serve); a node that stops beating
/// (here a "ghost" that beat once) drops out one lease after its last beat, and a node that
/// shuts down leaves at once. On memory, SQLite and PostgreSQL, with a manual clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_the_nodes_that_beat() {
    async fn check(storage: Arc<dyn Storage>) {
        let clock = Arc::new(shardbox::ManualClock::new(chrono::Utc::now()));
        let build = |id: &str| {
            Shardbox::builder()
                .shared_storage(storage.clone())
                .clock(clock.clone())
                .shards(4)
                .lease_duration(Duration::from_secs(5))
                .poll_interval(Duration::from_millis(50))
                .node_id(NodeId(id.into()))
                .aggregate::<Tally>()
                .build()
        };
        let (a, b) = (
            build("node-a").await.unwrap(),
            build("node-b").await.unwrap(),
        );
        let names = |sb: &Shardbox| {
            let sb = sb.clone();
            async move {
                sb.members()
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|m| m.node_id.0)
                    .collect::<Vec<_>>()
            }
        };
        let until = |want: Vec<&'static str>| {
            let a = a.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    let now = names(&a).await;
                    if now == want {
                        return;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "members {now:?}, expected {want:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let (node_a, node_b) = (a.start(), b.start());
        until(vec!["node-a", "node-b"]).await;
        let tally = shardbox::RegisteredKind {
            kind: "tally".into(),
            role: shardbox::KindRole::Aggregate,
        };
        for member in a.members().await.unwrap() {
            assert_eq!(
                member.kinds,
                std::slice::from_ref(&tally),
                "{}",
                member.node_id
            );
        }
        let now = shardbox::Clock::now(&*clock);
        storage
            .beat(
                &NodeId("node-ghost".into()),
                now,
                now + chrono::Duration::seconds(5),
                &[],
            )
            .await
            .unwrap();
        until(vec!["node-a", "node-b", "node-ghost"]).await;
        // The ghost beats no more: one lease later it is gone; the live nodes beat on.
        clock.advance(chrono::Duration::seconds(6));
        until(vec!["node-a", "node-b"]).await;
        node_b.shutdown().await.unwrap();
        until(vec!["node-a"]).await;
        node_a.shutdown().await.unwrap();
        assert!(names(&a).await.is_empty(), "a node that shut down left");
    }
    check(common::memory()).await;
    let (sqlite, _dir) = common::sqlite().await;
    check(sqlite).await;
    if let Some(url) = common::pg_url("members_are_the_nodes_that_beat") {
        let schema = common::PgSchema::new(&url, "members");
        check(Arc::new(schema.connect(4).await)).await;
    }
}

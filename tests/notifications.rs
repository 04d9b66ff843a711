//! Notifications between nodes on PostgreSQL: a write made by one node wakes the worker of
//! another at once instead of at its next poll; when the listening connection is killed,
//! delivery goes on by polling and the listener reconnects; without a listener, polling alone
//! delivers within the poll interval.
//!
//! The two "nodes" of each test live in this process but share nothing but the database: each
//! has its own storage (pool, notifier and listener connection).

mod common;

use chrono::Utc;
use diesel::{Connection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Node, NodeId};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records how long after its send each command reached the handler (µs).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Latency {
    micros: Vec<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ping;

impl Message for Ping {
    const TYPE: &'static str = "latency.ping";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Handled(i64);

impl Message for Handled {
    const TYPE: &'static str = "latency.handled";
}

impl Aggregate for Latency {
    const KIND: &'static str = "latency";
    type Command = Ping;
    type Event = Handled;

    async fn handle(&self, _: &Ping, cx: &Context<'_>) -> Result<Vec<Handled>, HandlerError> {
        let waited = (Utc::now() - cx.received_at).num_microseconds();
        Ok(vec![Handled(waited.unwrap_or(i64::MAX))])
    }

    fn apply(&mut self, e: &Handled) {
        self.micros.push(e.0);
    }
}

async fn node(storage: Arc<dyn Storage>, id: &str, poll: Duration) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(8)
        .lease_duration(Duration::from_secs(10))
        .poll_interval(poll)
        .node_id(NodeId(id.into()))
        .aggregate::<Latency>()
        .build()
        .await
        .expect("build")
}

/// Sends one ping from `sender` to `target` and waits until `receiver` handled it; returns
/// the send-to-handler latency the handler measured.
async fn ping(sender: &Shardbox, receiver: &Shardbox, target: &str, timeout: Duration) -> Duration {
    let before = receiver
        .aggregate_state::<Latency>(target)
        .await
        .expect("state")
        .unwrap_or_default()
        .micros
        .len();
    sender.send::<Latency>(target, &Ping).await.expect("send");
    let deadline = Instant::now() + timeout;
    loop {
        let state = receiver
            .aggregate_state::<Latency>(target)
            .await
            .expect("state")
            .unwrap_or_default();
        if state.micros.len() > before {
            return Duration::from_micros(state.micros[before].max(0) as u64);
        }
        assert!(
            Instant::now() < deadline,
            "{target}: not handled within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `n` pings, each sent a varying while after the previous one was handled (so that they
/// fall at different points of the receiver's poll cycle), sorted by latency.
async fn pings(
    sender: &Shardbox,
    receiver: &Shardbox,
    n: usize,
    timeout: Duration,
) -> Vec<Duration> {
    let mut all = Vec::new();
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis((i as u64 * 137) % 400)).await;
        all.push(ping(sender, receiver, &format!("p-{i}"), timeout).await);
    }
    all.sort();
    all
}

async fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn listening(node: &Node, connects: u64) -> bool {
    node.listener()
        .is_some_and(|s| s.connected && s.connects >= connects)
}

/// Kills the listener connection of `node` from another connection; returns how many
/// backends were terminated.
fn terminate_listener(url: &str, node: &str) -> usize {
    #[derive(diesel::QueryableByName)]
    struct Terminated {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        terminated: bool,
    }
    let mut conn = diesel::PgConnection::establish(url).expect("connect");
    let rows: Vec<Terminated> = diesel::sql_query(
        "SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity \
         WHERE application_name = $1",
    )
    .bind::<diesel::sql_types::Text, _>(format!("shardbox-listen {node}"))
    .load(&mut conn)
    .expect("pg_terminate_backend");
    rows.iter().filter(|r| r.terminated).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_wakes_another_node_at_once_and_the_listener_survives_a_dropped_connection() {
    let Some(url) = common::pg_url("a_write_wakes_another_node_at_once") else {
        return;
    };
    const POLL: Duration = Duration::from_secs(2);
    let schema = common::PgSchema::new(&url, "notify");
    let sender = node(std::sync::Arc::new(schema.connect(2).await), "sender", POLL).await;
    let receiver_id = format!("r-{}", schema.name);
    let receiver = node(
        std::sync::Arc::new(schema.connect(4).await),
        &receiver_id,
        POLL,
    )
    .await;
    let running = receiver.start();
    wait_until("the receiver listens", Duration::from_secs(10), || {
        listening(&running, 1)
    })
    .await;
    // Past the start's first poll: from here only a notification wakes the receiver early.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let notified = pings(&sender, &receiver, 20, POLL * 2).await;
    let p50 = notified[notified.len() / 2];
    let max = notified[notified.len() - 1];
    eprintln!("send → handler on another node, notified: p50 {p50:?}, max {max:?} (poll {POLL:?})");
    assert!(
        p50 < POLL / 8 && max < POLL / 2,
        "woken by notifications, not the poll: {notified:?}"
    );

    assert_eq!(terminate_listener(&url, &receiver_id), 1, "one listener");
    // Delivery goes on while the listener is down or reconnecting.
    let during = ping(&sender, &receiver, "during", POLL * 2).await;
    wait_until("the listener reconnected", Duration::from_secs(10), || {
        listening(&running, 2)
    })
    .await;
    let stats = running.listener().expect("a listener");
    assert_eq!((stats.connects, stats.disconnects), (2, 1), "{stats:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = pings(&sender, &receiver, 5, POLL * 2).await;
    eprintln!("after the dropped connection: first message {during:?}, then {again:?}");
    assert!(
        again.iter().all(|l| *l < POLL / 2),
        "notifications wake the receiver again after reconnecting: {again:?}"
    );
    running.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_listener_other_nodes_writes_are_found_by_polling() {
    let Some(url) = common::pg_url("without_a_listener_other_nodes_writes_are_found_by_polling")
    else {
        return;
    };
    const POLL: Duration = Duration::from_millis(400);
    let schema = common::PgSchema::new(&url, "polling");
    let sender = node(std::sync::Arc::new(schema.connect(2).await), "sender", POLL).await;
    let options = shardbox::storage::PostgresOptions::default()
        .schema(schema.name.clone())
        .pool_size(4)
        .listen(false);
    let storage = shardbox::storage::PostgresStorage::connect_with(url.clone(), options)
        .await
        .expect("connect");
    let receiver = node(Arc::new(storage), "polling-receiver", POLL).await;
    let running = receiver.start();
    assert!(running.listener().is_none(), "listening was turned off");
    let polled = pings(&sender, &receiver, 8, POLL * 3).await;
    let mean = polled.iter().sum::<Duration>() / polled.len() as u32;
    eprintln!("send → handler on another node, polling every {POLL:?}: mean {mean:?}, {polled:?}");
    assert!(
        polled
            .iter()
            .all(|l| *l < POLL + Duration::from_millis(500)),
        "found within a poll interval: {polled:?}"
    );
    running.shutdown().await.expect("shutdown");
}

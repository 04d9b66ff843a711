//! The lease heartbeat is never starved by a handler: a synchronous handler that blocks its
//! thread for longer than the lease, on a two-thread runtime, keeps the shard — another node
//! cannot take it over, the handler runs once and its stage commits. On memory, SQLite and
//! PostgreSQL.
//!
//! (On a current-thread runtime a blocked thread is a stalled process: the lease runs out and
//! the fence refuses the late commit, see `lease_fencing.rs`.)

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::NodeId;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Block {
    /// Block the thread this many leases (0: a quick message).
    leases: u32,
}

impl Message for Block {
    const TYPE: &'static str = "heartbeat-test.block";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Blocked;

impl Message for Blocked {
    const TYPE: &'static str = "heartbeat-test.blocked";
}

/// How many times the handler ran.
#[derive(Default)]
struct Runs(AtomicUsize);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Blocker {
    handled: u32,
}

impl Aggregate for Blocker {
    const KIND: &'static str = "blocker";
    type Command = Block;
    type Event = Blocked;

    async fn handle(&self, b: &Block, cx: &Context<'_>) -> Result<Vec<Blocked>, HandlerError> {
        if b.leases == 0 {
            return Ok(vec![Blocked]);
        }
        cx.service::<Runs>()?.0.fetch_add(1, Ordering::SeqCst);
        // Blocks its thread (a synchronous client, CPU work), with no await.
        std::thread::sleep(LEASE * b.leases);
        Ok(vec![Blocked])
    }

    fn apply(&mut self, _: &Blocked) {
        self.handled += 1;
    }
}

async fn node(storage: Arc<dyn Storage>, id: &str, runs: &Arc<Runs>) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(1)
        // One message per stage: the blocking one comes in the lease's second stage, where
        // nothing before the handler awaits (the heartbeat task was never polled yet).
        .page_size(1)
        .lease_duration(LEASE)
        .poll_interval(Duration::from_millis(200))
        .node_id(NodeId(id.into()))
        .service(runs.clone())
        .aggregate::<Blocker>()
        .build()
        .await
        .expect("build")
}

/// Node A delivers on a two-thread runtime of its own while its handler blocks; node B tries
/// to take the shard once A's lease would have run out without renewal.
async fn a_blocking_handler_keeps_its_lease(a: Arc<dyn Storage>, b: Arc<dyn Storage>) {
    let runs = Arc::new(Runs::default());
    let node_a = node(a, "blocking-a", &runs).await;
    let node_b = node(b, "blocking-b", &runs).await;
    node_a
        .send::<Blocker>("quick", &Block { leases: 0 })
        .await
        .expect("send");
    node_a
        .send::<Blocker>("b-1", &Block { leases: 2 })
        .await
        .expect("send");
    let shard = node_a.shard_of(Blocker::KIND, "b-1");

    let a_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        // On a runtime worker, as a node's workers run (not on the thread of `block_on`).
        rt.block_on(async move {
            tokio::spawn(async move { (node_a.deliver(shard).await, node_a) })
                .await
                .expect("node A's task")
        })
    });
    // Past the lease's end: without renewals the shard would be free now.
    tokio::time::sleep(LEASE * 3 / 2).await;
    assert_eq!(runs.0.load(Ordering::SeqCst), 1, "A's handler is running");
    let b_try = node_b.deliver(shard).await.expect("node B tries");
    assert!(
        !b_try.picked_up,
        "A's lease was renewed while its handler blocked: {b_try:?}"
    );

    let (report, node_a) = a_thread.join().expect("node A's thread");
    let report = report.expect("deliver");
    assert!(report.picked_up && !report.lease_lost, "{report:?}");
    assert_eq!(report.totals.delivered, 2, "{report:?}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1, "the handler ran once");
    let state = node_a
        .aggregate_state::<Blocker>("b-1")
        .await
        .expect("state")
        .expect("handled");
    assert_eq!(state.handled, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_handler_blocking_past_the_lease_keeps_it() {
    let storage = common::memory();
    a_blocking_handler_keeps_its_lease(storage.clone(), storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_handler_blocking_past_the_lease_keeps_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shardbox.db");
    let open = || shardbox::storage::SqliteStorage::open(&path);
    let a: Arc<dyn Storage> = Arc::new(open().await.expect("open A"));
    let b: Arc<dyn Storage> = Arc::new(open().await.expect("open B"));
    a_blocking_handler_keeps_its_lease(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_handler_blocking_past_the_lease_keeps_it() {
    let Some(url) = common::pg_url("postgres_a_handler_blocking_past_the_lease_keeps_it") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "blocking");
    let a: Arc<dyn Storage> = Arc::new(schema.connect(2).await);
    let b: Arc<dyn Storage> = Arc::new(schema.connect(2).await);
    a_blocking_handler_keeps_its_lease(a, b).await;
}

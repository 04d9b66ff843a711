//! A worker task that dies anyway (a panic outside the handlers: here a user station, which
//! is user code) is restarted, counted in `worker_restarts` and logged at ERROR; its shard is
//! served again at once (its lease released, not left to run out), and delivery goes on. On
//! memory, SQLite and PostgreSQL. A take-over's turn that panics (on a task of its own, not a
//! worker's) is counted the same way.

mod common;

use common::{Tally, TallyCommand};
use shardbox::core::{NodeId, ShardIndex, Storage, WorkerId};
use shardbox::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Panics the first time it sees a page holding a message to tally `boom`.
struct Tripwire(Arc<AtomicBool>);

#[async_trait]
impl Station for Tripwire {
    fn name(&self) -> &str {
        "tripwire"
    }

    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        let boom = conveyor
            .page()
            .iter()
            .any(|m| m.message.target_id == "boom");
        if boom && !self.0.swap(true, Ordering::SeqCst) {
            panic!("tripwire station: boom");
        }
        Ok(())
    }
}

async fn a_dead_worker_is_restarted_and_delivery_goes_on(storage: Arc<dyn Storage>) {
    let tripped = Arc::new(AtomicBool::new(false));
    let station = Tripwire(tripped.clone());
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(2)
        // One worker: without a restart nothing would be delivered after the panic. The
        // default 30 s lease: had the dead turn's lease not been released, its shard would
        // wait that long, past the deadline below.
        .workers(1)
        .poll_interval(Duration::from_millis(100))
        .aggregate::<Tally>()
        .stations(move |p| {
            p.push(station);
        })
        .build()
        .await
        .expect("build");
    let node = sb.start();
    let targets: Vec<String> = std::iter::once("boom".to_owned())
        .chain((0..19).map(|n| format!("t-{n}")))
        .collect();
    for t in &targets {
        sb.send::<Tally>(t, &TallyCommand::Add(1))
            .await
            .expect("send");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = 0;
    while Instant::now() < deadline {
        done = 0;
        for t in &targets {
            if sb.aggregate_state::<Tally>(t).await.unwrap().map(|s| s.sum) == Some(1) {
                done += 1;
            }
        }
        if done == targets.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tripped.load(Ordering::SeqCst), "the station panicked");
    assert_eq!(
        done,
        targets.len(),
        "every message delivered after the worker died"
    );
    assert_eq!(sb.metrics().worker_restarts, 1);
    // Each applied once.
    for t in &targets {
        let sum = sb.aggregate_state::<Tally>(t).await.unwrap().map(|s| s.sum);
        assert_eq!(sum, Some(1), "{t}");
    }
    tokio::time::timeout(Duration::from_secs(10), node.shutdown())
        .await
        .expect("shutdown awaits the restarted worker")
        .expect("shutdown");
}

/// Panics the first time a take-over's turn (worker id `workers`, past the node's workers)
/// serves a page: a panic no worker's supervisor sees.
struct TakeOverTripwire {
    take_over_worker: WorkerId,
    tripped: Arc<AtomicBool>,
}

#[async_trait]
impl Station for TakeOverTripwire {
    fn name(&self) -> &str {
        "take-over-tripwire"
    }

    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        if conveyor.lease().worker_id == self.take_over_worker
            && !self.tripped.swap(true, Ordering::SeqCst)
        {
            panic!("take-over tripwire station: boom");
        }
        Ok(())
    }
}

/// A shard whose holder died (a lease that runs out without a release) is taken over on a
/// task of its own; its turn panics. The shard is retried and delivered, and the panic is
/// counted in `worker_restarts` (it was retried but never counted).
async fn a_panicking_take_over_is_counted_and_its_shard_retried(storage: Arc<dyn Storage>) {
    let tripped = Arc::new(AtomicBool::new(false));
    let station = TakeOverTripwire {
        take_over_worker: WorkerId(1),
        tripped: tripped.clone(),
    };
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(1)
        .workers(1)
        .poll_interval(Duration::from_millis(100))
        .aggregate::<Tally>()
        .stations(move |p| {
            p.push(station);
        })
        .build()
        .await
        .expect("build");
    // The node runs first, so that it sees the shard held (and schedules its take-over)
    // rather than free: a node that dies holding the only shard, its lease running out in
    // 1.5 s, unreleased. (Started after the pick-up, a slow start on a loaded machine could
    // first read the lock table after the lease ran out, and serve the free shard with a
    // worker's own turn instead of a take-over.)
    let node = sb.start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = chrono::Utc::now();
    storage
        .pick_up(
            ShardIndex(0),
            &NodeId("dead-node".into()),
            WorkerId(0),
            now,
            now + chrono::Duration::milliseconds(1500),
        )
        .await
        .expect("pick up")
        .expect("the shard is free");
    // Two lease-watch rounds, so that the node has marked the shard held elsewhere before the
    // send: its wake-up is then left to the take-over (a wake-up that found the lease held
    // would retry the shard with the worker's own turn after the lease runs out).
    tokio::time::sleep(Duration::from_millis(300)).await;
    sb.send::<Tally>("t-1", &TallyCommand::Add(1))
        .await
        .expect("send");
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if sb
            .aggregate_state::<Tally>("t-1")
            .await
            .unwrap()
            .map(|s| s.sum)
            == Some(1)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        tripped.load(Ordering::SeqCst),
        "the take-over's turn served the shard and panicked"
    );
    assert_eq!(
        sb.aggregate_state::<Tally>("t-1")
            .await
            .unwrap()
            .map(|s| s.sum),
        Some(1),
        "delivered once after the panic"
    );
    let m = sb.metrics();
    assert_eq!(m.worker_restarts, 1, "{m:?}");
    assert!(m.lease_takeovers >= 1, "{m:?}");
    tokio::time::timeout(Duration::from_secs(10), node.shutdown())
        .await
        .expect("shutdown")
        .expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_take_over_on_memory() {
    a_panicking_take_over_is_counted_and_its_shard_retried(common::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_take_over_on_sqlite() {
    let (storage, _dir) = common::sqlite().await;
    a_panicking_take_over_is_counted_and_its_shard_retried(storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_take_over_on_postgres() {
    let Some(url) = common::pg_url("worker_restart::a_panicking_take_over_on_postgres") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "worker_restart_take_over");
    a_panicking_take_over_is_counted_and_its_shard_retried(Arc::new(schema.connect(4).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    a_dead_worker_is_restarted_and_delivery_goes_on(common::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let (storage, _dir) = common::sqlite().await;
    a_dead_worker_is_restarted_and_delivery_goes_on(storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let Some(url) = common::pg_url("worker_restart::postgres") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "worker_restart");
    a_dead_worker_is_restarted_and_delivery_goes_on(Arc::new(schema.connect(4).await)).await;
}

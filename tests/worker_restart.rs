//! A worker task that dies anyway (a panic outside the handlers: here a user station, which
//! is user code) is restarted, counted in `worker_restarts` and logged at ERROR; its shard is
//! served again at once (its lease released, not left to run out), and delivery goes on. On
//! memory, SQLite and PostgreSQL.

mod common;

use common::{Tally, TallyCommand};
use shardbox::core::Storage;
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

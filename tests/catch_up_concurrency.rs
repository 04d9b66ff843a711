//! The catch-up's direct replay runs the targets of a page concurrently, as live delivery
//! does, each target's events still in order: 8 targets × 2 events of a projection whose
//! apply awaits 100 ms replay in well under the 1.6 s one target at a time takes. On memory
//! and SQLite.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::CatchUp;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Noted(u64);

impl Message for Noted {
    const TYPE: &'static str = "catch-up-concurrency.noted";
}

/// Every event number, in apply order; each apply awaits 100 ms (a slow read model).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Slow {
    seen: Vec<u64>,
}

impl Projection for Slow {
    const KIND: &'static str = "slow";
    type Event = Noted;

    async fn apply(&mut self, e: &Noted, _: &Context<'_>) -> Result<(), HandlerError> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.seen.push(e.0);
        Ok(())
    }
}

async fn replay_runs_targets_concurrently(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(1)
        .poll_interval(Duration::from_millis(50))
        .projection::<Slow>()
        .build()
        .await
        .expect("build");
    let events: Vec<(EventSource, Noted)> = (0..2)
        .flat_map(|n| (0..8).map(move |t| (EventSource::external(format!("s-{t}")), Noted(n))))
        .collect();
    sb.post_many(&events).await.expect("post");
    let node = sb.start();
    assert!(
        node.drain(Duration::from_secs(30)).await.unwrap(),
        "live drained"
    );
    let started = Instant::now();
    let job = sb.catch_up::<Slow>(CatchUp::all()).await.expect("catch-up");
    job.wait(Duration::from_secs(60)).await.expect("completed");
    let took = started.elapsed();
    node.shutdown().await.unwrap();
    for t in 0..8 {
        let s: Option<Slow> = sb.state_of("slow", "", &format!("s-{t}")).await.unwrap();
        assert_eq!(s.map(|s| s.seen), Some(vec![0, 1]), "target s-{t} in order");
    }
    // One target at a time: 16 × 100 ms. Concurrently: 2 × 100 ms and the ticks.
    assert!(took < Duration::from_millis(1_000), "replay took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_replay_runs_targets_concurrently() {
    replay_runs_targets_concurrently(common::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_replay_runs_targets_concurrently() {
    let (storage, _dir) = common::sqlite().await;
    replay_runs_targets_concurrently(storage).await;
}

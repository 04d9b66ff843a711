//! `lease_linger`: a trickle of writes is served under kept leases (far fewer pick-ups than
//! messages), every command once and in order; an idle shard's kept lease is released after
//! the linger, and shutdown releases the rest at once. On memory and SQLite.

mod common;

use common::{Tally, TallyCommand};
use shardbox::core::Storage;
use shardbox::prelude::*;
use std::sync::Arc;
use std::time::Duration;

const TARGETS: u64 = 4;
const MESSAGES: u64 = 120;

async fn trickle(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(2)
        .workers(2)
        .poll_interval(Duration::from_secs(5))
        .lease_linger(Duration::from_millis(200))
        .aggregate::<Tally>()
        .build()
        .await
        .expect("build");
    let node = sb.start();
    for n in 0..MESSAGES {
        let target = format!("t-{}", n % TARGETS);
        sb.send::<Tally>(&target, &TallyCommand::Record(n))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(node.drain(Duration::from_secs(20)).await.expect("drain"));
    let metrics = sb.metrics();
    assert_eq!(metrics.delivered, MESSAGES);
    assert!(
        metrics.lease_pick_ups < MESSAGES / 4,
        "kept leases serve the trickle: {} pick-ups for {MESSAGES} messages",
        metrics.lease_pick_ups
    );
    for t in 0..TARGETS {
        let tally = sb
            .aggregate_state::<Tally>(&format!("t-{t}"))
            .await
            .expect("state")
            .expect("a tally");
        let want: Vec<u64> = (0..MESSAGES).filter(|n| n % TARGETS == t).collect();
        assert_eq!(tally.applied, want, "t-{t}: once each, in order");
    }
    // Idle shards' kept leases are released once the linger ends (by the timer).
    let mut released = false;
    for _ in 0..100 {
        if common::live_leases(storage.as_ref(), None).await == 0 {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(released, "kept leases released after the linger");

    // A kept lease is released at shutdown, not left to run out.
    sb.send::<Tally>("t-0", &TallyCommand::Record(MESSAGES))
        .await
        .expect("send");
    assert!(node.drain(Duration::from_secs(20)).await.expect("drain"));
    node.shutdown().await.expect("shutdown");
    assert_eq!(
        common::live_leases(storage.as_ref(), None).await,
        0,
        "released at shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_trickle_is_served_under_kept_leases() {
    trickle(common::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_trickle_is_served_under_kept_leases() {
    let (storage, _dir) = common::sqlite().await;
    trickle(storage).await;
}

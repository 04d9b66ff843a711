//! Lock-table epochs across re-shardings.

use super::super::model::{Audit, Ledger};
use super::{apply, t0, wrap};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::ManualClock;
use std::sync::Arc;
use std::time::Duration;

/// Memory seeds 626, 1814 and 3609 (issue 37): a lock-table epoch was handed out twice for
/// one shard, and commits under it looked fenced by a superseded epoch. A re-sharding to fewer
/// shards dropped the lock-table rows of the shards it removed, and with them the highest
/// epochs those had handed out; a later re-sharding that made the shards again started their
/// rows above the epochs of the rows left, below the dropped ones, so their pick-ups handed
/// the same epochs out a second time. Every row of a new layout now starts above every epoch
/// handed out. Here shard 3 runs ahead of the others, the Inbox is re-sharded to 2 shards and
/// back to 4, and shard 3 is served again.
pub(super) async fn epochs_of_a_shard_dropped_and_made_again(inner: Arc<dyn Storage>) {
    use shardbox::core::storage::WorkRegistry;
    use shardbox::core::WorkerId;
    use shardbox::{ReshardOptions, ShardIndex};
    let faults = wrap(inner);
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = Shardbox::builder()
        .shared_storage(Arc::new(faults.clone()))
        .clock(clock.clone())
        .node_id(shardbox::NodeId("node-a".into()))
        .shards(4)
        .lease_duration(Duration::from_secs(4))
        .poll_interval(Duration::from_millis(250))
        .aggregate::<Ledger>()
        .projection::<Audit>()
        .build()
        .await
        .expect("build a node");
    let holder = shardbox::NodeId("node-a".into());
    let turn = |shard: u32| {
        let (faults, holder) = (faults.clone(), holder.clone());
        let now = shardbox::Clock::now(&*clock);
        async move {
            let lease = faults
                .pick_up(
                    ShardIndex(shard),
                    &holder,
                    WorkerId(0),
                    now,
                    now + chrono::Duration::seconds(4),
                )
                .await
                .expect("pick up")
                .expect("the shard is free");
            faults.release(&lease).await.expect("release");
            lease.epoch.0
        }
    };
    // Every shard gets its lock-table row, then shard 3 runs ahead of the others.
    for shard in [0, 1, 2, 3, 3, 3, 3, 3, 3] {
        turn(shard).await;
    }
    let handed_out = faults
        .picked()
        .keys()
        .filter(|(shard, _)| *shard == 3)
        .map(|(_, epoch)| *epoch)
        .max()
        .expect("shard 3 was picked up");
    let options = ReshardOptions {
        timeout: Duration::from_secs(20),
    };
    sb.reshard_with(2, &options).await.expect("re-shard to 2");
    sb.reshard_with(4, &options)
        .await
        .expect("re-shard back to 4");
    let first = turn(3).await;
    assert!(
        first > handed_out,
        "shard 3, made again, hands out epoch {first}, not above the {handed_out} it handed out before"
    );
    // Served through the delivery path too: no commit under an epoch picked up twice.
    for n in 0..16 {
        sb.send::<Ledger>(&format!("l{n}"), &apply(n, "a"))
            .await
            .expect("send");
    }
    sb.deliver_all().await.expect("deliver");
    let commits = faults.commits();
    assert!(
        commits.iter().any(|c| c.shard == 3),
        "shard 3 committed a stage"
    );
    assert_eq!(faults.duplicate_pick_ups(), Vec::<String>::new());
    let superseded: Vec<_> = commits
        .iter()
        .filter(|c| c.superseded_by.is_some())
        .collect();
    assert!(
        superseded.is_empty(),
        "commits under a superseded epoch: {superseded:?}"
    );
}

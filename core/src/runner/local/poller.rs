//! The poller: every poll interval (or at once after missed writes), the free shards probed
//! in this node's cycle order, and those with due rows queued.

use crate::model::ids::ShardIndex;
use crate::runner::delivery::Delivery;
use crate::runner::env::DeliveryEnv;
use crate::runner::wake_queue::WakeQueue;
use std::sync::Arc;
use tokio::sync::watch;

/// Every poll interval (or at once after missed writes): probes the free shards, in this
/// node's cycle order, and queues those with due rows.
pub(super) async fn poll(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    mut stop: watch::Receiver<bool>,
    mut free: watch::Receiver<Vec<ShardIndex>>,
) {
    let env = delivery.env().clone();
    loop {
        let started = tokio::time::Instant::now();
        let shards = free.borrow_and_update().clone();
        for shard in shards {
            if !probe(&env, &queue, shard).await {
                break;
            }
        }
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = queue.poll_now.notified() => {}
            _ = tokio::time::sleep_until(started + env.config.poll_interval) => {}
        }
    }
}

/// Queues `shard` if it has a due row. Returns false if the storage failed (the round is cut
/// short; the next one tries again).
async fn probe(env: &DeliveryEnv, queue: &WakeQueue, shard: ShardIndex) -> bool {
    match env.probe_shard(shard).await {
        Ok(probe) if probe.due => {
            queue.wake(shard);
            true
        }
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(%shard, error = %e, "poll failed; trying again next interval");
            false
        }
    }
}

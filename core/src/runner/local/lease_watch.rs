//! The lease watch: every poll interval, the members and the lock table read, the layout
//! followed (a re-sharding pauses the node), other nodes' shards marked, orphaned shards taken
//! over, and the free shards handed to the poller.

use crate::cluster::membership::OwnersView;
use crate::entity::guard::CatchUnwind;
use crate::model::ids::{ShardIndex, WorkerId};
use crate::runner::cycle::{ending_within, plan_round, ShardCycle};
use crate::runner::delivery::Delivery;
use crate::runner::tasks::stopped;
use crate::runner::turn::{retry_failed_release, serve};
use crate::runner::wake_queue::WakeQueue;
use crate::runner::worker::panic_message;
use crate::sync::lock;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Takes over `shard`, whose holder's lease ran out, if it has due rows: served at once on
/// the calling task rather than queued behind the workers' turns — its messages have already
/// waited a lease duration. If a worker of this node has it queued, it moves to the front.
///
/// A turn that panics (outside the handlers, e.g. in a user station) has already scheduled
/// its shard's retry (see `turn`); the panic ends here, counted in `worker_restarts` and
/// logged at ERROR as a worker's death is — a take-over's turn is a worker's turn on a task
/// of its own, with no supervisor to count it.
async fn take_over(delivery: &Arc<Delivery>, queue: &Arc<WakeQueue>, shard: ShardIndex) {
    let env = delivery.env();
    if env.is_stopping() || queue.is_paused() {
        return;
    }
    match env.probe_shard(shard).await {
        Ok(probe) if probe.due => {
            if queue.claim(shard) {
                tracing::debug!(%shard, "lease ran out without a release; taking the shard over");
                let worker = WorkerId(u32::try_from(env.config.workers).unwrap_or(u32::MAX));
                let turn = CatchUnwind(Box::pin(serve(delivery, queue, shard, worker))).await;
                if let Err(panic) = turn {
                    env.metrics.record_worker_restart();
                    tracing::error!(%shard, %worker, reason = %panic_message(panic), "a take-over's turn panicked; the shard is retried (a panic outside the handlers, e.g. in a user station)");
                }
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(%shard, error = %e, "could not probe an orphaned shard; the next poll tries again")
        }
    }
}

/// Every poll interval: reads the members (the shard assignment, handed to the wake queue
/// and the turns) and the lock table, marks the shards other nodes hold, takes over
/// orphaned shards, sets a timer for other nodes' leases that end soon, and hands the poller
/// the free shards to probe. Kept apart from the probing, which can be slow, so that a dead
/// node's shards are taken over one lease after its last renewal whatever else is going on.
pub(super) async fn watch_leases(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    mut stop: watch::Receiver<bool>,
    free: watch::Sender<Vec<ShardIndex>>,
) {
    let env = delivery.env().clone();
    let me = &env.config.node_id;
    let interval = env.config.poll_interval;
    let mut cycle = ShardCycle::for_node(me, env.registry.shard_count());
    let mut view = OwnersView::new();
    let mut free_before = Vec::new();
    loop {
        let started = tokio::time::Instant::now();
        let now = env.clock.now();
        // A re-sharding: paused while it runs, then the new layout (see `reshard`).
        if follow_layout(&delivery, &queue, &mut cycle, now).await {
            free.send_replace(Vec::new());
            lock(&queue.held).refresh(&[]);
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                _ = tokio::time::sleep_until(started + interval) => {}
            }
            continue;
        }
        let owners = view.read(&env.seat, env.registry.shard_count(), now).await;
        queue.set_owners(owners.clone());
        match env.storage.sessions().await {
            Ok(sessions) => {
                let plan = plan_round(&cycle, &sessions, &owners, &free_before, me, now);
                free_before = plan.free;
                lock(&queue.held).refresh(&plan.held_elsewhere);
                // A lease of another node that ends before the next look or two is looked at
                // the moment it ends: if its holder died, the shard waits one lease duration.
                for (left, shard) in ending_within(&plan.held_elsewhere, now, 2 * interval) {
                    let at = started + left + Duration::from_millis(1);
                    spawn_take_over(&delivery, &queue, shard, Some(at));
                }
                let mut probe = Vec::with_capacity(plan.probe.len());
                for (shard, orphaned) in plan.probe {
                    if orphaned {
                        spawn_take_over(&delivery, &queue, shard, None);
                    } else {
                        probe.push(shard);
                    }
                }
                free.send_replace(probe);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the lock table; probing every shard");
                free.send_replace(cycle.iter().collect());
            }
        }
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = tokio::time::sleep_until(started + interval) => {}
        }
    }
}

/// Reads the Inbox's layout (one poll round's look) and follows it: learns a new shard count
/// (the registry's, the queue's room, the poll cycle), and pauses while an operator
/// re-shards — every kept lease released, each turn handing its shard back after its stage,
/// nothing picked up — so that the operator can take every shard's lease. Returns whether
/// the node is paused. A failed read changes nothing (logged).
async fn follow_layout(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    cycle: &mut ShardCycle,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    let env = delivery.env();
    let layout = match env.storage.layout().await {
        Ok(layout) => layout,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the shard layout; keeping the last one");
            return queue.is_paused();
        }
    };
    if let Some(count) = layout.shard_count {
        env.registry.set_shard_count(count);
    }
    let count = env.registry.shard_count();
    // Every round, not only when the cycle changes: a pick-up or a send of this node may
    // have learned the count first (the queue's room is checked under its locks, cheaply).
    queue.grow_to(count);
    if count != cycle.shard_count() {
        tracing::info!(
            from = cycle.shard_count(),
            to = count,
            "the Inbox was re-sharded; serving the new layout"
        );
        *cycle = ShardCycle::for_node(&env.config.node_id, count);
    }
    let paused = layout.resharding.as_ref().is_some_and(|a| a.until > now);
    if paused != queue.is_paused() {
        queue.set_paused(paused);
        if paused {
            let by = layout
                .resharding
                .as_ref()
                .map(|a| a.by.0.as_str())
                .unwrap_or("");
            tracing::info!(by, "a re-sharding was announced; handing every shard back");
            for lease in queue.unpark_all() {
                if let Err(e) = delivery.release(&lease).await {
                    let retry_in = retry_failed_release(delivery, queue, lease.shard);
                    tracing::warn!(shard = %lease.shard, error = %e, ?retry_in, "could not release a kept lease; retried");
                }
            }
        } else {
            tracing::info!(shards = count, "the re-sharding is over; serving again");
            queue.poll_now.notify_one();
        }
    }
    paused
}

/// Runs [`take_over`] of `shard` on a task of its own, at `at` or at once.
fn spawn_take_over(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
    at: Option<tokio::time::Instant>,
) {
    let (delivery, task_queue) = (delivery.clone(), queue.clone());
    let mut stop = queue.tasks.stop_signal();
    queue.tasks.spawn(async move {
        if let Some(at) = at {
            tokio::select! {
                biased;
                _ = stopped(&mut stop) => return,
                _ = tokio::time::sleep_until(at) => {}
            }
        }
        take_over(&delivery, &task_queue, shard).await;
    });
}

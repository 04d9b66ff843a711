//! One worker's turn on a shard, and the lease it keeps between turns.
//!
//! ```text
//!  serve(shard): lease kept by the last turn? ──► Delivery::serve_turn (≥ 1 stage; a shard
//!                another live member prefers is handed back after its first stage)
//!     drained with lease_linger ──► park the lease; spawn_release frees it after the linger
//!                                   unless the next turn took it
//!     otherwise the turn released it itself; the wake queue hears how the turn ended
//! ```
//!
//! A parked lease is owned by exactly one of: the wake queue's slot, the turn that unparked
//! it, or the release task that unparked it — never two, so a lease is released once.

use crate::entity::guard::CatchUnwind;
use crate::model::backoff::ExponentialBackoff;
use crate::model::ids::{ShardIndex, WorkerId};
use crate::runner::cycle::should_yield;
use crate::runner::delivery::Delivery;
use crate::runner::tasks::stopped;
use crate::runner::wake_queue::{TurnEnd, WakeQueue};
use std::sync::Arc;
use std::time::Duration;

/// One turn on `shard` (already started in the wake-up states): at least one stage, then on
/// while nobody needs the worker more (see [`should_yield`]); then tells the queue how it
/// ended. The turn starts with the lease kept by the last one, if any, and keeps its own
/// for `lease_linger` once the shard is drained (a timer releases it if no turn takes it).
pub(super) async fn serve(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
    worker: WorkerId,
) {
    let config = &delivery.env().config;
    if queue.is_paused() || shard.0 >= delivery.env().registry.shard_count() {
        // A re-sharding is in progress, or the shard left the layout: not ours to pick up.
        // A lease this node still has on it goes now — kept for the linger, or kept for a
        // retried release after a failed one (see `unreleased`): the operator waits for it,
        // and once the pause ends no turn may come to settle it (the shard may be another
        // member's), so it would stay leased here until it ran out.
        let released = match queue.unpark(shard, None) {
            Some(lease) => delivery.release(&lease).await,
            None => Ok(()),
        };
        let settled = match released {
            Ok(()) => delivery.settle_unreleased(shard).await,
            Err(e) => Err(e),
        };
        if let Err(e) = settled {
            // Kept for a retried release: tried again as after a failed turn.
            let after = retry_delay(queue.turn_failed(shard), config.poll_interval);
            tracing::warn!(%shard, error = %e, retry_in = ?after, "could not release a lease of a paused or moved shard; retried");
            spawn_retry(delivery, queue, shard, after);
        }
        queue.finish(shard, TurnEnd::HandedOver);
        return;
    }
    let turn = config.poll_interval;
    let linger_for = config.lease_linger;
    let started = tokio::time::Instant::now();
    // Another live member's shard is handed back after one stage (see `assign`).
    let keep_on =
        || !queue.is_others(shard) && !should_yield(started.elapsed(), queue.waiting(), turn);
    let held = queue.unpark(shard, None);
    // Asked again when the shard is drained: one the assignment gave to another member
    // meanwhile is released then, not kept while its new owner waits.
    let linger = || !linger_for.is_zero() && !queue.is_others(shard);
    let served = CatchUnwind(Box::pin(
        delivery.serve_turn(shard, worker, &keep_on, held, &linger),
    ))
    .await;
    let served = match served {
        Ok(served) => served,
        Err(panic) => {
            // A panic outside the handlers (a user station): the shard is retried like after
            // a failed turn (its lease was kept for a release, see `unreleased`), then the
            // panic goes on, so that the worker's supervisor counts and restarts the worker.
            let after = retry_delay(queue.turn_failed(shard), turn);
            spawn_retry(delivery, queue, shard, after);
            queue.finish(shard, TurnEnd::Done);
            std::panic::resume_unwind(panic);
        }
    };
    let end = match served {
        Ok((report, kept)) => {
            queue.turn_succeeded(shard);
            if let Some(lease) = kept {
                let generation = queue.park(lease);
                spawn_release(delivery, queue, shard, generation, linger_for);
            }
            if report.lease_lost {
                tracing::info!(%shard, "lease lost to another worker; leaving the shard to it");
            }
            tracing::trace!(%shard, stages = report.stages, picked_up = report.picked_up, yielded = report.yielded, "shard served");
            if !report.picked_up || report.lease_lost {
                TurnEnd::HeldElsewhere
            } else if report.yielded && queue.is_others(shard) {
                tracing::debug!(%shard, "handed the shard over to its preferred owner");
                delivery.env().monitor.on_handed_over(shard);
                TurnEnd::HandedOver
            } else if report.yielded {
                TurnEnd::Yielded
            } else {
                TurnEnd::Done
            }
        }
        Err(e) => {
            let failures = queue.turn_failed(shard);
            let after = retry_delay(failures, turn);
            tracing::warn!(%shard, error = %e, retry_in = ?after, "delivery failed; the shard is retried");
            spawn_retry(delivery, queue, shard, after);
            TurnEnd::Done
        }
    };
    queue.finish(shard, end);
}

/// After a release of `shard`'s lease failed outside a turn (the lease watch handing a kept
/// lease back when a re-sharding is announced): the lease is kept for a retried release (see
/// `unreleased`), retried as after a failed turn. Without it nothing was due to settle it:
/// once the pause ended, no poll probed the shard (leased to this node), and its rows waited
/// until the lease ran out (issue 37, seed 1406). Returns when it is tried again.
pub(super) fn retry_failed_release(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
) -> Duration {
    let after = retry_delay(
        queue.turn_failed(shard),
        delivery.env().config.poll_interval,
    );
    spawn_retry(delivery, queue, shard, after);
    after
}

/// How long after the `failures`-th failed turn in a row a shard is tried again: 25 ms,
/// doubling (16 times at most), at most a poll interval — soon after a database hiccup,
/// without spinning on a database that stays down.
fn retry_delay(failures: u32, poll_interval: Duration) -> Duration {
    ExponentialBackoff::new(Duration::from_millis(25), poll_interval)
        .max_doublings(16)
        .delay(failures)
}

/// After a failed turn or a failed release of a kept lease: once `after` has passed,
/// releases the shard's lease if its release failed (see `unreleased`), and wakes the shard,
/// whose turn reads what is due, so that it is served again soon rather than a whole lease
/// later (no poll probes a shard leased to this node).
fn spawn_retry(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
    after: Duration,
) {
    let (delivery, task_queue) = (delivery.clone(), queue.clone());
    let mut stop = queue.tasks.stop_signal();
    queue.tasks.spawn(async move {
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            _ = tokio::time::sleep(after) => {}
        }
        if let Err(e) = delivery.settle_unreleased(shard).await {
            tracing::debug!(%shard, error = %e, "release still failing; trying again with the next turn");
        }
        task_queue.wake(shard);
    });
}

/// Releases `shard`'s kept lease of `generation` after `linger`, unless a turn took it
/// meanwhile or the shard is queued for one (that turn takes it). Like a turn, the release
/// holds the shard in the wake-up states, and looks once more for rows written meanwhile;
/// if the release (or that look) fails, the shard is retried as after a failed turn.
/// A kept lease is not renewed: if its shard waits in the queue behind busy workers, the
/// timer looks again every `linger` and releases the lease itself once half of it is gone,
/// so that it never runs out under a live node (which other nodes would take for a crash).
fn spawn_release(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
    generation: u64,
    linger: Duration,
) {
    let (delivery, task_queue) = (delivery.clone(), queue.clone());
    let mut stop = queue.tasks.stop_signal();
    queue.tasks.spawn(async move {
        let queue = task_queue;
        loop {
            tokio::select! {
                biased;
                // Shutdown releases every kept lease itself.
                _ = stopped(&mut stop) => return,
                _ = tokio::time::sleep(linger) => {}
            }
            let Some(until) = queue.parked_until(shard, generation) else {
                return;
            };
            if queue.start_idle(shard) {
                break;
            }
            // Queued for a turn (or being started): that turn takes the lease, unless the
            // lease nears its end first, or the shard is now another member's: its new owner
            // waits for the lease, and the queued turn will not serve it (see
            // `WakeQueue::next`). Left to that turn, the lease was kept up to half a lease
            // duration past the change (issue 37: a joining node waited for it).
            let half = delivery.env().config.lease_span() / 2;
            if queue.is_others(shard) || until - delivery.env().clock.now() < half {
                if let Some(lease) = queue.unpark(shard, Some(generation)) {
                    if let Err(e) = delivery.release(&lease).await {
                        tracing::warn!(%shard, error = %e, "could not release a kept lease; it expires, or the next turn releases it");
                    }
                }
                return;
            }
        }
        let mut again = false;
        let mut retry_in = None;
        if let Some(lease) = queue.unpark(shard, Some(generation)) {
            let released = match delivery.release(&lease).await {
                Ok(()) => delivery.has_due_rows(shard).await,
                Err(e) => Err(e),
            };
            match released {
                Ok(due) => again = due,
                Err(e) => {
                    // The lease is kept for a retried release (see `unreleased`), or the look
                    // for rows written meanwhile failed. Retried as a failed turn is: no poll
                    // probes a shard leased to this node, and a write whose wake-up was
                    // filtered (a held-elsewhere mark, an owner change) would wait until the
                    // lease ran out.
                    let poll_interval = delivery.env().config.poll_interval;
                    let after = retry_delay(queue.turn_failed(shard), poll_interval);
                    tracing::warn!(%shard, error = %e, retry_in = ?after, "could not release a kept lease (or look for rows written meanwhile); retried");
                    retry_in = Some(after);
                }
            }
        }
        queue.finish(shard, TurnEnd::Done);
        if let Some(after) = retry_in {
            spawn_retry(&delivery, &queue, shard, after);
        } else if again {
            queue.wake(shard);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::assign::assign;
    use crate::runner::wake_queue::tests::{node, queue_of_me, shard_of, SHARDS};

    /// Issue 37 (`cluster_balance`): a lease kept for the linger whose shard was queued for a
    /// turn was left to that turn — up to half a lease duration when the workers were busy —
    /// even once the assignment gave the shard to a member that had just joined, which
    /// waited for it. It is released at the end of the linger; the queued turn is dropped.
    #[tokio::test(start_paused = true)]
    async fn a_kept_lease_of_a_shard_now_another_members_is_released_after_the_linger() {
        let (env, queue, _stop) = queue_of_me();
        let delivery = Arc::new(Delivery::new(env.clone(), Vec::new()));
        let joined = Arc::new(assign(SHARDS, &[node("me"), node("other")]));
        let theirs = shard_of(&joined, "other");
        queue.set_owners(Arc::new(assign(SHARDS, &[node("me")])), &[]);
        let now = env.clock.now();
        let lease = env
            .storage
            .pick_up(theirs, &node("me"), WorkerId(0), now, env.lease_until(now))
            .await
            .expect("the memory backend answers")
            .expect("a free shard");
        let linger = Duration::from_millis(150);
        let generation = queue.park(lease);
        // Written to again while it was this node's: queued behind busy workers.
        queue.wake(theirs);
        spawn_release(&delivery, &queue, theirs, generation, linger);
        // The other member joins; its first poll round finds the shard leased here.
        queue.set_owners(joined, &[]);
        tokio::time::sleep(linger * 2).await;
        let session = env
            .storage
            .sessions()
            .await
            .expect("sessions")
            .into_iter()
            .find(|s| s.shard == theirs)
            .expect("a session of the shard");
        assert_eq!(
            session.lease_until, None,
            "released one linger after the change, not half a lease (the clock stood still)"
        );
        assert_eq!(queue.unpark(theirs, None), None, "no longer kept");
    }

    #[test]
    fn retries_back_off_from_25_ms_to_the_poll_interval() {
        let poll = Duration::from_secs(1);
        let delays: Vec<u128> = (1..=8).map(|n| retry_delay(n, poll).as_millis()).collect();
        assert_eq!(delays, vec![25, 50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(retry_delay(u32::MAX, poll), poll);
    }
}

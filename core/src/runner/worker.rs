//! A node's worker tasks, each under a supervisor that restarts it if it dies.
//!
//! ```text
//!  supervise(worker) ──► spawn work(worker) ──► queue.next() ─► serve(shard) ─► … until stop
//!        ▲                     │ panicked (a user station) or ended before the stop
//!        └── back-off ◄── ERROR log, worker_restarts + 1
//! ```
//!
//! Handler panics never get here (the stations catch them as failed attempts); a panic in a
//! stage outside the handlers does. (A take-over's turn runs on a task of its own, not a
//! worker's: its panic is caught, counted and logged alike by `local::lease_watch::take_over`.) The turn that panicked has already put its shard back
//! (see `turn`) and kept its lease for a release (see `unreleased`), so the restarted worker,
//! or another, serves the shard again soon. Shutdown awaits each supervisor, which awaits its
//! worker.

use crate::model::backoff::ExponentialBackoff;
use crate::model::ids::WorkerId;
use crate::runner::delivery::Delivery;
use crate::runner::tasks::stopped;
use crate::runner::turn::serve;
use crate::runner::wake_queue::WakeQueue;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::Instrument;

/// Runs worker `worker` until the stop, restarting it each time it dies: after 10 ms, doubling
/// with every death (see [`restart_delay`]), at most a poll interval; counted in
/// `worker_restarts`.
pub(super) async fn supervise(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    stop: watch::Receiver<bool>,
    worker: WorkerId,
) {
    let mut deaths = 0u32;
    loop {
        let task = tokio::spawn(
            work(delivery.clone(), queue.clone(), stop.clone(), worker).in_current_span(),
        );
        let why = match task.await {
            Ok(()) if *stop.borrow() || stop.has_changed().is_err() => return,
            Ok(()) => "ended before the node stopped".to_owned(),
            Err(e) if e.is_panic() => format!("panicked: {}", panic_message(e.into_panic())),
            Err(e) => e.to_string(),
        };
        deaths += 1;
        delivery.env().metrics.record_worker_restart();
        let after = restart_delay(deaths, delivery.env().config.poll_interval);
        tracing::error!(%worker, reason = %why, restart_in = ?after, "worker task died; restarting it (a panic outside the handlers, e.g. in a user station)");
        let mut stop = stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(after) => {}
            _ = stopped(&mut stop) => return,
        }
    }
}

/// How long after its `deaths`-th death a worker is restarted: 10 ms, doubling (10 times at
/// most, so never past 10.24 s), at most a poll interval — a worker that died once is back
/// soon, one that keeps dying does not spin. `deaths` counts every death since the node
/// started, not deaths in a row: a worker that dies again after hours of work waits twice as
/// long as the last time (up to the caps).
fn restart_delay(deaths: u32, poll_interval: Duration) -> Duration {
    ExponentialBackoff::new(Duration::from_millis(10), poll_interval)
        .max_doublings(10)
        .delay(deaths)
}

/// A panic's message, as a log line gives it.
pub(super) fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// One worker: takes the next queued shard and serves a turn on it, until the stop.
async fn work(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    mut stop: watch::Receiver<bool>,
    worker: WorkerId,
) {
    loop {
        let shard = tokio::select! {
            biased;
            _ = stop.changed() => break,
            shard = queue.next() => shard,
        };
        if *stop.borrow() {
            break;
        }
        if queue.wakeups.start(shard) {
            serve(&delivery, &queue, shard, worker).await;
        }
    }
    tracing::debug!("worker stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_10_ms_to_the_poll_interval_or_ten_doublings() {
        let ms = Duration::from_millis;
        let poll = ms(100);
        let delays: Vec<_> = (1..=6).map(|n| restart_delay(n, poll)).collect();
        assert_eq!(delays, [ms(10), ms(20), ms(40), ms(80), ms(100), ms(100)]);
        let slow_poll = Duration::from_secs(30);
        assert_eq!(restart_delay(11, slow_poll), ms(10_240));
        assert_eq!(restart_delay(u32::MAX, slow_poll), ms(10_240));
    }
}

//! The local runner: tokio worker tasks that serve every shard of a delivery.
//!
//! ```text
//!  write ──► observer ──► ShardWakeups ──► queue ──► worker 0..W ──► Delivery::deliver
//!  poller (every poll_interval): probes each shard for due rows and wakes it
//! ```
//!
//! A write wakes its shard's worker at once; the poller is the fallback for delayed rows,
//! retries and writes made by other processes. Shutdown lets each worker finish its current
//! stage, release its lease and exit.

use crate::delivery::Delivery;
use crate::error::DeliveryError;
use crate::ids::{ShardIndex, WorkerId};
use crate::observer::ShardObserver;
use crate::wakeups::ShardWakeups;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Mutex};
use tokio::task::JoinHandle;

struct WakeQueue {
    wakeups: ShardWakeups,
    tx: mpsc::UnboundedSender<ShardIndex>,
}

impl WakeQueue {
    fn wake(&self, shard: ShardIndex) {
        if self.wakeups.wake(shard) {
            // The receiver lives as long as the workers; after shutdown a lost wake is moot.
            let _ = self.tx.send(shard);
        }
    }
}

impl ShardObserver for WakeQueue {
    fn on_write(&self, shards: &[ShardIndex]) {
        for &s in shards {
            self.wake(s);
        }
    }
}

/// Starts local workers for a delivery.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalRunner;

impl LocalRunner {
    /// Starts `config.workers` workers and the poller on the current tokio runtime.
    pub fn start(delivery: Arc<Delivery>) -> RunnerHandle {
        let env = delivery.env().clone();
        env.clear_stop();
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Arc::new(WakeQueue {
            wakeups: ShardWakeups::new(env.registry.shard_count()),
            tx,
        });
        env.observe(queue.clone());
        let rx = Arc::new(Mutex::new(rx));
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for w in 0..env.config.workers {
            let worker = WorkerId(w as u32);
            tasks.push(tokio::spawn(work(
                delivery.clone(),
                queue.clone(),
                rx.clone(),
                stop_rx.clone(),
                worker,
            )));
        }
        tasks.push(tokio::spawn(poll(delivery.clone(), queue.clone(), stop_rx)));
        // Everything written before the start is found by the first poll, at once.
        tracing::info!(node = %env.config.node_id, workers = env.config.workers, shards = env.registry.shard_count(), "local runner started");
        RunnerHandle {
            delivery,
            stop: stop_tx,
            tasks,
        }
    }
}

async fn work(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<ShardIndex>>>,
    mut stop: watch::Receiver<bool>,
    worker: WorkerId,
) {
    let node = delivery.env().config.node_id.clone();
    loop {
        let next = {
            let mut rx = rx.lock().await;
            tokio::select! {
                biased;
                _ = stop.changed() => None,
                shard = rx.recv() => shard,
            }
        };
        let Some(shard) = next else { break };
        if *stop.borrow() {
            break;
        }
        if !queue.wakeups.start(shard) {
            continue;
        }
        match delivery.deliver(shard, worker).await {
            Ok(report) => {
                tracing::trace!(%node, %worker, %shard, stages = report.stages, "shard served")
            }
            Err(e) => {
                tracing::warn!(%node, %worker, %shard, error = %e, "delivery failed; the shard is retried at the next poll");
            }
        }
        if queue.wakeups.finish(shard) {
            let _ = queue.tx.send(shard);
        }
    }
    tracing::debug!(%node, %worker, "worker stopped");
}

async fn poll(delivery: Arc<Delivery>, queue: Arc<WakeQueue>, mut stop: watch::Receiver<bool>) {
    let env = delivery.env().clone();
    loop {
        let now = env.clock.now();
        for s in 0..env.registry.shard_count() {
            let shard = ShardIndex(s);
            match env.storage.read_page(shard, now, 1).await {
                Ok(page) if !page.messages.is_empty() => queue.wake(shard),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(%shard, error = %e, "poll failed; trying again next interval");
                    break;
                }
            }
        }
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(env.config.poll_interval) => {}
        }
    }
}

/// A running local runner.
pub struct RunnerHandle {
    delivery: Arc<Delivery>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunnerHandle {
    /// Waits until no shard has a due message, checking every 10 ms, at most `timeout`.
    /// Returns whether the Inbox drained in time.
    pub async fn drain(&self, timeout: Duration) -> Result<bool, DeliveryError> {
        let env = self.delivery.env();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let now = env.clock.now();
            let mut busy = false;
            for s in 0..env.registry.shard_count() {
                if !env
                    .storage
                    .read_page(ShardIndex(s), now, 1)
                    .await?
                    .messages
                    .is_empty()
                {
                    busy = true;
                    break;
                }
            }
            if !busy {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the workers after their current stage; each releases its lease. Messages not
    /// delivered stay in the Inbox for the next start (or another node).
    pub async fn shutdown(self) -> Result<(), DeliveryError> {
        self.delivery.env().request_stop();
        let _ = self.stop.send(true);
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a worker task panicked");
            }
        }
        tracing::info!(node = %self.delivery.env().config.node_id, "local runner stopped");
        Ok(())
    }
}

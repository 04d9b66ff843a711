//! [`RunnerHandle`]: a running node, its tasks owned, drained and awaited at shutdown.

use crate::model::error::DeliveryError;
use crate::model::ids::ShardIndex;
use crate::runner::delivery::Delivery;
use crate::runner::wake_queue::WakeQueue;
use crate::storage::listener::{ListenerHandle, ListenerStats};
use crate::storage::observer::ShardObserver;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running node: its workers, poller, lease watch and listener, and every task they
/// spawned (take-overs, linger releases, the TTL sweep). [`RunnerHandle::shutdown`] stops and
/// awaits them all; a handle dropped without it is logged, and its tasks are left to end
/// with the runtime.
#[must_use = "a node runs until `shutdown().await`; dropping the handle leaves its tasks running"]
pub struct RunnerHandle {
    pub(super) delivery: Arc<Delivery>,
    pub(super) queue: Arc<WakeQueue>,
    pub(super) observer: Arc<dyn ShardObserver>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) tasks: Vec<JoinHandle<()>>,
    pub(super) listener: Option<ListenerHandle>,
    pub(super) shut_down: bool,
}

impl RunnerHandle {
    /// What the listener for other nodes' writes has done, if the storage has one.
    pub fn listener(&self) -> Option<ListenerStats> {
        self.listener.as_ref().map(ListenerHandle::stats)
    }

    /// A watch on this node's workers, poller and lease watch, for a readiness probe that
    /// outlives a borrow of the handle (see [`NodeLiveness`](crate::NodeLiveness)).
    pub fn liveness(&self) -> crate::NodeLiveness {
        let tasks = self.tasks.iter().map(JoinHandle::abort_handle).collect();
        crate::NodeLiveness::new(tasks, self.stop.subscribe())
    }

    /// Runs `task` as one of this node's tasks: its handle is kept and awaited at shutdown
    /// (the facade's catch-up resume).
    #[doc(hidden)]
    pub fn spawn_owned(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.queue.tasks.spawn(task);
    }

    /// The node's stop signal (`true` once shutdown began), for a task given to
    /// [`RunnerHandle::spawn_owned`] that runs until the node stops.
    #[doc(hidden)]
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Waits until no shard has a due message, checking every 10 ms, at most `timeout`.
    /// Returns whether the Inbox drained in time.
    pub async fn drain(&self, timeout: Duration) -> Result<bool, DeliveryError> {
        let env = self.delivery.env();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut busy = false;
            for s in 0..env.registry.shard_count() {
                if env.probe_shard(ShardIndex(s)).await?.due {
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

    /// Stops the workers after their current stage; each releases its lease, so that other
    /// nodes can take the shards at once. Stops the listener, stops and awaits every task the
    /// node spawned, releases the leases kept for a linger, and stops observing writes.
    /// Messages not delivered stay in the Inbox for the next start (or another node).
    pub async fn shutdown(mut self) -> Result<(), DeliveryError> {
        self.shut_down = true;
        let env = self.delivery.env().clone();
        env.request_stop();
        let _ = self.stop.send(true);
        // Leave first: the other nodes' next round assigns this node's shards to them, and
        // they pick them up as the workers below release them.
        if let Err(e) = env.storage.leave(&env.config.node_id).await {
            tracing::warn!(error = %e, "could not leave the membership; it ends one lease after the last beat");
        }
        if let Some(listener) = &self.listener {
            listener.stop();
        }
        for task in std::mem::take(&mut self.tasks) {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a worker task panicked");
            }
        }
        self.queue.tasks.join_all().await;
        // Leases kept for a linger are released at once, for other nodes to take.
        for lease in self.queue.unpark_all() {
            if let Err(e) = self.delivery.release(&lease).await {
                tracing::warn!(shard = %lease.shard, error = %e, "could not release a kept lease; it expires");
            }
        }
        env.unobserve(&self.observer);
        // Once more: a beat that was in flight at the first leave may have re-joined.
        if let Err(e) = env.storage.leave(&env.config.node_id).await {
            tracing::warn!(error = %e, "could not leave the membership; it ends one lease after the last beat");
        }
        if let Err(e) = env.storage.node_stopped().await {
            tracing::warn!(error = %e, "the storage could not tidy up after the node stopped");
        }
        tracing::info!(node = %env.config.node_id, "node runner stopped");
        Ok(())
    }
}

impl Drop for RunnerHandle {
    fn drop(&mut self) {
        if !self.shut_down {
            tracing::warn!(
                node = %self.delivery.env().config.node_id,
                "node handle dropped without shutdown(): its workers run on until the runtime ends and its leases expire instead of being released; call `node.shutdown().await`"
            );
        }
    }
}

//! The lease heartbeat: while a stage runs, renew the shard's lease every third of the lease
//! duration, so that a slow but healthy stage keeps its shard.
//!
//! The heartbeat runs on its own task, so it keeps beating while stations await slow I/O, and
//! the live station runs every handler batch as a task of its own, so a handler that blocks
//! its thread leaves the runtime's other threads to the heartbeat (tests/heartbeat.rs). It
//! cannot beat through a stalled process (a long GC-like pause or a blocked thread): then the
//! lease expires, another node takes the shard, and the stalled stage's commit is refused by
//! the epoch fence. The heartbeat only saves time; the fence is what keeps one owner.

use crate::model::error::StorageError;
use crate::runner::env::DeliveryEnv;
use crate::storage::Lease;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// A running heartbeat for one lease; stops when dropped.
pub(crate) struct Heartbeat {
    task: JoinHandle<()>,
    lost: Arc<AtomicBool>,
}

impl Heartbeat {
    /// Starts renewing `lease` on the current runtime.
    pub(crate) fn start(env: Arc<DeliveryEnv>, lease: Lease) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let period = env.config.lease_duration / 3;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let until = env.lease_until(env.clock.now());
                match env.storage.renew(&lease, until).await {
                    Ok(_) => {
                        tracing::trace!(shard = %lease.shard, epoch = %lease.epoch, "lease renewed")
                    }
                    Err(StorageError::LeaseLost { current, .. }) => {
                        // The stage then ends with the loss, logged once with its cause
                        // (`lease_loss`): a catch-up's re-fence is routine.
                        tracing::debug!(shard = %lease.shard, epoch = %lease.epoch, ?current, "heartbeat found the lease lost");
                        flag.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => {
                        // A transient database error: keep beating; the fence decides.
                        tracing::warn!(shard = %lease.shard, error = %e, "lease renewal failed; retrying");
                    }
                }
            }
        }
        // In the stage's span: its log lines name the node, shard and epoch.
        .in_current_span());
        Heartbeat { task, lost }
    }

    /// Stops the heartbeat; returns whether it found the lease lost.
    pub(crate) fn stop(self) -> bool {
        self.task.abort();
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

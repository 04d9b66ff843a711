//! Lease renewal: while a stage runs, renew the shard's lease every third of the lease
//! duration, so that a slow but healthy stage keeps its shard. (Not the membership beat,
//! which keeps a node in the membership: see `membership`.)
//!
//! The renewal runs on its own task, so it goes on while stations await slow I/O, and the
//! live station runs every handler batch as a task of its own, so a handler that blocks its
//! thread leaves the runtime's other threads to the renewal (tests/heartbeat.rs). It cannot
//! renew through a stalled process (a long GC-like pause or a blocked thread): then the lease
//! expires, another node takes the shard, and the stalled stage's commit is refused by the
//! epoch fence. The renewal only saves time; the fence is what keeps one owner.

use crate::cluster::seat::NodeSeat;
use crate::model::error::StorageError;
use crate::storage::Lease;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// A running renewal of one lease; stops when dropped.
pub(crate) struct LeaseRenewal {
    task: JoinHandle<()>,
    lost: Arc<AtomicBool>,
}

impl LeaseRenewal {
    /// Starts renewing `lease` on the current runtime.
    pub(crate) fn start(seat: Arc<NodeSeat>, lease: Lease) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let period = seat.lease_duration / 3;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let until = seat.lease_until(seat.clock.now());
                match seat.lock_table.renew(&lease, until).await {
                    Ok(_) => {
                        tracing::trace!(shard = %lease.shard, epoch = %lease.epoch, "lease renewed")
                    }
                    Err(StorageError::LeaseLost { current, .. }) => {
                        // The stage then ends with the loss, logged once with its cause
                        // (`lease_loss`): a catch-up's re-fence is routine.
                        tracing::debug!(shard = %lease.shard, epoch = %lease.epoch, ?current, "lease renewal found the lease lost");
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
        LeaseRenewal { task, lost }
    }

    /// Stops the renewal; returns whether it found the lease lost.
    pub(crate) fn stop(self) -> bool {
        self.task.abort();
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for LeaseRenewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

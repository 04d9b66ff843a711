//! The lease around a delivery: picked up (or refused, or left for a new layout), released
//! (or kept for a retried release), and the re-check for rows that arrived meanwhile.

use crate::model::error::DeliveryError;
use crate::model::ids::{ShardIndex, WorkerId};
use crate::storage::Lease;
use chrono::{DateTime, Utc};

use super::Delivery;

impl Delivery {
    /// Picks up `shard`'s lease, or `None` (recorded) if another worker holds it.
    pub(super) async fn pick_up(
        &self,
        shard: ShardIndex,
        worker: WorkerId,
        now: DateTime<Utc>,
    ) -> Result<Option<Lease>, DeliveryError> {
        let env = &self.env;
        let picked = env
            .storage
            .pick_up(
                shard,
                &env.config.node_id,
                worker,
                now,
                env.lease_until(now),
            )
            .await?;
        let Some(lease) = picked else {
            env.metrics.record_refusal();
            env.monitor.on_pick_up_refused(shard);
            tracing::trace!(%shard, node = %env.config.node_id, "shard held by another worker");
            return Ok(None);
        };
        // Told before anything else may release it, so that every release follows its pick-up.
        env.monitor.on_picked_up(&lease);
        // A lease of a layout this node does not know would serve the shard, and address what
        // its stages fan out, by a stale count. A re-sharding's switch needs every lease, so
        // the count read while this one is held is the one it was picked up under.
        let recorded = match env.storage.recorded_shard_count().await {
            Ok(recorded) => recorded,
            Err(e) => {
                // Not served: the lease goes to the retried release, not to its expiry.
                env.unreleased.keep(lease);
                return Err(e.into());
            }
        };
        if let Some(recorded) =
            recorded.filter(|r| *r != env.registry.shard_count() || shard.0 >= *r)
        {
            env.registry.set_shard_count(recorded);
            tracing::info!(%shard, shards = recorded, "the Inbox was re-sharded; leaving the shard for the new layout");
            self.release(&lease).await?;
            return Ok(None);
        }
        tracing::trace!(target: "shardbox::latency", point = "picked_up", node = %env.config.node_id, shard = shard.0, key = 0);
        env.metrics.record_pick_up(lease.taken_over);
        if lease.taken_over {
            tracing::info!(%shard, epoch = %lease.epoch, "took over a lease that expired without a release");
        }
        Ok(Some(lease))
    }

    /// Releases a lease (its shard is free for any worker at once). If the release fails,
    /// the lease is kept for a retried release (see `unreleased`), so that the shard does not
    /// stay leased to this node until the lease runs out.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), DeliveryError> {
        if let Err(e) = self.env.storage.release(lease).await {
            self.env.unreleased.keep(lease.clone());
            return Err(e.into());
        }
        self.env.monitor.on_released(lease);
        Ok(())
    }

    /// Releases the lease of `shard` whose release failed earlier, if one is kept (whatever
    /// its recorded `lease_until`: see `unreleased`): before this node picks the shard up
    /// again, and in the runner's retry after a failed turn.
    pub(crate) async fn settle_unreleased(&self, shard: ShardIndex) -> Result<(), DeliveryError> {
        match self.env.unreleased.take(shard) {
            Some(lease) => self.release(&lease).await,
            None => Ok(()),
        }
    }

    /// After a release: whether rows written between the last empty read and the release
    /// are due (their notification may have found the shard held and been refused). If
    /// none, sets the timer for the shard's next delayed row.
    pub(crate) async fn has_due_rows(&self, shard: ShardIndex) -> Result<bool, DeliveryError> {
        let late = self.env.probe_shard(shard).await?;
        if !late.due {
            self.wake_at(shard, late.next_due);
        }
        Ok(late.due)
    }

    /// Sets a timer that wakes `shard` at `next_due` (when its next delayed row is due, as
    /// the last page read and the stages after it tell), if it has one.
    pub(super) fn wake_at(&self, shard: ShardIndex, next_due: Option<DateTime<Utc>>) {
        if let Some(at) = next_due {
            if !self.env.is_stopping() {
                self.env.due_timers.schedule(&self.env, shard, at);
            }
        }
    }
}

//! The operator's side of failures on [`Shardbox`]: dead letters (list, count, requeue,
//! purge), blocked targets (list, unblock) and TTL sweeps on demand.
//!
//! ```text
//!  dead_letters(filter) ─► DeadLetterStore::list_dead_letters
//!  requeue_dead_letters(filter) ─► operator::requeue_dead_letters (pages, each letter in its
//!                                  target's shard by the registry) ─► count, wake the shards
//!  purge_dead_letters(filter) ─► operator::purge_dead_letters
//!  unblock(target, action) ─► operator::unblock ─► count, wake the shard
//! ```
//!
//! The actions themselves are `shardbox_core::operator`'s, the same the admin surface and
//! the CLI call; this layer adds what only the running application knows: its shard strategy
//! (the registry's addressing), waking its workers, and its counters.

use crate::shardbox::Shardbox;
use shardbox_core::operator::{self, Placement};
use shardbox_core::storage::{
    BlockedTarget, DeadLetterFilter, EntityKey, RequeueReport, StoredDeadLetter, Unblock,
    UnblockReport,
};
use shardbox_core::{DeliveryError, DeliveryReport, WorkerId};

impl Shardbox {
    /// The dead letters matching `filter`, oldest first (at most `filter.limit`).
    ///
    /// ```no_run
    /// # async fn run(shardbox: shardbox::Shardbox) -> Result<(), shardbox::DeliveryError> {
    /// use shardbox::DeadLetterFilter;
    /// for dead in shardbox.dead_letters(DeadLetterFilter::all().kind("payment").limit(20)).await? {
    ///     let m = &dead.letter.original.message;
    ///     println!("#{} {}/{} after {} attempts: {}", dead.id, m.target_kind, m.target_id,
    ///              dead.letter.attempts, dead.letter.reason);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> Result<Vec<StoredDeadLetter>, DeliveryError> {
        Ok(self.env().storage.list_dead_letters(&filter).await?)
    }

    /// How many dead letters match `filter` (its limit ignored).
    pub async fn count_dead_letters(&self, filter: DeadLetterFilter) -> Result<u64, DeliveryError> {
        Ok(self.env().storage.count_dead_letters(&filter).await?)
    }

    /// Puts the dead letters matching `filter` (at most `filter.limit`, oldest first) back
    /// into the Inbox: each becomes a new row with the same signal, payload and metadata and
    /// a fresh attempt count, due at once, in the shard its target belongs to; running
    /// workers are woken. A signal already in its target's Inbox is not written twice (see
    /// [`RequeueReport`]).
    ///
    /// ```no_run
    /// # async fn run(shardbox: shardbox::Shardbox) -> Result<(), shardbox::DeliveryError> {
    /// use shardbox::DeadLetterFilter;
    /// let report = shardbox.requeue_dead_letters(DeadLetterFilter::all().target("payment", "p-42")).await?;
    /// println!("{} back in the Inbox", report.requeued);
    /// # Ok(()) }
    /// ```
    pub async fn requeue_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> Result<RequeueReport, DeliveryError> {
        let env = self.env();
        let placement = Placement::Addressed(env.registry.addressing());
        let report = operator::requeue_dead_letters(
            &*env.storage,
            placement,
            &filter,
            env.clock.now(),
            |page| {
                env.metrics.record_requeued(page.requeued);
                env.notify(&page.shards);
            },
        )
        .await?;
        Ok(report)
    }

    /// Deletes the dead letters matching `filter` (at most `filter.limit`, oldest first);
    /// returns how many.
    pub async fn purge_dead_letters(&self, filter: DeadLetterFilter) -> Result<u64, DeliveryError> {
        Ok(operator::purge_dead_letters(&*self.env().storage, &filter).await?)
    }

    /// The targets stopped by a blocked message (at most 10,000; see
    /// [`Shardbox::blocked_targets_limited`]).
    pub async fn blocked_targets(&self) -> Result<Vec<BlockedTarget>, DeliveryError> {
        self.blocked_targets_limited(10_000).await
    }

    /// At most `limit` blocked targets, in `seq` order of their blocked message.
    pub async fn blocked_targets_limited(
        &self,
        limit: usize,
    ) -> Result<Vec<BlockedTarget>, DeliveryError> {
        Ok(self.env().storage.blocked_targets(limit).await?)
    }

    /// Lets a blocked target go on: its blocked message is requeued (due at once with a fresh
    /// attempt count, before the target's later messages), dropped, or moved to the dead
    /// letters, as `action` says. Running workers are woken. Returns what was changed
    /// (nothing if the target was not blocked).
    ///
    /// ```no_run
    /// # async fn run(shardbox: shardbox::Shardbox) -> Result<(), shardbox::DeliveryError> {
    /// use shardbox::Unblock;
    /// for blocked in shardbox.blocked_targets().await? {
    ///     println!("{}/{} blocked: {:?}", blocked.target.kind, blocked.target.id, blocked.last_error);
    ///     shardbox.unblock(&blocked.target, Unblock::Requeue).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unblock(
        &self,
        target: &EntityKey,
        action: Unblock,
    ) -> Result<UnblockReport, DeliveryError> {
        let env = self.env();
        let report = operator::unblock(&*env.storage, target, action, env.clock.now()).await?;
        env.metrics.record_unblocked(report.unblocked);
        env.notify(&report.shards);
        Ok(report)
    }

    /// Expires now, on the calling task, every message whose TTL has passed (due or not), in
    /// every shard no other worker holds; the node runner does the same every
    /// `ttl_sweep_interval`. Returns the summed report (`totals.expired`).
    pub async fn sweep_expired(&self) -> Result<DeliveryReport, DeliveryError> {
        self.delivery().sweep_expired(WorkerId(0)).await
    }
}

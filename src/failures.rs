//! The operator's side of failures on [`Shardbox`]: dead letters (list, count, requeue,
//! purge), blocked targets (list, unblock) and TTL sweeps on demand.
//!
//! ```text
//!  dead_letters(filter) ─► DeadLetterStore::list_dead_letters
//!  requeue_dead_letters(filter) ─► list a batch ─► shard of each target (registry)
//!                                ─► DeadLetterStore::requeue_dead_letters ─► wake the shards
//!  unblock(target, action) ─► DeadLetterStore::unblock_target ─► wake the shard
//! ```
//!
//! The storage does the writes atomically and safely beside running workers (see
//! `shardbox_core::storage::DeadLetterStore`); this layer adds what only the delivery knows:
//! which shard a target belongs to, waking the workers, and the counters.

use crate::shardbox::Shardbox;
use shardbox_core::storage::{
    BlockedTarget, DeadLetterFilter, EntityKey, Requeue, RequeueReport, StoredDeadLetter, Unblock,
    UnblockReport,
};
use shardbox_core::{DeliveryError, DeliveryReport, WorkerId};

/// Dead letters requeued per storage call.
const REQUEUE_BATCH: usize = 500;

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
        let mut report = RequeueReport::default();
        let mut remaining = filter.limit.unwrap_or(usize::MAX);
        let mut after = filter.after;
        while remaining > 0 {
            let page = env
                .storage
                .list_dead_letters(&DeadLetterFilter {
                    after,
                    limit: Some(remaining.min(REQUEUE_BATCH)),
                    ..filter.clone()
                })
                .await?;
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            remaining = remaining.saturating_sub(page.len());
            let done = self.requeue_page(&page).await?;
            env.metrics.record_requeued(done.requeued);
            env.notify(&done.shards);
            report.merge(done);
        }
        tracing::info!(
            requeued = report.requeued,
            already_in_inbox = report.already_in_inbox,
            missing = report.missing,
            skipped = report.skipped,
            "dead letters requeued"
        );
        Ok(report)
    }

    /// Requeues one page of dead letters, each into its target's shard by the registry; if
    /// the Inbox was re-sharded meanwhile (the storage refuses, writing nothing), learns the
    /// new count and places them again.
    async fn requeue_page(
        &self,
        page: &[StoredDeadLetter],
    ) -> Result<RequeueReport, DeliveryError> {
        let env = self.env();
        let strategy = env.registry.strategy();
        let done = env
            .registry
            .addressed(|shard_count| {
                let requeue: Vec<Requeue> = page
                    .iter()
                    .map(|d| {
                        let m = &d.letter.original.message;
                        Requeue {
                            id: d.id,
                            shard: strategy.shard_of(&m.target_kind, &m.target_id, shard_count),
                        }
                    })
                    .collect();
                env.storage
                    .requeue_dead_letters(requeue, shard_count, env.clock.now())
            })
            .await?;
        Ok(done)
    }

    /// Deletes the dead letters matching `filter` (at most `filter.limit`, oldest first);
    /// returns how many.
    pub async fn purge_dead_letters(&self, filter: DeadLetterFilter) -> Result<u64, DeliveryError> {
        let purged = self.env().storage.purge_dead_letters(&filter).await?;
        tracing::info!(purged, "dead letters purged");
        Ok(purged)
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
        let report = env
            .storage
            .unblock_target(target, action, env.clock.now())
            .await?;
        env.metrics.record_unblocked(report.unblocked);
        env.notify(&report.shards);
        tracing::info!(kind = %target.kind, id = %target.id, ?action, unblocked = report.unblocked, "target unblocked");
        Ok(report)
    }

    /// Expires now, on the calling task, every message whose TTL has passed (due or not), in
    /// every shard no other worker holds; the node runner does the same every
    /// `ttl_sweep_interval`. Returns the summed report (`totals.expired`).
    pub async fn sweep_expired(&self) -> Result<DeliveryReport, DeliveryError> {
        self.delivery().sweep_expired(WorkerId(0)).await
    }
}

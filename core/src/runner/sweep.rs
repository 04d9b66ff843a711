//! Sweeps: the periodic look for work that no write announces — rows whose TTL passed before
//! they were due, and delivered rows past their deduplication window in shards without new
//! traffic.
//!
//! ```text
//!  every ttl_sweep_interval ─► expired_shards ─► expiry requests + wake ─► the next turn on
//!                                                 each shard expires them (fenced commits)
//!                           ─► purge_due_shards ─► purge requests + wake ─► a stage purges
//!                              (delivered rows and outcome records, even with an empty page)
//! ```
//!
//! A sweep only finds and wakes shards; the worker that serves each one does the work under
//! its lease, in normal fenced stage commits.

use crate::model::error::DeliveryError;
use crate::model::ids::{ShardIndex, WorkerId};
use crate::runner::delivery::{Delivery, DeliveryReport};
use crate::runner::tasks::stopped;
use crate::stage::conveyor::{Conveyor, Intent};
use crate::storage::{Lease, Page};
use crate::telemetry::fates::log_settled;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

impl Delivery {
    /// Asks for a TTL sweep now: finds the shards holding messages whose TTL has passed (due
    /// or not) and wakes them; the worker that serves each one next expires them under its
    /// lease. Returns the shards. The node runner calls this every `ttl_sweep_interval`.
    pub async fn request_expiry(&self) -> Result<Vec<ShardIndex>, DeliveryError> {
        let env = &self.env();
        let shards = env.storage.expired_shards(env.clock.now()).await?;
        env.sweeps.expire.request(&shards);
        env.notify(&shards);
        Ok(shards)
    }

    /// Wakes the shards holding delivered rows or command outcome records past their
    /// deduplication window, asking each for a purging stage, so that a shard without new
    /// traffic is cleaned up too (and a re-send after the window is
    /// delivered again rather than refused as a duplicate of a row kept too long). The node
    /// runner calls this every `ttl_sweep_interval`, with the TTL sweep. Returns the shards.
    pub async fn request_purge(&self) -> Result<Vec<ShardIndex>, DeliveryError> {
        let env = &self.env();
        let shards = env.storage.purge_due_shards(env.clock.now()).await?;
        env.sweeps.purge.request(&shards);
        env.notify(&shards);
        Ok(shards)
    }

    /// A TTL sweep on the calling task: asks as [`Delivery::request_expiry`] does, then
    /// serves each of those shards as `worker` (shards another worker holds are left to it).
    pub async fn sweep_expired(&self, worker: WorkerId) -> Result<DeliveryReport, DeliveryError> {
        let mut total = DeliveryReport::default();
        for shard in self.request_expiry().await? {
            total.absorb(&self.deliver(shard, worker).await?);
        }
        Ok(total)
    }

    /// Expires, under `lease`, the rows of its shard whose TTL has passed, a page at a time,
    /// each page in one fenced stage commit (counted as a stage).
    pub(super) async fn expire(
        &self,
        lease: &mut Lease,
        report: &mut DeliveryReport,
    ) -> Result<(), DeliveryError> {
        let env = &self.env();
        loop {
            let started = Instant::now();
            let now = env.clock.now();
            let rows = env
                .storage
                .read_expired(lease.shard, now, env.config.page_size)
                .await?;
            if rows.is_empty() {
                return Ok(());
            }
            let more = rows.len() >= env.config.page_size;
            let len = rows.len();
            let page = Page {
                messages: rows,
                ..Page::default()
            };
            let mut conveyor = Conveyor::new(env.station.clone(), lease.clone(), now, page);
            for i in 0..len {
                conveyor.record(i, Intent::Expired);
            }
            let (commit, mut stage) = conveyor.into_commit(env.lease_until(env.clock.now()));
            let decided = commit.outcomes_decided;
            let committed = env.storage.commit_stage(commit).await?;
            if decided {
                env.outcomes_decided(lease.shard);
            }
            log_settled(&stage.settled);
            *lease = committed.lease;
            stage.purged = committed.purged;
            stage.elapsed = started.elapsed();
            tracing::debug!(shard = %lease.shard, expired = stage.expired, "TTL sweep committed");
            report.stages += 1;
            report.totals.add(&stage);
            env.metrics.record_stage(&stage);
            if !more {
                return Ok(());
            }
        }
    }
}

/// Runs the periodic TTL sweep of `delivery`: every `ttl_sweep_interval`, asks the workers
/// (through the write observers) to expire the rows whose TTL has passed, and wakes the shards
/// holding delivered rows past their window (see [`Delivery::request_purge`]). The first sweep
/// runs one interval after the start. Ends at the first wake-up after the delivery was asked
/// to stop, or after a newer sweep was started for it (one sweeper per delivery). Its wait ends at
/// `stop` (the node handle's shutdown).
pub async fn sweep_periodically(delivery: Arc<Delivery>, mut stop: watch::Receiver<bool>) {
    let env = delivery.env().clone();
    let me = env.sweeps.sweeper.fetch_add(1, Ordering::SeqCst) + 1;
    let interval = env.config.ttl_sweep_interval;
    loop {
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            _ = tokio::time::sleep(interval) => {}
        }
        if env.is_stopping() || env.sweeps.sweeper.load(Ordering::SeqCst) != me {
            break;
        }
        match delivery.request_expiry().await {
            Ok(shards) if !shards.is_empty() => {
                tracing::debug!(?shards, "TTL sweep: expired messages found");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "TTL sweep failed; trying again next interval"),
        }
        match delivery.request_purge().await {
            Ok(shards) if !shards.is_empty() => {
                tracing::debug!(?shards, "sweep: delivered rows past their window found");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "purge sweep failed; trying again next interval"),
        }
    }
}

//! The stages over a held lease: pages read, carried through the stations and committed,
//! until the shard has no due row, the monitor says stop or the worker yields the shard.

use crate::cluster::lease_renewal::LeaseRenewal;
use crate::model::error::{DeliveryError, StorageError};
use crate::stage::conveyor::Conveyor;
use crate::storage::Lease;
use crate::telemetry::fates::log_settled;
use crate::telemetry::monitor::{StageInfo, StageReport};
use chrono::{DateTime, Utc};
use std::time::Instant;
use tracing::Instrument;

use super::{Delivery, DeliveryReport};

/// Why [`Delivery::drain`] ended.
pub(super) enum DrainEnd {
    Drained,
    Stopped,
    Yielded,
}

impl Delivery {
    /// Runs stages on `lease` (renewed by each commit) until no row is due, the node stops,
    /// `keep_on` says yield, or — with `short_ends` — a page comes back short; `next_due`
    /// keeps the shard's next delayed row as the pages and stages tell.
    pub(super) async fn drain(
        &self,
        lease: &mut Lease,
        report: &mut DeliveryReport,
        keep_on: &(dyn Fn() -> bool + Sync),
        short_ends: bool,
        next_due: &mut Option<DateTime<Utc>>,
    ) -> Result<DrainEnd, DeliveryError> {
        let env = &self.env;
        let mut idle_purged = false;
        loop {
            if env.is_stopping() {
                return Ok(DrainEnd::Stopped);
            }
            let started = Instant::now();
            let now = env.clock.now();
            let mut page = env
                .storage
                .read_page(lease.shard, now, env.config.page_size)
                .await?;
            // A sweep found forgotten outcome records (or delivered rows) to purge here: the
            // page read sees only the latter.
            page.purge_due |= env.sweeps.purge.take(lease.shard);
            if tracing::enabled!(target: "shardbox::latency", tracing::Level::TRACE) {
                for m in &page.messages {
                    let key = m.message.received_at.timestamp_micros();
                    tracing::trace!(target: "shardbox::latency", point = "read", node = %env.config.node_id, shard = lease.shard.0, key);
                }
            }
            // The read saw every earlier stage's retries and holds.
            *next_due = page.next_due;
            // An empty page still gets one stage when a purge has work (an idle shard woken by
            // the sweep, see `request_purge`): the cleanup station asks the commit to purge.
            // One such stage per drain, so a pipeline without a cleanup station cannot spin.
            if page.messages.is_empty() && (idle_purged || !page.purge_due) {
                break;
            }
            idle_purged |= page.messages.is_empty();
            // With a linger, a short page held every row due when it was read: the drain ends
            // after its stage without reading an empty page. Rows written meanwhile (by the
            // stage itself, or by senders) woke the shard, which the runner serves again
            // under the kept lease. Without one, the empty read stays: it serves such rows
            // under this lease instead of a release and a new pick-up.
            let short = short_ends && page.messages.len() < env.config.page_size;
            let info = StageInfo {
                shard: lease.shard,
                epoch: lease.epoch,
                node_id: env.config.node_id.clone(),
                page_len: page.messages.len(),
            };
            let span = tracing::info_span!(
                "stage",
                node = %info.node_id,
                shard = %info.shard,
                epoch = %info.epoch,
                page = info.page_len,
                delivered = tracing::field::Empty,
                duplicates = tracing::field::Empty,
                retried = tracing::field::Empty,
            );
            let stage = self.run_stage(lease.clone(), now, page, &info);
            let (mut stage_report, renewed, delayed) = stage.instrument(span.clone()).await?;
            *next_due = next_due.iter().copied().chain(delayed).min();
            stage_report.elapsed = started.elapsed();
            *lease = renewed;
            span.record("delivered", stage_report.delivered);
            span.record("duplicates", stage_report.duplicates);
            span.record("retried", stage_report.retried);
            report.stages += 1;
            report.totals.add(&stage_report);
            env.metrics.record_stage(&stage_report);
            env.monitor.on_stage_finished(&info, &stage_report);
            if !env.monitor.should_continue(&info, &stage_report) {
                return Ok(DrainEnd::Stopped);
            }
            if short {
                break;
            }
            if !keep_on() {
                return Ok(DrainEnd::Yielded);
            }
        }
        // Drained: rows whose TTL passed (due or not) are expired now if a sweep asked for it
        // (see `request_expiry`); asked again if that fails.
        if env.sweeps.expire.take(lease.shard) {
            if let Err(e) = self.expire(lease, report).await {
                env.sweeps.expire.restore(lease.shard);
                return Err(e);
            }
        }
        Ok(DrainEnd::Drained)
    }

    pub(super) async fn run_stage(
        &self,
        lease: Lease,
        now: DateTime<Utc>,
        page: crate::storage::Page,
        info: &StageInfo,
    ) -> Result<(StageReport, Lease, Option<DateTime<Utc>>), DeliveryError> {
        let env = &self.env;
        env.monitor.on_stage_started(info);
        let renewal = LeaseRenewal::start(env.seat.clone(), lease.clone());
        let mut conveyor = Conveyor::new(env.station.clone(), lease.clone(), now, page);
        for station in &self.pipeline {
            station.process(&mut conveyor).await?;
        }
        if renewal.stop() {
            return Err(StorageError::LeaseLost {
                shard: lease.shard,
                held: lease.epoch,
                current: None,
            }
            .into());
        }
        let after_commit = conveyor.take_after_commit();
        let (commit, mut report) = conveyor.into_commit(env.lease_until(env.clock.now()));
        let delayed = commit.earliest_delay();
        let decided = commit.outcomes_decided;
        let shard = commit.lease.shard;
        let committed = env.storage.commit_stage(commit).await?;
        tracing::trace!(target: "shardbox::latency", point = "committed", node = %env.config.node_id, shard = shard.0, key = 0);
        for f in after_commit {
            f();
        }
        if decided {
            env.outcomes_decided(shard);
        }
        log_settled(&report.settled);
        report.correct(&committed.failed_writes);
        report.purged = committed.purged;
        if committed.catch_ups_purged > 0 {
            tracing::info!(
                purged = committed.catch_ups_purged,
                "completed catch-up jobs purged"
            );
        }
        env.metrics.record_write(&committed.written);
        env.notify(&committed.written.shards);
        tracing::debug!(
            delivered = report.delivered,
            duplicates = report.duplicates,
            retried = report.retried,
            held = report.held,
            dead_lettered = report.dead_lettered,
            purged = report.purged,
            fanned_out = report.fanned_out,
            "stage committed"
        );
        Ok((report, committed.lease, delayed))
    }
}

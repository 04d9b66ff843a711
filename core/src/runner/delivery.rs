//! [`Delivery`]: serving one shard in stages. A stage (`run_stage`) reads one page, carries it
//! on a [`Conveyor`] through the stations and commits it in one transaction fenced by the
//! lease.
//!
//! ```text
//! deliver(shard):
//!   pick up the lease ──refused──► monitor.on_pick_up_refused, return
//!   loop: read a due page ──empty──► expire not-due rows if a TTL sweep asked; break
//!         Conveyor through every station
//!         commit intents + states + events + fan-out, renewing the lease (fenced by epoch)
//!         monitor.should_continue? ──no──► break
//!         with a linger, a short page (fewer rows than page_size)? ──► expire as above; break
//!   release; re-check for rows that arrived meanwhile (and go again if any)
//!   next due (read with the last page)? ──► a timer wakes the shard then (see `due`)
//! ```
//!
//! A worker whose lease was taken commits nothing ([`StorageError::LeaseLost`]); the new owner
//! reads the same rows and delivers them.

use crate::cluster::lease_loss::log_lease_lost;
use crate::cluster::lease_renewal::LeaseRenewal;
use crate::model::error::{DeliveryError, StorageError};
use crate::model::ids::{ShardIndex, WorkerId};
use crate::runner::env::DeliveryEnv;
use crate::stage::conveyor::Conveyor;
use crate::stage::station::Station;
use crate::storage::Lease;
use crate::telemetry::fates::log_settled;
use crate::telemetry::monitor::{StageInfo, StageReport};
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// The most stages one [`Delivery::deliver`] call (the facade's `deliver`, and each shard of
/// its `deliver_all`) commits on its shard before it gives up with
/// [`DeliveryError::StageLimit`]: without a bound, handlers that keep writing to the shard —
/// a reactor that reacts to the events of its own commands — make the call never return.
/// 10,000 stages are 2.56 million messages at the default page size: far more than a backlog
/// driven by hand. A started node's workers are not bound by it (they yield a shard between
/// turns and serve it again).
pub const MAX_DELIVER_STAGES: usize = 10_000;

/// What one `deliver` call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    /// The shard.
    pub shard: Option<ShardIndex>,
    /// Whether the lease was picked up at least once.
    pub picked_up: bool,
    /// Whether the lease was lost (a stage was not committed).
    pub lease_lost: bool,
    /// Stages committed.
    pub stages: usize,
    /// Whether the worker let the shard go with due rows left, to serve other shards (see
    /// [`Delivery::deliver_while`]).
    pub yielded: bool,
    /// Sum of the stages' counters.
    pub totals: StageReport,
}

impl DeliveryReport {
    /// Adds `other`'s work to this report (a sweep or a pass over several shards).
    pub fn absorb(&mut self, other: &DeliveryReport) {
        self.picked_up |= other.picked_up;
        self.lease_lost |= other.lease_lost;
        self.stages += other.stages;
        self.totals.add(&other.totals);
    }
}

enum DrainEnd {
    Drained,
    Stopped,
    Yielded,
}

/// Serves shards: the delivery loop over a pipeline of stations.
pub struct Delivery {
    env: Arc<DeliveryEnv>,
    pipeline: Vec<Arc<dyn Station>>,
}

impl Delivery {
    /// A delivery running `pipeline` in order.
    pub fn new(env: Arc<DeliveryEnv>, pipeline: Vec<Arc<dyn Station>>) -> Self {
        Delivery { env, pipeline }
    }

    /// The environment.
    pub fn env(&self) -> &Arc<DeliveryEnv> {
        &self.env
    }

    /// The names of the stations, in order.
    pub fn station_names(&self) -> Vec<String> {
        self.pipeline.iter().map(|s| s.name().to_owned()).collect()
    }

    /// Serves `shard` as `worker` of this node until it has no due message (or the monitor
    /// says stop), then releases it.
    ///
    /// At most [`MAX_DELIVER_STAGES`] stages: if messages are still due after that many (its
    /// handlers keep writing to the shard, as a reactor that reacts to the events of its own
    /// commands does), the shard is released with them and the call fails with
    /// [`DeliveryError::StageLimit`]; what the stages did is committed.
    pub async fn deliver(
        &self,
        shard: ShardIndex,
        worker: WorkerId,
    ) -> Result<DeliveryReport, DeliveryError> {
        let asked = AtomicUsize::new(0);
        // Asked after each committed stage: one more stage while under the limit.
        let under_limit = || asked.fetch_add(1, Ordering::Relaxed) + 1 < MAX_DELIVER_STAGES;
        let report = self.deliver_while(shard, worker, &under_limit).await?;
        // A shard drained by the last stage allowed is not a runaway.
        if report.yielded && self.has_due_rows(shard).await? {
            return Err(DeliveryError::StageLimit {
                shard,
                stages: report.stages,
            });
        }
        Ok(report)
    }

    /// As [`Delivery::deliver`], but after each committed stage asks `keep_on` whether to go
    /// on; if not, releases the shard with its due rows left ([`DeliveryReport::yielded`]),
    /// so that the worker can serve other shards (the node runner's turns).
    pub async fn deliver_while(
        &self,
        shard: ShardIndex,
        worker: WorkerId,
        keep_on: &(dyn Fn() -> bool + Sync),
    ) -> Result<DeliveryReport, DeliveryError> {
        let (report, kept) = self
            .serve_turn(shard, worker, keep_on, None, &|| false)
            .await?;
        debug_assert!(kept.is_none(), "nothing kept without a linger");
        Ok(report)
    }

    /// The node runner's turn on `shard`: as [`Delivery::deliver_while`], but it may start
    /// with a lease `held` from an earlier turn (no pick-up), and with `linger` it keeps the
    /// lease of a drained shard instead of releasing it, returning it for the runner to hand
    /// to the next turn or release (a trickle of writes then costs no pick-up and release
    /// per message). Only a lease picked up less than a poll interval ago is kept, so that
    /// under steady traffic a shard is still released once a poll interval. A held lease with
    /// less than half a lease duration left is released and the shard picked up anew.
    ///
    /// `linger` is asked twice: when the turn starts (a short page then ends the drain) and
    /// when the shard is drained (whether its lease is kept). The second answer is the one
    /// of that moment: a shard the assignment gave to another member during the stage is
    /// released, not kept for the linger while its new owner waits for it.
    pub(crate) async fn serve_turn(
        &self,
        shard: ShardIndex,
        worker: WorkerId,
        keep_on: &(dyn Fn() -> bool + Sync),
        mut held: Option<Lease>,
        linger: &(dyn Fn() -> bool + Sync),
    ) -> Result<(DeliveryReport, Option<Lease>), DeliveryError> {
        let short_ends = linger();
        let env = &self.env;
        let mut report = DeliveryReport {
            shard: Some(shard),
            ..DeliveryReport::default()
        };
        env.ensure_kind_controls().await?;
        loop {
            let now = env.clock.now();
            let half = env.config.lease_span() / 2;
            let mut lease = match held.take() {
                Some(lease) if lease.lease_until - now >= half => lease,
                stale => {
                    if let Some(stale) = stale {
                        self.release(&stale).await?;
                    }
                    self.settle_unreleased(shard).await?;
                    let Some(lease) = self.pick_up(shard, worker, now).await? else {
                        return Ok((report, None));
                    };
                    lease
                }
            };
            report.picked_up = true;
            let epoch = lease.epoch;
            let mut next_due = None;
            let lost = env.unreleased.keep_if_lost(&lease);
            let drained = self
                .drain(&mut lease, &mut report, keep_on, short_ends, &mut next_due)
                .await;
            lost.disarm();
            let end = match drained {
                Ok(end) => end,
                Err(e) if e.is_lease_lost() => {
                    env.metrics.record_lease_lost();
                    env.monitor.on_lease_lost(shard, epoch);
                    log_lease_lost(
                        env.storage.as_ref(),
                        shard,
                        epoch,
                        &env.config.node_id,
                        worker,
                        env.clock.now(),
                    )
                    .await;
                    report.lease_lost = true;
                    return Ok((report, None));
                }
                Err(e) => {
                    // Nothing works on the shard any more (the lease renewal stopped with the
                    // stage): free it now, or keep it for a retried release.
                    if let Err(release) = self.release(&lease).await {
                        tracing::warn!(%shard, node = %env.config.node_id, error = %release, "release after failed stage failed; retried");
                    }
                    return Err(e);
                }
            };
            // Kept however long ago it was picked up: `linger` holds only for a shard the
            // assignment prefers this node for, so a shard changes hands when another member
            // comes to be preferred for it (its turns then end after a stage, unkept), not by
            // a release every poll interval — which had cost a pick-up and a release per
            // shard and poll interval under steady traffic.
            if matches!(end, DrainEnd::Drained) && !env.is_stopping() && linger() {
                // Kept: writes to the shard wake this node, which serves them under this
                // lease; the runner releases it when the linger ends.
                self.wake_at(shard, next_due);
                return Ok((report, Some(lease)));
            }
            self.release(&lease).await?;
            match end {
                DrainEnd::Stopped => return Ok((report, None)),
                DrainEnd::Yielded => {
                    report.yielded = true;
                    return Ok((report, None));
                }
                DrainEnd::Drained => {}
            }
            if !self.has_due_rows(shard).await? {
                return Ok((report, None));
            }
        }
    }

    /// Picks up `shard`'s lease, or `None` (recorded) if another worker holds it.
    async fn pick_up(
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
    fn wake_at(&self, shard: ShardIndex, next_due: Option<DateTime<Utc>>) {
        if let Some(at) = next_due {
            if !self.env.is_stopping() {
                self.env.due_timers.schedule(&self.env, shard, at);
            }
        }
    }

    async fn drain(
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

    async fn run_stage(
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

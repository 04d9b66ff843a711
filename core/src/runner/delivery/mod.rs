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
//! A worker whose lease was taken commits nothing
//! ([`StorageError::LeaseLost`](crate::model::error::StorageError::LeaseLost)); the new owner
//! reads the same rows and delivers them.
//!
//! ```text
//!  mod.rs    Delivery, its reports, and the turn on one shard (`serve_turn`)
//!  lease     pick-up, release, the retried release, the re-check after a release
//!  drain     the stages over a held lease (`drain`, `run_stage`)
//! ```

use crate::cluster::lease_loss::log_lease_lost;
use crate::model::error::DeliveryError;
use crate::model::ids::{ShardIndex, WorkerId};
use crate::runner::env::DeliveryEnv;
use crate::stage::station::Station;
use crate::storage::Lease;
use crate::telemetry::monitor::StageReport;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod drain;
mod lease;

use drain::DrainEnd;

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
        let (report, kept) = self.serve_turn(shard, worker, keep_on, None, false).await?;
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
    pub(crate) async fn serve_turn(
        &self,
        shard: ShardIndex,
        worker: WorkerId,
        keep_on: &(dyn Fn() -> bool + Sync),
        mut held: Option<Lease>,
        linger: bool,
    ) -> Result<(DeliveryReport, Option<Lease>), DeliveryError> {
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
                .drain(&mut lease, &mut report, keep_on, linger, &mut next_due)
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
            if linger && matches!(end, DrainEnd::Drained) && !env.is_stopping() {
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
}

//! The catch-up station: drives catch-up jobs and keeps live traffic of the projections being
//! rebuilt from overtaking (or doubling) the replay.
//!
//! ```text
//!  tick row of job J (in J's home shard) ─► one replay step (J's other ticks in the page
//!                                           are consumed: one step per job and stage):
//!      Started/InProgress: read catch_up_page_size events after the cursor, route them to
//!                          J's targets, apply them straight to the targets' states (or, if
//!                          one is not handled, write them as `to_catch_up` rows for live
//!                          delivery and its failure policy), advance the cursor, tick again
//!      Finalizing:         replayed rows left? tick again after a poll interval : complete
//!      cancel requested:   (any running status) no more reading; replayed rows left? tick
//!                          again after a poll interval : cancelled (settled as a completion)
//!  live event row of a target J rebuilds ─► its event seq <= J's cursor ? drop (covered by the
//!                                           replay) : park it until J completes
//!                                           (over several databases: its event in J's set ?
//!                                           drop : park; set not read, or J ending ? hold a
//!                                           poll interval)
//!  J completes (committed with the stage)  ─► parked rows the replay covered are removed, the
//!                                           others are due at once (see `parked_until`)
//!  replayed rows ─► left for live delivery (handled like live events, in seq order); while
//!                    any is left, later pages are written as rows too (per-target order)
//! ```
//!
//! Every step commits with the stage, under the home shard's lease: the tick row is consumed,
//! the next tick, the targets' new states (or the replayed rows) and the job's new cursor are
//! written in one transaction, so
//! a crash mid-catch-up resumes from the last committed step on whichever node next serves
//! the home shard. The job list is read at each pick-up of a shard (starting a job re-fences
//! its shards, forcing a new pick-up) and at every stage while jobs run.
//!
//! ```text
//!  mod     CatchUpStation: the running jobs, the live rows of their targets (this file)
//!  replay  one replay step of a job, driven by its tick row
//!  direct  a replayed page applied straight to the projection's states
//! ```

mod direct;
mod replay;

use crate::batches::InFlight;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardbox_core::catch_up::{
    covers, decide_job_live_row, parked_until, LiveRowDecision, TICK_KIND,
};
use shardbox_core::storage::CatchUpJob;
use shardbox_core::sync::lock;
use shardbox_core::{
    Conveyor, DeliveryError, Intent, LeaseEpoch, MessageKind, MessageStatus, ShardIndex, SignalId,
    Station,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub use replay::tick_message;
pub use shardbox_core::catch_up::TICK_TYPE;

/// The running jobs as read under one lease epoch of a shard.
type JobsSeen = (LeaseEpoch, Arc<Vec<CatchUpJob>>);

/// Serves catch-up jobs; goes first in the pipeline.
#[derive(Default)]
pub struct CatchUpStation {
    /// Per shard: the running jobs read under a lease epoch.
    jobs: Mutex<HashMap<ShardIndex, JobsSeen>>,
    /// Per job: whether replayed rows of it may be in the Inbox (a page that could not be
    /// applied directly wrote them), as known under a lease epoch of the job's home shard.
    /// Only valid under that epoch: under another one, another node may have served the
    /// job's ticks and written replayed rows this node never saw. Unknown jobs, and jobs
    /// known under another epoch, are looked up.
    spilled: Mutex<HashMap<i64, (LeaseEpoch, bool)>>,
    last_purge: Mutex<Option<DateTime<Utc>>>,
    /// The bound on the direct replay's handler calls in flight over every worker
    /// (`max_in_flight_handlers`, apart from live delivery's).
    in_flight: InFlight,
}

impl std::fmt::Debug for CatchUpStation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CatchUpStation")
    }
}

impl CatchUpStation {
    /// The station.
    pub fn new() -> Self {
        Self::default()
    }

    /// The running jobs as this stage must see them.
    async fn running(
        &self,
        conveyor: &mut Conveyor,
    ) -> Result<Arc<Vec<CatchUpJob>>, DeliveryError> {
        let lease = conveyor.lease();
        {
            let cache = lock(&self.jobs);
            if let Some((epoch, jobs)) = cache.get(&lease.shard) {
                // No job ran when this lease was picked up, and a job start re-fences the
                // shard: none can have started since.
                if *epoch == lease.epoch && jobs.is_empty() {
                    return Ok(jobs.clone());
                }
            }
        }
        let (shard, epoch) = (lease.shard, lease.epoch);
        let jobs = Arc::new(conveyor.context().running_catch_ups().await?);
        lock(&self.jobs).insert(shard, (epoch, jobs.clone()));
        self.purge_completed(conveyor);
        Ok(jobs)
    }

    /// Asks the stage's commit to purge completed jobs past their retention, at most once per
    /// tenth of the retention (the commit logs how many it purged).
    fn purge_completed(&self, conveyor: &mut Conveyor) {
        let now = conveyor.now();
        let retention = conveyor.context().config().catch_up_retention_span();
        {
            let mut last = lock(&self.last_purge);
            if last.is_some_and(|t| now - t < retention / 10) {
                return;
            }
            *last = Some(now);
        }
        conveyor.purge_catch_ups(now - retention);
    }
}

#[async_trait]
impl Station for CatchUpStation {
    fn name(&self) -> &str {
        "catch-up"
    }

    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        let ticks: Vec<(usize, Option<i64>)> = conveyor
            .open()
            .filter(|(_, m)| m.message.target_kind == TICK_KIND)
            .map(|(i, m)| (i, m.message.target_id.parse().ok()))
            .collect();
        // One step per job and stage. A job can have two ticks in one page (a resumed job's
        // tick written from the job as it was before a step, beside the step's own next
        // tick), and each would take its step from the job's stored cursor: the same page
        // replayed twice in one commit, once written as rows and once applied straight to
        // the states if what it found waiting changed in between (issue 37, seed 2912). The
        // step taken writes the job's next tick, so the others are consumed.
        let mut stepped = HashSet::new();
        for (index, job_id) in ticks {
            match job_id {
                Some(id) if !stepped.insert(id) => {
                    conveyor.record(index, Intent::Delivered { keep_until: None });
                }
                Some(id) => self.tick(conveyor, index, id).await?,
                None => conveyor.record(
                    index,
                    Intent::Drop {
                        reason: "catch-up tick with a job id that is not a number".into(),
                    },
                ),
            }
        }

        let jobs = self.running(conveyor).await?;
        if jobs.is_empty() {
            return Ok(());
        }
        let covered: Vec<(usize, SignalId, ShardIndex, &CatchUpJob)> = conveyor
            .open_with_status(MessageStatus::ToDeliver)
            .filter(|(_, m)| m.message.kind == MessageKind::Event)
            .filter_map(|(i, m)| {
                jobs.iter()
                    .find(|j| {
                        j.spec.projection_kind == m.message.target_kind
                            && covers(j, &m.message.tenant, &m.message.target_id)
                    })
                    .map(|j| (i, m.message.signal_id.clone(), m.shard, j))
            })
            .collect();
        if covered.is_empty() {
            return Ok(());
        }
        let env = conveyor.context().clone();
        let ids: Vec<SignalId> = covered.iter().map(|(_, id, _, _)| id.clone()).collect();
        let seqs: HashMap<SignalId, i64> = env.event_seqs(&ids).await?.into_iter().collect();
        let (mut dropped, mut parked, mut held) = (0usize, 0usize, 0usize);
        let again = conveyor.now() + env.config().poll_span();
        for (index, id, shard, job) in covered {
            let intent = match decide_job_live_row(job, seqs.get(&id).copied(), shard) {
                LiveRowDecision::Covered => {
                    dropped += 1;
                    Intent::Duplicate
                }
                LiveRowDecision::Park => {
                    parked += 1;
                    Intent::Hold {
                        until: parked_until(),
                    }
                }
                LiveRowDecision::Hold => {
                    held += 1;
                    Intent::Hold { until: again }
                }
                // Live delivery, after this station, delivers it.
                LiveRowDecision::Deliver => continue,
            };
            conveyor.record(index, intent);
        }
        tracing::debug!(dropped, parked, held, "live rows of targets under catch-up");
        Ok(())
    }
}

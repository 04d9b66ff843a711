//! The catch-up station: drives catch-up jobs and keeps live traffic of the projections being
//! rebuilt from overtaking (or doubling) the replay.
//!
//! ```text
//!  tick row of job J (in J's home shard) ─► one replay step:
//!      Started/InProgress: read catch_up_page_size events after the cursor, route them to
//!                          J's targets, apply them straight to the targets' states (or, if
//!                          one is not handled, write them as `to_catch_up` rows for live
//!                          delivery and its failure policy), advance the cursor, tick again
//!      Finalizing:         replayed rows left? tick again after a poll interval : complete
//!      cancel requested:   (any running status) no more reading; replayed rows left? tick
//!                          again after a poll interval : cancelled (settled as a completion)
//!  live event row of a target J rebuilds ─► its event seq <= J's cursor ? drop (covered by the
//!                                           replay) : park it until J completes
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

use crate::batches::{run_batches, Batch, InFlight};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardbox_core::catch_up::{
    apply_step, covers, decide_live_row, decide_step, needs_estimate, parked_until, replay_signal,
    replays, tick, LiveRowDecision, StepDecision, TICK_KIND,
};
use shardbox_core::storage::{CatchUpJob, EntityKey, EntityStateWrite};
use shardbox_core::sync::lock;
use shardbox_core::{
    Conveyor, DeliveryError, EntityHandler, InboxMessage, InboxWrite, Intent, LeaseEpoch,
    MessageKind, MessageOutcome, MessageStatus, NewMessage, ShardIndex, SignalId, Station,
    StationContext,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tracing::Instrument;

pub use shardbox_core::catch_up::TICK_TYPE;

/// The control row that makes job `job` take its next replay step at `due`.
pub fn tick_message(
    env: &StationContext,
    job: &CatchUpJob,
    due: Option<DateTime<Utc>>,
) -> InboxWrite {
    env.registry().address(tick(job, env.clock().now(), due))
}

/// Applies replayed `rows` straight to their targets' states (one load of all states, one
/// handler call per target, the states written with the stage) instead of writing them to the
/// Inbox. The targets run concurrently, as in live delivery (`run_batches`: at most
/// `handler_concurrency` at a time, each target's events in order). Returns the rows back,
/// recording nothing, if any message is not handled or anything is emitted: the caller then
/// writes them, so that the failure policy applies to them.
async fn apply_directly(
    conveyor: &mut Conveyor,
    env: &Arc<StationContext>,
    in_flight: &InFlight,
    handler: &Arc<dyn EntityHandler>,
    rows: Vec<InboxWrite>,
    now: DateTime<Utc>,
) -> Result<Option<Vec<InboxWrite>>, DeliveryError> {
    // Per target, its replayed messages in order (`seq` is the row's place in the page).
    let mut groups: BTreeMap<EntityKey, Vec<InboxMessage>> = BTreeMap::new();
    for (n, row) in rows.into_iter().enumerate() {
        let key = EntityKey {
            kind: row.message.target_kind.clone(),
            tenant: row.message.tenant.clone(),
            id: row.message.target_id.clone(),
        };
        groups
            .entry(key)
            .or_default()
            .push(InboxMessage::fresh(n as i64, row.shard, row.message));
    }
    let (keys, groups): (Vec<EntityKey>, Vec<Arc<[InboxMessage]>>) = groups
        .into_iter()
        .map(|(key, messages)| (key, messages.into()))
        .unzip();
    let mut states: HashMap<EntityKey, Vec<u8>> = HashMap::new();
    if handler.is_stateful() {
        for s in env.load_states(&keys).await? {
            states.insert(s.key, s.state);
        }
    }
    let batches = keys
        .iter()
        .zip(&groups)
        .map(|(key, messages)| Batch {
            handler: handler.clone(),
            state: states.remove(key),
            messages: messages.clone(),
        })
        .collect();
    let results = run_batches(env, in_flight, batches, now).await;
    let mut writes = Vec::with_capacity(keys.len());
    for (key, result) in keys.iter().zip(results) {
        let handled = result
            .outcomes
            .iter()
            .all(|o| matches!(o, MessageOutcome::Handled));
        if !handled || !result.events.is_empty() || !result.commands.is_empty() {
            tracing::warn!(kind = %key.kind, target = %key.id, "a replayed event was not handled (or emitted messages) in direct replay; this page goes through the Inbox, where the failure policy applies");
            let mut back: Vec<InboxMessage> =
                groups.iter().flat_map(|g| g.iter().cloned()).collect();
            back.sort_unstable_by_key(|m| m.seq);
            return Ok(Some(
                back.into_iter()
                    .map(|m| InboxWrite {
                        shard: m.shard,
                        message: m.message,
                    })
                    .collect(),
            ));
        }
        if let Some(state) = result.state {
            writes.push(EntityStateWrite {
                key: key.clone(),
                state: Some(state),
            });
        }
    }
    for w in writes {
        conveyor.set_state(w);
    }
    Ok(None)
}

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

    /// Whether this page of job `job` may be applied straight to the projections' states: only
    /// when none of its replayed rows (written by an earlier page that could not be applied
    /// directly) is left, so that each target still sees its events in order.
    async fn may_apply_directly(
        &self,
        conveyor: &Conveyor,
        env: &StationContext,
        job: &CatchUpJob,
    ) -> Result<bool, DeliveryError> {
        let kind = &job.spec.projection_kind;
        if conveyor
            .open_with_status(MessageStatus::ToCatchUp)
            .any(|(_, m)| &m.message.target_kind == kind)
        {
            return Ok(false);
        }
        let epoch = conveyor.lease().epoch;
        let known = lock(&self.spilled).get(&job.id).copied();
        if known == Some((epoch, false)) {
            return Ok(true);
        }
        // Cursor 0: replayed rows only (no live row carries an event seq <= 0).
        let pending = env
            .has_pending_replay(kind, &job.spec.tenant, &job.spec.affected_shards, 0)
            .await?;
        lock(&self.spilled).insert(job.id, (epoch, pending));
        Ok(!pending)
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

    /// One replay step of job `job_id`, driven by the tick row at `index`.
    async fn tick(
        &self,
        conveyor: &mut Conveyor,
        index: usize,
        job_id: i64,
    ) -> Result<(), DeliveryError> {
        let env = conveyor.context().clone();
        let now = conveyor.now();
        let Some(job) = env.catch_up(job_id).await? else {
            conveyor.record(index, Intent::Delivered { keep_until: None });
            return Ok(());
        };
        if !job.status.is_running() {
            conveyor.record(index, Intent::Delivered { keep_until: None });
            return Ok(());
        }
        let kind = job.spec.projection_kind.clone();
        let page_size = env.config().catch_up_page_size;
        if !replays(&job) {
            // History replayed, or a cancel requested: only wait for the replayed rows (and
            // the live rows the replay covered) to be settled. Needs no handler, so a job of
            // a projection no running node has can still be cancelled.
            let pending = env
                .has_pending_replay(
                    &kind,
                    &job.spec.tenant,
                    &job.spec.affected_shards,
                    job.cursor,
                )
                .await?;
            let decision = decide_step(&job, &[], page_size, u64::from(pending));
            self.finish_step(conveyor, &env, index, &job, decision, 0, now);
            return Ok(());
        }
        let Some(handler) = env.registry().handler(&kind).cloned() else {
            let poll = env.config().poll_span();
            tracing::warn!(job = job.id, %kind, "projection of a catch-up is not registered on this node; waiting for a node that has it");
            conveyor.record(index, Intent::Hold { until: now + poll });
            return Ok(());
        };
        let (decision, replayed, estimate) = {
            // Every type of the projection's set, in one `seq`-ordered read.
            let types: Vec<String> = handler
                .event_types()
                .iter()
                .map(|t| (*t).to_owned())
                .collect();
            let events = env
                .read_events(job.cursor, &types, job.spec.since, page_size)
                .await?;
            let estimate = if needs_estimate(&job) {
                Some(env.count_events(&types, job.spec.since).await?)
            } else {
                None
            };
            let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
            let mut rows = Vec::new();
            for stored in &events {
                let ids = match handler.route(&stored.event) {
                    Ok(ids) => ids,
                    Err(e) => {
                        tracing::error!(job = job.id, event = %stored.event.id, error = %e, "replayed event could not be routed; skipped");
                        continue;
                    }
                };
                for id in ids {
                    if !covers(&job, &stored.event.tenant, &id) {
                        continue;
                    }
                    rows.push(env.registry().address(NewMessage {
                        signal_id: SignalId(replay_signal(job.id, &stored.event.id.0)),
                        kind: MessageKind::CatchUp,
                        target_kind: kind.clone(),
                        target_id: id,
                        tenant: stored.event.tenant.clone(),
                        payload: stored.event.payload.clone(),
                        payload_type: stored.event.event_type.clone(),
                        metadata: stored.event.metadata.clone(),
                        received_at: now,
                        deliver_after: None,
                        expires_at: None,
                    }));
                }
            }
            let span = tracing::info_span!("catch-up page", job = job.id, %kind, after = job.cursor, events = events.len(), rows = rows.len());
            async {
                tracing::debug!("replaying");
            }
            .instrument(span)
            .await;
            let rows = if !rows.is_empty() && self.may_apply_directly(conveyor, &env, &job).await? {
                apply_directly(conveyor, &env, &self.in_flight, &handler, rows, now)
                    .await?
                    .unwrap_or_default()
            } else {
                rows
            };
            if !rows.is_empty() {
                lock(&self.spilled).insert(job.id, (conveyor.lease().epoch, true));
                conveyor.emit_messages(rows);
            }
            (
                decide_step(&job, &seqs, page_size, 0),
                events.len(),
                estimate,
            )
        };
        let mut job = job;
        if let Some(total) = estimate {
            // Stored with this step's job row (the row is stored whole).
            job.spec.total_estimate = total;
        }
        self.finish_step(conveyor, &env, index, &job, decision, replayed, now);
        Ok(())
    }

    /// Records what step `decision` does to `job`: the next tick, the job's new row, and the
    /// consumed tick row at `index`.
    #[allow(clippy::too_many_arguments)] // one step's parts, all needed
    fn finish_step(
        &self,
        conveyor: &mut Conveyor,
        env: &StationContext,
        index: usize,
        job: &CatchUpJob,
        decision: StepDecision,
        replayed: usize,
        now: DateTime<Utc>,
    ) {
        let kind = &job.spec.projection_kind;
        let next = apply_step(job, &decision, replayed, now);
        match decision {
            StepDecision::Replay { .. } => {
                conveyor.emit_messages(vec![tick_message(env, &next, None)]);
            }
            StepDecision::AwaitDelivery => {
                let poll = env.config().poll_span();
                conveyor.emit_messages(vec![tick_message(env, &next, Some(now + poll))]);
            }
            StepDecision::Complete => {
                lock(&self.spilled).remove(&job.id);
                tracing::info!(job = job.id, %kind, replayed = next.replayed, "catch-up completed");
            }
            StepDecision::Cancel => {
                lock(&self.spilled).remove(&job.id);
                tracing::info!(job = job.id, %kind, replayed = next.replayed, cursor = next.cursor, "catch-up cancelled; its targets are back on live delivery");
            }
        }
        if next != *job {
            conveyor.update_catch_up(next);
        }
        // Removed (not kept) so that the next tick, which may carry the same signal, can be
        // written in the same commit.
        conveyor.record(index, Intent::Delivered { keep_until: None });
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
        for (index, job_id) in ticks {
            match job_id {
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
        let covered: Vec<(usize, SignalId, &CatchUpJob)> = conveyor
            .open_with_status(MessageStatus::ToDeliver)
            .filter(|(_, m)| m.message.kind == MessageKind::Event)
            .filter_map(|(i, m)| {
                jobs.iter()
                    .find(|j| {
                        j.spec.projection_kind == m.message.target_kind
                            && covers(j, &m.message.tenant, &m.message.target_id)
                    })
                    .map(|j| (i, m.message.signal_id.clone(), j))
            })
            .collect();
        if covered.is_empty() {
            return Ok(());
        }
        let env = conveyor.context().clone();
        let ids: Vec<SignalId> = covered.iter().map(|(_, id, _)| id.clone()).collect();
        let seqs: HashMap<SignalId, i64> = env.event_seqs(&ids).await?.into_iter().collect();
        let (mut dropped, mut parked) = (0usize, 0usize);
        for (index, id, job) in covered {
            let intent = match decide_live_row(job.cursor, seqs.get(&id).copied()) {
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
            };
            conveyor.record(index, intent);
        }
        tracing::debug!(dropped, parked, "live rows of targets under catch-up");
        Ok(())
    }
}

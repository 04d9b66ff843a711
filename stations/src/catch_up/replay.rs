//! One replay step of a catch-up job, driven by its tick row: read the next page of history
//! after the job's cursor, route it to the job's targets, apply it (directly, or as rows for
//! live delivery), and record the job's next row and its next tick.
//!
//! ```text
//!  tick row ─► job gone or not running? consumed
//!           ─► not replaying (history done, cancel asked)? wait for the replayed rows to settle
//!           ─► projection not registered here? held a poll interval
//!           ─► replay_page: read ─► page_rows ─► direct replay, or rows written (spilled)
//!           ─► finish_step: next tick, the job's new row, the tick row consumed
//! ```
//!
//! What a step does to the job (the status machine, the cursor) is decided in
//! `shardbox_core::catch_up` (`decide_step`, `apply_step`); this module only reads and writes
//! what they decide, all on the Conveyor, so a step commits with the stage.

use super::direct::apply_directly;
use super::CatchUpStation;
use chrono::{DateTime, Utc};
use shardbox_core::catch_up::{
    apply_step, covers, decide_step, needs_estimate, replay_signal, replays, tick, StepDecision,
};
use shardbox_core::storage::{
    CatchUpJob, CatchUpStatus, CatchUpTargets, EntityKey, FailedBatch, InTransaction,
    TransactionError, TransactionalWork,
};
use shardbox_core::sync::lock;
use shardbox_core::{
    Conveyor, DeliveryError, EntityHandler, EntityRegistry, InTransactionApply, InboxWrite, Intent,
    MessageKind, MessageStatus, NewMessage, RebuildScope, SignalId, StationContext, StoredEvent,
};
use std::sync::Arc;
use tracing::Instrument;

/// The control row that makes job `job` take its next replay step at `due`.
pub fn tick_message(
    env: &StationContext,
    job: &CatchUpJob,
    due: Option<DateTime<Utc>>,
) -> InboxWrite {
    env.registry().address(tick(job, env.clock().now(), due))
}

/// What one page of a replay did: the step it leads to, how many events it read, and the
/// estimate of the job's total (read on its first page only).
struct ReplayedPage {
    decision: StepDecision,
    replayed: usize,
    estimate: Option<i64>,
}

/// The rows that replay `events` to the targets of `job` that `handler` routes them to: one
/// per covered target, with a signal unique to the job and the event. An event that cannot be
/// routed is logged and skipped.
fn page_rows(
    registry: &EntityRegistry,
    job: &CatchUpJob,
    handler: &Arc<dyn EntityHandler>,
    events: &[StoredEvent],
    now: DateTime<Utc>,
) -> Vec<InboxWrite> {
    let kind = &job.spec.projection_kind;
    let mut rows = Vec::new();
    for stored in events {
        let ids = match handler.route(&stored.event, registry.upcasters()) {
            Ok(ids) => ids,
            Err(e) => {
                tracing::error!(job = job.id, event = %stored.event.id, error = %e, "replayed event could not be routed; skipped");
                continue;
            }
        };
        for id in ids {
            if !covers(job, &stored.event.tenant, &id) {
                continue;
            }
            rows.push(registry.address(NewMessage {
                signal_id: SignalId(replay_signal(job.id, &stored.event.id.0)),
                kind: MessageKind::CatchUp,
                target_kind: kind.clone(),
                target_id: id,
                tenant: stored.event.tenant.clone(),
                payload: stored.event.payload.clone(),
                payload_type: stored.event.event_type.clone(),
                payload_version: stored.event.version,
                metadata: stored.event.metadata.clone(),
                received_at: now,
                deliver_after: None,
                expires_at: None,
            }));
        }
    }
    rows
}

impl CatchUpStation {
    /// One replay step of job `job_id`, driven by the tick row at `index`.
    pub(super) async fn tick(
        &self,
        conveyor: &mut Conveyor,
        index: usize,
        job_id: i64,
    ) -> Result<(), DeliveryError> {
        let env = conveyor.context().clone();
        let now = conveyor.now();
        let Some(mut job) = env.catch_up(job_id).await? else {
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
            return self.await_end(conveyor, &env, index, job, now).await;
        }
        let Some(handler) = env.registry().handler(&kind).cloned() else {
            let poll = env.config().poll_span();
            tracing::warn!(job = job.id, %kind, "projection of a catch-up is not registered on this node; waiting for a node that has it");
            conveyor.record(index, Intent::Hold { until: now + poll });
            return Ok(());
        };
        if let Some(spread) = &job.spread {
            if handler.in_transaction() {
                // Its tables are in every database; a reset in the home one's transaction
                // would leave the others' rows (see docs/clustering.md).
                tracing::error!(job = job.id, %kind, "a projection that writes in the commit's transaction cannot be rebuilt over several databases yet; the catch-up is cancelled, nothing was reset");
                self.finish_step(conveyor, &env, index, &job, StepDecision::Cancel, 0, now);
                return Ok(());
            }
            if !spread.prepared() {
                // The first step: its commit resets the targets in every database and reads
                // the set (`Databases`, around the commit); the replay starts at the next tick.
                step_again_now(conveyor, &env, index, job);
                return Ok(());
            }
        } else if job.status == CatchUpStatus::Started {
            // A projection in the application's tables empties what the replay writes again,
            // in this first step's transaction.
            if let Some(reset) = handler.rebuild_reset(rebuild_scope(&job)) {
                conveyor.in_transaction(InTransaction {
                    target: EntityKey {
                        kind: kind.clone(),
                        tenant: job.spec.tenant.clone(),
                        id: String::new(),
                    },
                    seqs: Vec::new(),
                    work: Arc::new(ResetWork(reset)),
                });
            }
        }
        if job.until_seq.is_none() {
            // The store's end as the first step sees it: the replay ends there, whatever is
            // appended meanwhile (its live copies wait, parked, for the completion). Stored
            // with this step's job row.
            job.until_seq = Some(env.last_event_seq().await?);
        }
        let page = self
            .replay_page(conveyor, &env, &job, &handler, page_size, now)
            .await?;
        if let Some(total) = page.estimate {
            // Stored with this step's job row (the row is stored whole).
            job.spec.total_estimate = total;
        }
        self.finish_step(
            conveyor,
            &env,
            index,
            &job,
            page.decision,
            page.replayed,
            now,
        );
        Ok(())
    }

    /// A step of `job` once its history is replayed or a cancel was requested: only waits for
    /// the replayed rows (and the live rows the replay covered) to be settled, then ends it.
    /// Needs no handler, so a job of a projection no running node has can still be cancelled.
    async fn await_end(
        &self,
        conveyor: &mut Conveyor,
        env: &Arc<StationContext>,
        index: usize,
        mut job: CatchUpJob,
        now: DateTime<Utc>,
    ) -> Result<(), DeliveryError> {
        let page_size = env.config().catch_up_page_size;
        let kind = job.spec.projection_kind.clone();
        let pending = if job.spread.is_some() {
            // Over several databases: the outboxes drained and every live copy of the
            // set decided, recorded step by step with the job. A step that recorded
            // something looks again at once; one that found nothing new waits a poll.
            let progress = env.spread_progress(&job).await?;
            let recorded = job.spread.as_ref() != Some(&progress.spread);
            job.spread = Some(progress.spread);
            if recorded && progress.pending {
                step_again_now(conveyor, env, index, job);
                return Ok(());
            }
            progress.pending
        } else {
            env.has_pending_replay(
                &kind,
                &job.spec.tenant,
                &job.spec.affected_shards,
                job.cursor,
            )
            .await?
        };
        let decision = decide_step(&job, &[], page_size, u64::from(pending));
        self.finish_step(conveyor, env, index, &job, decision, 0, now);
        Ok(())
    }

    /// Replays the page of history after `job`'s cursor: the rows of its events applied
    /// straight to the targets' states, or written for live delivery (and remembered as
    /// spilled) when they cannot be.
    async fn replay_page(
        &self,
        conveyor: &mut Conveyor,
        env: &Arc<StationContext>,
        job: &CatchUpJob,
        handler: &Arc<dyn EntityHandler>,
        page_size: usize,
        now: DateTime<Utc>,
    ) -> Result<ReplayedPage, DeliveryError> {
        let kind = &job.spec.projection_kind;
        // Every type of the projection's set, in one `seq`-ordered read.
        let types: Vec<String> = handler
            .event_types()
            .iter()
            .map(|t| (*t).to_owned())
            .collect();
        // Over several databases, the set the first step read (see `CatchUpSpread`).
        let set = job
            .spread
            .as_ref()
            .map(|s| s.events.as_slice())
            .unwrap_or(&[]);
        let events = env
            .read_events_within(job.cursor, set, &types, job.spec.since, page_size)
            .await?;
        let estimate = if needs_estimate(job) {
            Some(env.count_events(&types, job.spec.since).await?)
        } else {
            None
        };
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        let rows = page_rows(env.registry(), job, handler, &events, now);
        let span = tracing::info_span!("catch-up page", job = job.id, %kind, after = job.cursor, events = events.len(), rows = rows.len());
        async {
            tracing::debug!("replaying");
        }
        .instrument(span)
        .await;
        // A projection writing inside the commit's transaction is replayed through the Inbox:
        // its writes are settled by live delivery, under the failure policy. So is a job over
        // several databases: its targets' states are in theirs, not in this commit's.
        let direct = !rows.is_empty() && !handler.in_transaction() && job.spread.is_none();
        let rows = if direct && self.may_apply_directly(conveyor, env, job).await? {
            apply_directly(conveyor, env, &self.in_flight, handler, rows, now)
                .await?
                .unwrap_or_default()
        } else {
            rows
        };
        if !rows.is_empty() {
            lock(&self.spilled).insert(job.id, (conveyor.lease().epoch, true));
            conveyor.emit_messages(rows);
        }
        Ok(ReplayedPage {
            decision: decide_step(job, &seqs, page_size, 0),
            replayed: events.len(),
            estimate,
        })
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

/// Stores `job` as it is now (its storage acts on what it finds in it, around the commit; see
/// `CatchUpSpread`), consumes its tick row at `index` and ticks it again at once.
fn step_again_now(conveyor: &mut Conveyor, env: &StationContext, index: usize, job: CatchUpJob) {
    conveyor.emit_messages(vec![tick_message(env, &job, None)]);
    conveyor.update_catch_up(job);
    conveyor.record(index, Intent::Delivered { keep_until: None });
}

/// What job `job` rebuilds, as a projection's reset sees it.
fn rebuild_scope(job: &CatchUpJob) -> RebuildScope {
    RebuildScope {
        kind: job.spec.projection_kind.clone(),
        tenant: job.spec.tenant.clone(),
        ids: match &job.spec.targets {
            CatchUpTargets::All => None,
            CatchUpTargets::Ids(ids) => Some(ids.clone()),
        },
        since: job.spec.since,
    }
}

/// A rebuild's reset inside the step's transaction: it stands for no row, so its failure
/// fails the commit (the backend's rule for work with no rows).
struct ResetWork(InTransactionApply);

impl TransactionalWork for ResetWork {
    fn len(&self) -> usize {
        self.0 .0.len()
    }

    fn apply(&self, conn: &mut dyn std::any::Any, index: usize) -> Result<(), TransactionError> {
        self.0 .0.apply(conn, index).map_err(Into::into)
    }

    fn settle_failure(&self, _failed: usize, _error: TransactionError) -> FailedBatch {
        FailedBatch::default()
    }
}

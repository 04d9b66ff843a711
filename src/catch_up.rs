//! Starting and watching catch-ups from the facade.

use crate::shardbox::Shardbox;
use shardbox_core::catch_up::CatchUp;
use shardbox_core::operator::{self, CatchUpStart};
use shardbox_core::storage::WriteBatch;
use shardbox_core::{CatchUpProgress, DeliveryError, Projection};
use shardbox_stations::tick_message;
use std::time::Duration;
use tokio::sync::watch;

/// A running (or finished) catch-up job.
#[derive(Debug, Clone)]
pub struct CatchUpHandle {
    id: i64,
    shardbox: Shardbox,
}

impl CatchUpHandle {
    /// The job id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The job's progress now: events replayed of (estimated) total, rate, ETA, status.
    pub async fn progress(&self) -> Result<CatchUpProgress, DeliveryError> {
        self.shardbox.catch_up_progress(self.id).await
    }

    /// Asks the job to stop; see [`Shardbox::cancel_catch_up`].
    pub async fn cancel(&self) -> Result<CatchUpProgress, DeliveryError> {
        self.shardbox.cancel_catch_up(self.id).await
    }

    /// Waits until the job completes or is cancelled, checking every 20 ms, at most
    /// `timeout`; returns the last progress seen (check its `status`).
    pub async fn wait(&self, timeout: Duration) -> Result<CatchUpProgress, DeliveryError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let progress = self.progress().await?;
            if progress.status.is_finished() || tokio::time::Instant::now() >= deadline {
                return Ok(progress);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Shardbox {
    /// Rebuilds projection `P` — all instances or chosen ids, from a point in time — from the
    /// event store while live traffic flows. The targets' state is reset at once; their live
    /// events are held until the replay has passed them (or dropped when the replay already
    /// applied them), so the end state equals a fresh fold over the history.
    ///
    /// Refused with [`StorageError::CatchUpOverlap`] if a running catch-up of `P` overlaps,
    /// and with [`DeliveryError::InvalidInput`] if the tenant or an id breaks the id rules
    /// (an id empty, over [`MAX_ID_BYTES`](shardbox_core::MAX_ID_BYTES) or holding a NUL).
    pub async fn catch_up<P: Projection>(
        &self,
        request: CatchUp,
    ) -> Result<CatchUpHandle, DeliveryError> {
        self.catch_up_kind(P::KIND, request).await
    }

    /// Rebuilds the projection of kind `kind` as [`Shardbox::catch_up`] does: for a kind
    /// named at run time, or a [`SqlProjection`](crate::SqlProjection) (whose rebuild runs its
    /// `reset` in the first step's transaction, then writes the replayed events again).
    /// Refused with [`DeliveryError::UnknownKind`] if no kind of that name is registered
    /// here.
    pub async fn catch_up_kind(
        &self,
        kind: &str,
        request: CatchUp,
    ) -> Result<CatchUpHandle, DeliveryError> {
        self.start_catch_up(kind, request, None).await
    }

    /// Starts a catch-up of `kind` (see [`Shardbox::catch_up_kind`]); with `version_of`, one
    /// that builds a new version of that read model (see [`Shardbox::build_version`]).
    pub(crate) async fn start_catch_up(
        &self,
        kind: &str,
        request: CatchUp,
        version_of: Option<String>,
    ) -> Result<CatchUpHandle, DeliveryError> {
        let env = self.env();
        env.registry.check_registered(kind)?;
        let types: Vec<String> = env
            .registry
            .handler(kind)
            .map(|h| h.event_types().iter().map(|t| (*t).to_owned()).collect())
            .unwrap_or_default();
        let total_estimate = env.storage.count_events(&types, request.since).await?;
        let started = operator::start_catch_up(
            &*env.storage,
            env.registry.addressing(),
            CatchUpStart {
                projection_kind: kind.to_owned(),
                tenant: request.tenant,
                targets: request.targets,
                since: request.since,
                total_estimate,
                version_of,
            },
            env.clock.now(),
        )
        .await?;
        if let Some(shard) = started.tick_shard {
            env.notify(&[shard]);
        }
        Ok(CatchUpHandle {
            id: started.job.id,
            shardbox: self.clone(),
        })
    }

    /// The progress of catch-up job `id`.
    pub async fn catch_up_progress(&self, id: i64) -> Result<CatchUpProgress, DeliveryError> {
        let env = self.env();
        let job = env
            .storage
            .catch_up(id)
            .await?
            .ok_or_else(|| job_not_found(id))?;
        Ok(CatchUpProgress::of(&job, env.clock.now()))
    }

    /// Cancels running catch-up job `id` (from any node, or from the `shardbox catch-up
    /// cancel` command, which makes the same storage call).
    ///
    /// The cancel is recorded at once and carried out by the job's next step, on whichever
    /// node serves the shard of its tick (within a poll interval while it waits, at once
    /// while it replays): the replay stops where its cursor is, the replayed rows already in
    /// the Inbox are delivered, and then, in one fenced commit, the job ends
    /// [`CatchUpStatus::Cancelled`] and its parked live messages are settled as at a
    /// completion — those the replay already applied are removed, the others are delivered
    /// in `seq` order. So live delivery resumes for the targets with no message lost or
    /// doubled and each target's order kept. The targets keep the state the replay built up
    /// to its cursor plus the live events after it: history before the start that the replay
    /// had not reached is not applied, so a cancelled rebuild is partial until a new
    /// catch-up of the same targets runs (which the cancel no longer blocks).
    ///
    /// Returns the job's progress with `cancel_requested` set (the status is still a running
    /// one until that step; [`CatchUpHandle::wait`] waits for the end). A job whose last step
    /// committed before the request ends `Completed` instead: one of the two, never both.
    /// Refused with [`DeliveryError::NotFound`] for an unknown (or purged) job and with
    /// [`StorageError::CatchUpNotRunning`](shardbox_core::StorageError) for a job already
    /// completed or cancelled.
    pub async fn cancel_catch_up(&self, id: i64) -> Result<CatchUpProgress, DeliveryError> {
        let env = self.env();
        let now = env.clock.now();
        let job = operator::cancel_catch_up(&*env.storage, id, now).await?;
        // Wake the shards so that the job's next step (and the parked rows' release) comes
        // at once on this node's workers.
        let mut shards = job.spec.affected_shards.clone();
        shards.push(
            env.registry
                .shard_of(shardbox_core::catch_up::TICK_KIND, &id.to_string()),
        );
        env.notify(&shards);
        Ok(CatchUpProgress::of(&job, now))
    }

    /// Resumes every running catch-up at once, then, every lease duration until `stop`, those
    /// that took no step for a lease (see [`Shardbox::resume_catch_ups`]).
    pub(crate) async fn resume_catch_ups_periodically(self, mut stop: watch::Receiver<bool>) {
        let every = self.env().config.lease_duration;
        let mut stale_for = None;
        loop {
            if let Err(e) = self.resume_catch_ups(stale_for).await {
                tracing::warn!(error = %e, "could not check running catch-ups; trying again in a lease duration");
            }
            stale_for = Some(self.env().config.lease_span());
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped) => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Makes sure every running catch-up (with `stale_for`, only those whose last step is
    /// older than that) has its tick row: a job whose first tick was never written (the start
    /// crashed, or its write failed or lost its acknowledgement) would otherwise wait forever.
    /// Idempotent: a tick carries the job's id and cursor as its signal, so the tick of a job
    /// that has one is a duplicate and is not written.
    pub(crate) async fn resume_catch_ups(
        &self,
        stale_for: Option<chrono::Duration>,
    ) -> Result<(), DeliveryError> {
        let env = self.env();
        let now = env.clock.now();
        let jobs: Vec<_> = env
            .storage
            .running_catch_ups()
            .await?
            .into_iter()
            .filter(|j| stale_for.is_none_or(|d| j.updated_at <= now - d))
            .collect();
        if jobs.is_empty() {
            return Ok(());
        }
        for j in &jobs {
            tracing::info!(job = j.id, status = ?j.status, cursor = j.cursor, "resuming a catch-up (writing its tick)");
        }
        let ticks = jobs
            .iter()
            .map(|j| tick_message(env.station_context(), j, None))
            .collect();
        self.inbox()
            .write_batch(WriteBatch {
                events: vec![],
                messages: ticks,
            })
            .await?;
        Ok(())
    }
}

/// The error for a catch-up job that does not exist (the words the CLI and admin API use too).
fn job_not_found(id: i64) -> DeliveryError {
    DeliveryError::NotFound {
        what: format!("catch-up job {id}"),
        hint: shardbox_core::catch_up::PURGED_HINT.into(),
    }
}

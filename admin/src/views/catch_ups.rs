//! The catch-up views and actions: running jobs, one job's progress (replayed of total, rate,
//! ETA), starting a job and cancelling one — what the CLI prints and the JSON API serves.
//!
//! ```text
//!  start  ─► CatchUpStore::start_catch_up (the library's own call: overlap refused, targets
//!            reset, shards re-fenced) ─► the job's first tick in the Inbox ─► a node's
//!            catch-up station replays it (a node that has the projection)
//!  cancel ─► CatchUpStore::cancel_catch_up (a request; the job's next step carries it out)
//! ```
//!
//! Starting here has no application at hand, so it knows neither the projection's event
//! types nor the application's shard strategy. The job's first step, on a node that has the
//! projection, counts its events (the estimate; 0 until then). The shards are those of the
//! stable hash with the database's recorded shard count: right for every application that
//! keeps the default strategy. One with a custom `ShardStrategy` starts a catch-up of chosen
//! ids through `Shardbox::catch_up` (a catch-up of all instances affects every shard and is
//! right either way). Nothing stored says which kinds are projections (a projection added
//! to an application has no state and no row yet, which is when it is rebuilt): a kind no
//! node has waits, logged by the nodes at WARN, until it is cancelled.

use crate::error::AdminError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox_core::catch_up::{tick, PURGED_HINT};
use shardbox_core::storage::{CatchUpJob, CatchUpStatus, CatchUpTargets, NewCatchUp, WriteBatch};
use shardbox_core::{
    validate_id, CatchUpProgress, IdField, InboxWrite, ShardStrategy, StableHashStrategy, Storage,
};

/// One catch-up job and its progress.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpView {
    /// The job id.
    pub id: i64,
    /// The projection being rebuilt.
    pub projection_kind: String,
    /// Where the job is: `started`, `in_progress`, `finalizing`, `completed`, `cancelled`,
    /// or `cancelling` while a cancel request waits for the job's next step.
    pub status: &'static str,
    /// Whether an operator asked to cancel it.
    pub cancel_requested: bool,
    /// Events replayed so far.
    pub replayed: i64,
    /// Events to replay in all, estimated at the start (0 until the first step of a job
    /// started by the command line).
    pub total_estimate: i64,
    /// Events replayed per second since the start.
    pub rate: f64,
    /// Seconds left at that rate, if known.
    pub eta_s: Option<f64>,
}

impl CatchUpView {
    /// The view of `job` at `now`.
    pub fn of(job: &CatchUpJob, now: DateTime<Utc>) -> Self {
        let p = CatchUpProgress::of(job, now);
        let status = if p.cancel_requested && p.status.is_running() {
            "cancelling"
        } else {
            p.status.as_str()
        };
        CatchUpView {
            id: job.id,
            projection_kind: job.spec.projection_kind.clone(),
            status,
            cancel_requested: p.cancel_requested,
            replayed: p.replayed,
            total_estimate: p.total_estimate,
            rate: p.rate,
            eta_s: p.eta.map(|d| d.as_secs_f64()),
        }
    }

    /// Whether the job is over: completed or cancelled.
    pub fn finished(&self) -> bool {
        CatchUpStatus::FINISHED.contains(&self.status)
    }
}

/// The running catch-ups.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpList {
    /// Jobs not finished, oldest first.
    pub running: Vec<CatchUpView>,
}

/// The catch-ups not finished, at `now`.
pub async fn running(storage: &dyn Storage, now: DateTime<Utc>) -> Result<CatchUpList, AdminError> {
    let jobs = storage.running_catch_ups().await?;
    Ok(CatchUpList {
        running: jobs.iter().map(|j| CatchUpView::of(j, now)).collect(),
    })
}

/// The error for a job that does not exist, in the library's words.
fn not_found(id: i64) -> AdminError {
    AdminError::NotFound(format!("catch-up job {id} does not exist: {PURGED_HINT}"))
}

/// Job `id`'s progress at `now`, or [`AdminError::NotFound`].
pub async fn progress(
    storage: &dyn Storage,
    id: i64,
    now: DateTime<Utc>,
) -> Result<CatchUpView, AdminError> {
    let job = storage.catch_up(id).await?.ok_or_else(|| not_found(id))?;
    Ok(CatchUpView::of(&job, now))
}

/// Asks job `id` to stop (see `Shardbox::cancel_catch_up` for what a cancel does): the job
/// as it stands, `cancelling` until its next step on a node. [`AdminError::NotFound`] for
/// no such job; a finished one is refused with the library's
/// `StorageError::CatchUpNotRunning`.
pub async fn cancel(
    storage: &dyn Storage,
    id: i64,
    now: DateTime<Utc>,
) -> Result<CatchUpView, AdminError> {
    let job = storage
        .cancel_catch_up(id, now)
        .await?
        .ok_or_else(|| not_found(id))?;
    Ok(CatchUpView::of(&job, now))
}

/// A catch-up to start: a projection kind, its tenant, chosen ids (every instance if none),
/// and from when.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The projection kind (its `Projection::KIND`).
    pub projection_kind: String,
    /// The tenant of the instances (empty for a single-tenant application).
    #[serde(default)]
    pub tenant: String,
    /// Only these instance ids; every instance if absent.
    #[serde(default)]
    pub ids: Option<Vec<String>>,
    /// Replay only events that occurred at or after this time.
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
}

/// Starts the catch-up `request` at `now` through the library's own storage call (an
/// overlapping running job refuses it with `StorageError::CatchUpOverlap`), then writes its
/// first tick for the nodes. See the module doc for what it cannot know.
pub async fn start(
    storage: &dyn Storage,
    request: &StartRequest,
    now: DateTime<Utc>,
) -> Result<CatchUpView, AdminError> {
    let refused = |e: shardbox_core::InvalidId| AdminError::Refused(e.to_string());
    validate_id(IdField::TargetKind, &request.projection_kind).map_err(refused)?;
    validate_id(IdField::Tenant, &request.tenant).map_err(refused)?;
    let targets = match &request.ids {
        None => CatchUpTargets::All,
        Some(ids) if ids.is_empty() => {
            return Err(AdminError::Refused(
                "ids: give at least one id, or none at all to rebuild every instance".into(),
            ))
        }
        Some(ids) => {
            for id in ids {
                validate_id(IdField::TargetId, id).map_err(refused)?;
            }
            let mut ids = ids.clone();
            ids.sort();
            ids.dedup();
            CatchUpTargets::Ids(ids)
        }
    };
    let shards = storage.recorded_shard_count().await?.ok_or_else(|| {
        AdminError::Refused(
            "the database has no recorded shard count: no node has run on it yet (start the application once, then the catch-up)".into(),
        )
    })?;
    let strategy = StableHashStrategy::new();
    let affected = shardbox_core::catch_up::affected_shards(
        &targets,
        &request.projection_kind,
        shards,
        |kind, id| strategy.shard_of(kind, id, shards),
    );
    // Refused if the Inbox is re-sharded before the start commits (asked again, it is
    // computed by the new count).
    let job = storage
        .start_catch_up(
            NewCatchUp {
                projection_kind: request.projection_kind.clone(),
                tenant: request.tenant.clone(),
                targets,
                since: request.since,
                affected_shards: affected,
                // Counted by the first step, on a node that knows the projection's event types.
                total_estimate: 0,
                created_at: now,
            },
            shards,
        )
        .await?;
    let first = tick(&job, now, None);
    let shard = strategy.shard_of(&first.target_kind, &first.target_id, shards);
    storage
        .write(WriteBatch {
            events: vec![],
            messages: vec![InboxWrite {
                shard,
                message: first,
            }],
        })
        .await?;
    Ok(CatchUpView::of(&job, now))
}

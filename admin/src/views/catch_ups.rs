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
//! Starting from a tool (the CLI, a standalone server) has no application at hand, so it
//! knows neither the projection's event types nor the application's shard strategy. The
//! job's first step, on a node that has the projection, counts its events (the estimate; 0
//! until then). The shards are placed by the strategy the database records (every node
//! records its own when it is built); an application with its own `ShardStrategy` is refused
//! there and starts catch-ups through `Shardbox::catch_up` or the surface mounted in it
//! (`Shardbox::admin_state`), which place by the application's strategy.
//!
//! A start deletes the projection's states at once (they are rebuilt by the replay), so it
//! is refused — unless forced — when no live node registers the kind as a projection (every
//! node records its kinds in the membership; `operator::check_projection_served`): a
//! misspelled kind, another role's kind, or a projection whose nodes are all down would
//! leave the read model empty until such a node runs. A dry run ([`preview`]) says what a
//! start would touch without starting it.

use crate::error::AdminError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox_core::catch_up::PURGED_HINT;
use shardbox_core::operator::{self, CatchUpStart};
use shardbox_core::storage::{CatchUpJob, CatchUpStatus, CatchUpStore, CatchUpTargets};
use shardbox_core::{Addressing, CatchUpProgress, DeliveryError, IdField, KindRole, WorkRegistry};

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
    /// The read model whose next version the job builds beside the served one (blue/green;
    /// its completion switches the model), if it builds one.
    pub version_of: Option<String>,
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
            version_of: job.spec.version_of.clone(),
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
pub async fn running<S: CatchUpStore + ?Sized>(
    storage: &S,
    now: DateTime<Utc>,
) -> Result<CatchUpList, AdminError> {
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
pub async fn progress<S: CatchUpStore + ?Sized>(
    storage: &S,
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
pub async fn cancel<S: CatchUpStore + ?Sized>(
    storage: &S,
    id: i64,
    now: DateTime<Utc>,
) -> Result<CatchUpView, AdminError> {
    let job = operator::cancel_catch_up(storage, id, now).await?;
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
    /// Start it although no live node registers the kind as a projection.
    #[serde(default)]
    pub force: bool,
    /// Only say what the start would touch ([`preview`]); start nothing.
    #[serde(default)]
    pub dry_run: bool,
}

impl StartRequest {
    /// Its targets, or why they are refused (the kind and tenant checked by the id rules
    /// first, as the start checks them).
    fn targets(&self) -> Result<CatchUpTargets, AdminError> {
        shardbox_core::validate_id(IdField::TargetKind, &self.projection_kind)
            .map_err(DeliveryError::from)?;
        shardbox_core::validate_id(IdField::Tenant, &self.tenant).map_err(DeliveryError::from)?;
        match &self.ids {
            None => Ok(CatchUpTargets::All),
            Some(ids) if ids.is_empty() => Err(AdminError::Refused(
                "ids: give at least one id, or none at all to rebuild every instance".into(),
            )),
            Some(ids) => {
                let mut ids = ids.clone();
                ids.sort();
                ids.dedup();
                Ok(CatchUpTargets::Ids(ids))
            }
        }
    }
}

/// What a catch-up start would touch (a dry run: nothing was started).
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpPreview {
    /// Always true: this is what would happen, not what happened.
    pub dry_run: bool,
    /// The projection kind.
    pub projection_kind: String,
    /// The tenant of its instances.
    pub tenant: String,
    /// The instances whose states would be deleted at once and rebuilt; `None`: every one.
    pub ids: Option<Vec<String>>,
    /// Whether a live node registers the kind as a projection (else a start is refused
    /// unless forced).
    pub served: bool,
    /// Why it is not served, and what to do (see `served`).
    pub refusal: Option<String>,
    /// The live nodes that register the projection.
    pub nodes: Vec<String>,
    /// The shards whose messages to these targets would wait while the replay runs.
    pub shards: Vec<u32>,
}

/// Whether a live node at `now` registers `kind` as a projection: `Ok` with those nodes, or
/// the refusal (`operator::check_projection_served`).
async fn served<S>(
    storage: &S,
    kind: &str,
    now: DateTime<Utc>,
) -> Result<Result<Vec<String>, DeliveryError>, AdminError>
where
    S: WorkRegistry + ?Sized,
{
    let members = storage.members(now).await?;
    Ok(operator::check_projection_served(&members, kind).map(|()| {
        members
            .iter()
            .filter(|m| {
                m.kinds
                    .iter()
                    .any(|k| k.kind == kind && k.role == KindRole::Projection)
            })
            .map(|m| m.node_id.0.clone())
            .collect()
    }))
}

/// What starting `request` at `now` would touch: its targets, whether a live node serves the
/// projection, and the shards held during the replay (placed as a start would place them).
pub async fn preview<S>(
    storage: &S,
    request: &StartRequest,
    app: Option<&Addressing>,
    now: DateTime<Utc>,
) -> Result<CatchUpPreview, AdminError>
where
    S: shardbox_core::Storage + ?Sized,
{
    let targets = request.targets()?;
    let recorded;
    let addressing = match app {
        Some(addressing) => addressing,
        None => {
            recorded = operator::placement::recorded_addressing(storage).await?;
            &recorded
        }
    };
    let (served, refusal, nodes) = match served(storage, &request.projection_kind, now).await? {
        Ok(nodes) => (true, None, nodes),
        Err(e) => (false, Some(e.to_string()), Vec::new()),
    };
    let mut shards: Vec<u32> = match &targets {
        CatchUpTargets::All => (0..addressing.shard_count()).collect(),
        CatchUpTargets::Ids(ids) => ids
            .iter()
            .map(|id| addressing.shard_of(&request.projection_kind, id).0)
            .collect(),
    };
    shards.sort_unstable();
    shards.dedup();
    Ok(CatchUpPreview {
        dry_run: true,
        projection_kind: request.projection_kind.clone(),
        tenant: request.tenant.clone(),
        ids: match targets {
            CatchUpTargets::All => None,
            CatchUpTargets::Ids(ids) => Some(ids),
        },
        served,
        refusal,
        nodes,
        shards,
    })
}

/// Starts the catch-up `request` at `now` through the library's own start
/// (`operator::start_catch_up`: an overlapping running job refuses it with
/// `StorageError::CatchUpOverlap`), its shards placed by `app`'s addressing when the surface
/// runs in the application, else by the strategy the database records — refused for an
/// application's own strategy, which a tool cannot rebuild. Unless `request.force`, refused
/// with `DeliveryError::NotServed` when no live node registers the kind as a projection.
/// See the module doc for what it cannot know.
pub async fn start<S>(
    storage: &S,
    request: &StartRequest,
    app: Option<&Addressing>,
    now: DateTime<Utc>,
) -> Result<CatchUpView, AdminError>
where
    S: shardbox_core::Storage + ?Sized,
{
    let targets = request.targets()?;
    if !request.force {
        served(storage, &request.projection_kind, now).await??;
    }
    let recorded;
    let addressing = match app {
        Some(addressing) => addressing,
        None => {
            recorded = operator::placement::recorded_addressing(storage).await?;
            &recorded
        }
    };
    let started = operator::start_catch_up(
        storage,
        addressing,
        CatchUpStart {
            projection_kind: request.projection_kind.clone(),
            tenant: request.tenant.clone(),
            targets,
            since: request.since,
            // Counted by the first step, on a node that knows the projection's event types.
            total_estimate: 0,
            version_of: None,
        },
        now,
    )
    .await?;
    Ok(CatchUpView::of(&started.job, now))
}

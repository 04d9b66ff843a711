//! The catch-up views: running jobs and one job's progress (replayed of total, rate, ETA).
//!
//! Starting a catch-up needs the projection's code, which only the application has
//! (`Shardbox::catch_up`); the library has no cancel yet. So these views only read.

use crate::error::AdminError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use shardbox_core::storage::CatchUpJob;
use shardbox_core::{CatchUpProgress, Storage};

/// One catch-up job and its progress.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpView {
    /// The job id.
    pub id: i64,
    /// The projection being rebuilt.
    pub projection_kind: String,
    /// Where the job is (`running`, `completed`, …).
    pub status: &'static str,
    /// Events replayed so far.
    pub replayed: i64,
    /// Events to replay in all, estimated at the start.
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
        CatchUpView {
            id: job.id,
            projection_kind: job.spec.projection_kind.clone(),
            status: p.status.as_str(),
            replayed: p.replayed,
            total_estimate: p.total_estimate,
            rate: p.rate,
            eta_s: p.eta.map(|d| d.as_secs_f64()),
        }
    }

    /// Whether the job has completed.
    pub fn completed(&self) -> bool {
        self.status == shardbox_core::storage::CatchUpStatus::Completed.as_str()
    }
}

/// The running catch-ups.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpList {
    /// Jobs not completed, oldest first.
    pub running: Vec<CatchUpView>,
}

/// The catch-ups not completed, at `now`.
pub async fn running(storage: &dyn Storage, now: DateTime<Utc>) -> Result<CatchUpList, AdminError> {
    let jobs = storage.running_catch_ups().await?;
    Ok(CatchUpList {
        running: jobs.iter().map(|j| CatchUpView::of(j, now)).collect(),
    })
}

/// Job `id`'s progress at `now`, or [`AdminError::NotFound`].
pub async fn progress(
    storage: &dyn Storage,
    id: i64,
    now: DateTime<Utc>,
) -> Result<CatchUpView, AdminError> {
    let job = storage.catch_up(id).await?.ok_or_else(|| {
        AdminError::NotFound(format!(
            "no catch-up job {id} (completed jobs are purged after catch_up_retention)"
        ))
    })?;
    Ok(CatchUpView::of(&job, now))
}

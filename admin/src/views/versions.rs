//! Read models' versions (blue/green rebuilds): which projection kind serves each read model,
//! which one is being built beside it and by which catch-up job, which one served before the
//! last switch. The build's progress is its catch-up job's (see [`super::catch_ups`], whose
//! views name the model a job builds a version of).

use crate::error::AdminError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use shardbox_core::storage::ReadModelVersion;
use shardbox_core::CatchUpStore;

/// One read model's versions.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReadModelView {
    /// The read model (the kind that served it first).
    pub model: String,
    /// The projection kind serving reads now.
    pub served: String,
    /// The kind being built beside it, if a build runs.
    pub building: Option<String>,
    /// The catch-up job building it.
    pub building_job: Option<i64>,
    /// The kind served before the last switch, until it is retired.
    pub previous: Option<String>,
    /// When the last switch happened.
    pub switched_at: Option<DateTime<Utc>>,
}

impl ReadModelView {
    /// The view of a stored record.
    pub fn of(v: &ReadModelVersion) -> Self {
        ReadModelView {
            model: v.model.clone(),
            served: v.served.clone(),
            building: v.building.clone(),
            building_job: v.building_job,
            previous: v.previous.clone(),
            switched_at: v.switched_at,
        }
    }
}

/// Every read model that was ever built beside, by name.
pub async fn list<S: CatchUpStore + ?Sized>(storage: &S) -> Result<Vec<ReadModelView>, AdminError> {
    Ok(storage
        .read_model_versions()
        .await?
        .iter()
        .map(ReadModelView::of)
        .collect())
}

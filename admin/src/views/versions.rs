//! Read models' versions (blue/green rebuilds): which projection kind serves each read model,
//! which one is being built beside it and by which catch-up job, which one served before the
//! last switch. The build's progress is its catch-up job's (see [`super::catch_ups`], whose
//! views name the model a job builds a version of).

use crate::error::AdminError;
use shardbox_core::storage::ReadModelVersion;
use shardbox_core::CatchUpStore;

/// Every read model that was ever built beside, by name, as stored.
pub async fn list<S: CatchUpStore + ?Sized>(
    storage: &S,
) -> Result<Vec<ReadModelVersion>, AdminError> {
    Ok(storage.read_model_versions().await?)
}

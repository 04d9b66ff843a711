//! Read-model version cases (blue/green rebuilds): a version's catch-up records its build on
//! the model's record in its start's transaction, refused (writing nothing) while another
//! build runs or for the served kind; storing the job completed switches the model, cancelled
//! drops the build; a retire refuses the served kind and forgets the previous one.

use super::catch_up::spec;
use super::fixtures::*;
use shardbox_core::storage::{CatchUpJob, CatchUpStatus, CatchUpTargets, ReadModelVersion};
use shardbox_core::{Storage, StorageError};

fn refused<T: std::fmt::Debug>(result: Result<T, StorageError>, what: &str) {
    assert!(
        matches!(result, Err(StorageError::VersionRefused { .. })),
        "{what}: {result:?}"
    );
}

async fn record<S: Storage>(store: &S, model: &str) -> ReadModelVersion {
    store
        .read_model_versions()
        .await
        .expect("versions")
        .into_iter()
        .find(|v| v.model == model)
        .unwrap_or_else(|| ReadModelVersion::first(model))
}

/// Starts a build of `kind` as `model`'s next version.
async fn build<S: Storage>(store: &S, model: &str, kind: &str) -> Result<CatchUpJob, StorageError> {
    let mut job = spec(kind, "", CatchUpTargets::All);
    job.version_of = Some(model.into());
    store.start_catch_up(job, SHARDS).await
}

/// Stores `job` ended `status` at second `at`.
async fn end<S: Storage>(store: &S, job: &CatchUpJob, status: CatchUpStatus, at: i64) {
    let mut ended = job.clone();
    ended.status = status;
    ended.finished_at = Some(secs(at));
    ended.updated_at = secs(at);
    store.update_catch_up(&ended).await.expect("store the end");
}

/// The lifecycle of a model's versions, as every backend must keep it.
pub async fn a_version_build_switches_at_completion_and_is_dropped_by_a_cancel<S: Storage>(
    store: S,
) {
    assert_eq!(store.read_model_versions().await.expect("none"), vec![]);
    let job = build(&store, "list", "list-v2").await.expect("build v2");
    assert_eq!(job.spec.version_of.as_deref(), Some("list"));
    let stored = store.catch_up(job.id).await.expect("read").expect("stored");
    assert_eq!(
        stored.spec.version_of.as_deref(),
        Some("list"),
        "kept with the job"
    );
    let building = record(&store, "list").await;
    assert_eq!(
        (
            building.served.as_str(),
            building.building.as_deref(),
            building.building_job
        ),
        ("list", Some("list-v2"), Some(job.id))
    );
    // Refused, with nothing written: a second build while one runs, the served kind.
    refused(build(&store, "list", "list-v3").await, "a second build");
    refused(build(&store, "list", "list").await, "the served kind");
    assert_eq!(
        store.running_catch_ups().await.expect("running").len(),
        1,
        "a refused start leaves no job"
    );
    assert_eq!(record(&store, "list").await, building);

    end(&store, &job, CatchUpStatus::Completed, 9).await;
    let switched = record(&store, "list").await;
    assert_eq!(
        (
            switched.served.as_str(),
            switched.previous.as_deref(),
            switched.building.as_deref(),
            switched.building_job,
            switched.switched_at
        ),
        ("list-v2", Some("list"), None, None, Some(secs(9)))
    );

    let job = build(&store, "list", "list-v3").await.expect("build v3");
    end(&store, &job, CatchUpStatus::Cancelled, 12).await;
    assert_eq!(
        record(&store, "list").await,
        switched,
        "a cancel drops the build only"
    );

    refused(
        store.retire_version("list", "list-v2").await,
        "the served kind",
    );
    assert_eq!(
        store.retire_version("list", "list").await.expect("retire"),
        0
    );
    assert_eq!(
        record(&store, "list").await.previous,
        None,
        "forgotten once retired"
    );
}

//! Catch-up job cases: start, overlap refusal, updates, completion, purge, concurrent starts.

use super::fixtures::*;
use crate::Inspect;
use shardbox_core::storage::{CatchUpJob, CatchUpStatus, CatchUpTargets, NewCatchUp};
use shardbox_core::{ShardIndex, Storage, StorageError};
use std::sync::Arc;

fn spec(kind: &str, tenant: &str, targets: CatchUpTargets) -> NewCatchUp {
    NewCatchUp {
        projection_kind: kind.into(),
        tenant: tenant.into(),
        targets,
        since: Some(secs(5)),
        affected_shards: vec![ShardIndex(1), ShardIndex(3)],
        total_estimate: 42,
        created_at: secs(0),
    }
}

fn ids(ids: &[&str]) -> CatchUpTargets {
    CatchUpTargets::Ids(ids.iter().map(|s| s.to_string()).collect())
}

fn overlap_with(result: Result<CatchUpJob, StorageError>) -> i64 {
    match result {
        Err(StorageError::CatchUpOverlap { running_job, .. }) => running_job,
        other => panic!("expected CatchUpOverlap, got {other:?}"),
    }
}

/// A job starts `Started`; overlapping starts are refused naming the running job; others
/// start; updates are stored; completed jobs stop blocking and are purged after their time.
pub async fn catch_up_lifecycle<S: Storage + Inspect>(store: S) {
    let asked = spec("balances", "", ids(&["a", "b"]));
    let first = store.start_catch_up(asked.clone()).await.expect("start");
    assert_eq!(first.spec, asked);
    assert_eq!(first.status, CatchUpStatus::Started);
    assert_eq!((first.cursor, first.replayed), (0, 0));
    assert_eq!(
        (first.updated_at, first.finished_at),
        (asked.created_at, None)
    );
    assert_eq!(
        store.catch_up(first.id).await.expect("get"),
        Some(first.clone())
    );
    assert_eq!(
        store.running_catch_ups().await.expect("running"),
        vec![first.clone()]
    );

    let refused = store
        .start_catch_up(spec("balances", "", ids(&["b", "c"])))
        .await;
    assert_eq!(overlap_with(refused), first.id);
    let refused = store
        .start_catch_up(spec("balances", "", CatchUpTargets::All))
        .await;
    assert_eq!(overlap_with(refused), first.id);

    let disjoint = store
        .start_catch_up(spec("balances", "", ids(&["c"])))
        .await
        .expect("disjoint ids start");
    let other_tenant = store
        .start_catch_up(spec("balances", "t2", ids(&["a"])))
        .await
        .expect("another tenant starts");
    let other_kind = store
        .start_catch_up(spec("ledger", "", CatchUpTargets::All))
        .await
        .expect("another kind starts");
    let mut started = [first.id, disjoint.id, other_tenant.id, other_kind.id];
    started.sort_unstable();
    assert!(
        started.windows(2).all(|w| w[0] < w[1]),
        "distinct ids {started:?}"
    );

    let mut progressed = first.clone();
    progressed.status = CatchUpStatus::InProgress;
    progressed.cursor = 17;
    progressed.replayed = 5;
    progressed.spec.total_estimate = 40;
    progressed.updated_at = secs(9);
    store.update_catch_up(&progressed).await.expect("update");
    assert_eq!(
        store.catch_up(first.id).await.expect("get"),
        Some(progressed.clone())
    );

    let mut done = progressed.clone();
    done.status = CatchUpStatus::Completed;
    done.updated_at = secs(10);
    done.finished_at = Some(secs(10));
    store.update_catch_up(&done).await.expect("update");
    let running: Vec<i64> = store
        .running_catch_ups()
        .await
        .expect("running")
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(running, [disjoint.id, other_tenant.id, other_kind.id]);
    let again = store
        .start_catch_up(spec("balances", "", ids(&["a"])))
        .await
        .expect("a completed job no longer blocks");

    let mut ghost = done.clone();
    ghost.id = again.id + 1_000;
    let err = store
        .update_catch_up(&ghost)
        .await
        .expect_err("unknown job");
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");

    assert_eq!(store.purge_catch_ups(secs(10)).await.expect("purge"), 0);
    assert_eq!(store.purge_catch_ups(secs(11)).await.expect("purge"), 1);
    assert_eq!(store.catch_up(first.id).await.expect("get"), None);
    assert_eq!(store.running_catch_ups().await.expect("running").len(), 4);
}

/// Of many overlapping catch-ups started at the same instant, exactly one starts; the others
/// are refused naming it.
pub async fn concurrent_overlapping_catch_up_starts_one_wins<S: Storage + Inspect>(store: S) {
    const STARTERS: usize = 8;
    let store = Arc::new(store);
    let barrier = Arc::new(tokio::sync::Barrier::new(STARTERS));
    let mut tasks = Vec::new();
    for i in 0..STARTERS {
        let store = Arc::clone(&store);
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            let targets = if i % 2 == 0 {
                CatchUpTargets::All
            } else {
                ids(&["a", &format!("only-{i}")])
            };
            barrier.wait().await;
            store.start_catch_up(spec("balances", "", targets)).await
        }));
    }
    let mut winners = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            Ok(job) => winners.push(job),
            Err(StorageError::CatchUpOverlap { running_job, .. }) => refused.push(running_job),
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(refused, vec![winners[0].id; STARTERS - 1]);
    assert_eq!(store.running_catch_ups().await.expect("running").len(), 1);
}

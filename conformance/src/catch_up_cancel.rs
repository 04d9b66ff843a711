//! Catch-up cancel cases: the request is stamped on a running job only, survives every store
//! of the job by a step that read it before, and a job stored `Cancelled` settles its parked
//! rows like a completion, stops blocking other jobs and is purged like one.

use super::catch_up::{ids, spec};
use super::fixtures::*;
use shardbox_core::catch_up::parked_until;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{CatchUpJob, CatchUpStatus, Lease, RowChange, RowUpdate, WriteBatch};
use shardbox_core::{ShardIndex, Storage, StorageError, WorkerId};
use std::collections::HashMap;

fn not_running(result: Result<impl std::fmt::Debug, StorageError>, id: i64, status: &str) {
    match result {
        Err(StorageError::CatchUpNotRunning { job, status: s }) => {
            assert_eq!((job, s.as_str()), (id, status));
        }
        other => panic!("expected CatchUpNotRunning({status}), got {other:?}"),
    }
}

/// A cancel request is stamped once on a running job (an earlier request's time kept); a step
/// that stores the job afterwards, by itself or in a stage commit, keeps it; storing the job
/// `Cancelled` in a stage removes the parked rows the replay covered, makes the others due in
/// `seq` order and re-fences the other affected shards; a cancelled job no longer runs, no
/// longer blocks an overlapping start, refuses a second cancel and is purged after its time.
pub async fn a_cancelled_catch_up_settles_like_a_completion<S: Storage + Inspect>(store: S) {
    let job = store
        .start_catch_up(spec("balances", "", ids(&["x", "y"])), SHARDS)
        .await
        .expect("start");
    assert_eq!(job.cancel_requested_at, None);
    assert_eq!(
        store
            .cancel_catch_up(job.id + 1_000, secs(1))
            .await
            .expect("cancel"),
        None,
        "an unknown job is not found"
    );
    let (lease, seqs) = park_live_rows(&store).await;
    let (stepped, home) = request_then_store_a_step(&store, &job, &seqs).await;
    cancel_in_a_stage(&store, &stepped, &lease, &home).await;
    finished_jobs_refuse_a_cancel_and_are_purged(&store, job.id).await;
}

/// Live rows of the job's targets in shard 1, parked by the job while it runs (as in the
/// completion case): the lease that parked them, and their events' seqs.
async fn park_live_rows<S: Storage + Inspect>(store: &S) -> (Lease, HashMap<String, i64>) {
    let live = |signal: &str, target: &str| {
        with(command(1, target, signal), |m| {
            m.kind = shardbox_core::MessageKind::Event;
            m.target_kind = "balances".into();
        })
    };
    let names = ["ev-1", "ev-2", "ev-3", "ev-4"];
    store
        .write(WriteBatch {
            events: names
                .iter()
                .map(|n| event(n, "balances.event", secs(1)))
                .collect(),
            messages: vec![
                live("ev-1", "x"),
                live("ev-2", "y"),
                live("ev-3", "x"),
                live("ev-4", "y"),
            ],
        })
        .await
        .expect("write");
    let seqs = event_seqs_by_id(store, &names).await;
    let lease = store
        .pick_up(ShardIndex(1), &node("a"), WorkerId(0), secs(2), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    let page = store
        .read_page(ShardIndex(1), secs(2), 10)
        .await
        .expect("page");
    let park = page
        .messages
        .iter()
        .map(|m| RowUpdate {
            seq: m.seq,
            change: RowChange::Hold {
                until: parked_until(),
            },
        })
        .collect();
    store
        .commit_stage(stage(&lease, secs(2), park))
        .await
        .expect("park");
    (lease, seqs)
}

/// A cancel is requested (twice: the first time kept) while a step that read the job before
/// stores it, by itself and in a stage commit of shard 3: both keep the request. Returns the
/// step's job and shard 3's lease.
async fn request_then_store_a_step<S: Storage + Inspect>(
    store: &S,
    job: &CatchUpJob,
    seqs: &HashMap<String, i64>,
) -> (CatchUpJob, Lease) {
    // The step that will store the job read it before the request.
    let mut stepped = job.clone();
    stepped.status = CatchUpStatus::InProgress;
    stepped.cursor = seqs["ev-1"];
    stepped.replayed = 1;
    stepped.updated_at = secs(3);

    let asked = store
        .cancel_catch_up(job.id, secs(3))
        .await
        .expect("cancel")
        .expect("found");
    assert_eq!(asked.cancel_requested_at, Some(secs(3)));
    assert_eq!(asked.status, CatchUpStatus::Started, "only a request");
    let again = store
        .cancel_catch_up(job.id, secs(4))
        .await
        .expect("cancel")
        .expect("found");
    assert_eq!(
        again.cancel_requested_at,
        Some(secs(3)),
        "first request kept"
    );

    store.update_catch_up(&stepped).await.expect("update");
    let stored = store.catch_up(job.id).await.expect("get").expect("found");
    assert_eq!(
        (stored.status, stored.cursor, stored.cancel_requested_at),
        (CatchUpStatus::InProgress, seqs["ev-1"], Some(secs(3))),
        "a step's store keeps the request"
    );
    let home = store
        .pick_up(ShardIndex(3), &node("a"), WorkerId(1), secs(4), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    let mut commit = stage(&home, secs(4), vec![]);
    stepped.updated_at = secs(4);
    commit.catch_ups = vec![stepped.clone()];
    store.commit_stage(commit).await.expect("step");
    assert_eq!(
        store
            .catch_up(job.id)
            .await
            .expect("get")
            .and_then(|j| j.cancel_requested_at),
        Some(secs(3)),
        "a stage's store keeps the request"
    );
    assert_eq!(store.running_catch_ups().await.expect("running").len(), 1);
    (stepped, home)
}

/// The job stored `Cancelled` in a stage of shard 3 (`home`), the cursor past ev-1 only: the
/// covered row is removed, the others due in `seq` order, shard 1's `lease` re-fenced, the
/// job no longer running, a second cancel refused, and an overlapping start accepted.
async fn cancel_in_a_stage<S: Storage + Inspect>(
    store: &S,
    stepped: &CatchUpJob,
    lease: &Lease,
    home: &Lease,
) {
    let mut cancelled = stepped.clone();
    cancelled.status = CatchUpStatus::Cancelled;
    cancelled.finished_at = Some(secs(5));
    cancelled.updated_at = secs(5);
    let mut commit = stage(home, secs(5), vec![]);
    commit.catch_ups = vec![cancelled.clone()];
    store.commit_stage(commit).await.expect("cancelled");
    let page = store
        .read_page(ShardIndex(1), secs(5), 10)
        .await
        .expect("page");
    assert_eq!(
        signals(&page.messages),
        ["ev-2", "ev-3", "ev-4"],
        "the covered row removed, the others due in seq order"
    );
    let refused = store.commit_stage(stage(lease, secs(5), vec![])).await;
    assert!(
        matches!(refused, Err(StorageError::LeaseLost { .. })),
        "the other affected shard is re-fenced: {refused:?}"
    );
    store
        .commit_stage(stage(home, secs(5), vec![]))
        .await
        .expect("the cancelling shard keeps its lease");

    let stored = store
        .catch_up(stepped.id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(stored.status, CatchUpStatus::Cancelled);
    assert_eq!(stored.finished_at, Some(secs(5)));
    assert!(store.running_catch_ups().await.expect("running").is_empty());
    not_running(
        store.cancel_catch_up(stepped.id, secs(6)).await,
        stepped.id,
        "cancelled",
    );
}

/// A cancelled job no longer blocks an overlapping start; a completed job refuses a cancel
/// too, and both kinds of finished jobs (`cancelled` among them) are purged after their time.
async fn finished_jobs_refuse_a_cancel_and_are_purged<S: Storage + Inspect>(
    store: &S,
    cancelled: i64,
) {
    let next = store
        .start_catch_up(spec("balances", "", ids(&["x"])), SHARDS)
        .await
        .expect("a cancelled job no longer blocks");
    let mut done = next.clone();
    done.status = CatchUpStatus::Completed;
    done.finished_at = Some(secs(6));
    store.update_catch_up(&done).await.expect("complete");
    not_running(
        store.cancel_catch_up(next.id, secs(7)).await,
        next.id,
        "completed",
    );
    assert_eq!(store.purge_catch_ups(secs(5)).await.expect("purge"), 0);
    assert_eq!(store.purge_catch_ups(secs(7)).await.expect("purge"), 2);
    assert_eq!(store.catch_up(cancelled).await.expect("get"), None);
}

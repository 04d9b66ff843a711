//! Catch-up cases: a job's lifecycle, overlapping starts of which one wins, and a start that
//! resets its targets and re-fences their shards.

use super::*;

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
    let first = store
        .start_catch_up(asked.clone(), SHARDS)
        .await
        .expect("start");
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
        .start_catch_up(spec("balances", "", ids(&["b", "c"])), SHARDS)
        .await;
    assert_eq!(overlap_with(refused), first.id);
    let refused = store
        .start_catch_up(spec("balances", "", CatchUpTargets::All), SHARDS)
        .await;
    assert_eq!(overlap_with(refused), first.id);

    let disjoint = store
        .start_catch_up(spec("balances", "", ids(&["c"])), SHARDS)
        .await
        .expect("disjoint ids start");
    let other_tenant = store
        .start_catch_up(spec("balances", "t2", ids(&["a"])), SHARDS)
        .await
        .expect("another tenant starts");
    let other_kind = store
        .start_catch_up(spec("ledger", "", CatchUpTargets::All), SHARDS)
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
        .start_catch_up(spec("balances", "", ids(&["a"])), SHARDS)
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
            store
                .start_catch_up(spec("balances", "", targets), SHARDS)
                .await
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

/// Starting a job resets the targets' states (only the listed ids, only that kind and
/// tenant) and re-fences the affected shards: a lease picked up before the start can no longer
/// commit, and the shard is free for a new pick-up at once.
pub async fn catch_up_start_resets_targets_and_refences_shards<S: Storage + Inspect>(store: S) {
    use shardbox_core::storage::EntityKey;
    let keep = |kind: &str, tenant: &str, id: &str| EntityKey {
        kind: kind.into(),
        tenant: tenant.into(),
        id: id.into(),
    };
    let holder = store
        .pick_up(ShardIndex(1), &node("a"), WorkerId(0), secs(0), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    let untouched = store
        .pick_up(ShardIndex(2), &node("a"), WorkerId(1), secs(0), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    let mut seed = stage(&holder, secs(0), vec![]);
    seed.states = vec![
        state(keep("balances", "", "a"), Some("1")),
        state(keep("balances", "", "b"), Some("2")),
        state(keep("balances", "other", "a"), Some("3")),
        state(keep("ledger", "", "a"), Some("4")),
    ];
    store.commit_stage(seed).await.expect("seed states");

    store
        .start_catch_up(spec("balances", "", ids(&["a"])), SHARDS)
        .await
        .expect("start");
    let all = [
        keep("balances", "", "a"),
        keep("balances", "", "b"),
        keep("balances", "other", "a"),
        keep("ledger", "", "a"),
    ];
    let mut left: Vec<String> = store
        .load_states(&all)
        .await
        .expect("load")
        .into_iter()
        .map(|s| format!("{}/{}/{}", s.key.kind, s.key.tenant, s.key.id))
        .collect();
    left.sort();
    assert_eq!(left, ["balances//b", "balances/other/a", "ledger//a"]);

    // Shard 1 is affected: the old lease is fenced off and the shard is free.
    let refused = store.commit_stage(stage(&holder, secs(1), vec![])).await;
    assert!(
        matches!(refused, Err(StorageError::LeaseLost { .. })),
        "{refused:?}"
    );
    let next = store
        .pick_up(ShardIndex(1), &node("b"), WorkerId(0), secs(1), secs(60))
        .await
        .expect("pick up")
        .expect("the start freed the shard");
    assert!(next.epoch > holder.epoch);
    // Shard 2 is not affected: its lease still commits.
    store
        .commit_stage(stage(&untouched, secs(1), vec![]))
        .await
        .expect("unaffected shard keeps its lease");

    // An `All` job resets every instance of the kind and tenant.
    store
        .start_catch_up(spec("ledger", "", CatchUpTargets::All), SHARDS)
        .await
        .expect("start all");
    assert!(store
        .load_states(&[keep("ledger", "", "a")])
        .await
        .expect("load")
        .is_empty());
}

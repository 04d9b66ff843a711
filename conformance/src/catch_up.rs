//! Catch-up job cases: start, overlap refusal, updates, completion, purge, concurrent starts.

use super::fixtures::*;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{CatchUpJob, CatchUpStatus, CatchUpTargets, NewCatchUp};
use shardbox_core::{ShardIndex, Storage, StorageError, WorkerId};
use std::sync::Arc;

pub(super) fn spec(kind: &str, tenant: &str, targets: CatchUpTargets) -> NewCatchUp {
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

pub(super) fn ids(ids: &[&str]) -> CatchUpTargets {
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

/// A stage commit stores the catch-up job it advanced, atomically with the rest; replayed rows
/// are found by `has_pending_replay` until delivered.
pub async fn catch_up_progress_commits_with_the_stage<S: Storage + Inspect>(store: S) {
    let job = store
        .start_catch_up(spec("balances", "", CatchUpTargets::All), SHARDS)
        .await
        .expect("start");
    let lease = store
        .pick_up(ShardIndex(3), &node("a"), WorkerId(0), secs(0), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    assert!(!store
        .has_pending_replay("balances", "", &[ShardIndex(1), ShardIndex(3)], 0)
        .await
        .expect("pending"));

    let mut advanced = job.clone();
    advanced.status = CatchUpStatus::InProgress;
    advanced.cursor = 17;
    advanced.replayed = 5;
    let replay = with(command(3, "a", "replay-1"), |m| {
        m.kind = shardbox_core::MessageKind::CatchUp;
        m.target_kind = "balances".into();
    });
    let mut commit = stage(&lease, secs(1), vec![]);
    commit.catch_ups = vec![advanced.clone()];
    commit.writes = messages(vec![replay]);
    store.commit_stage(commit).await.expect("commit");
    assert_eq!(store.catch_up(job.id).await.expect("get"), Some(advanced));
    assert!(store
        .has_pending_replay("balances", "", &[ShardIndex(1), ShardIndex(3)], 0)
        .await
        .expect("pending"));
    assert!(!store
        .has_pending_replay("balances", "", &[ShardIndex(1)], 0)
        .await
        .expect("pending"));
    assert!(!store
        .has_pending_replay("ledger", "", &[ShardIndex(3)], 0)
        .await
        .expect("pending"));

    // A live event row of the kind whose event the replay covered (seq <= cursor) is pending
    // work too; one whose event lies beyond the cursor is not.
    let live = shardbox_core::storage::WriteBatch {
        events: vec![event("live-1", "balances.event", secs(1))],
        messages: vec![with(command(1, "b", "live-1"), |m| {
            m.kind = shardbox_core::MessageKind::Event;
            m.target_kind = "balances".into();
        })],
    };
    store.write(live).await.expect("write live event");
    let seq = store.last_event_seq().await.expect("last");
    assert!(store
        .has_pending_replay("balances", "", &[ShardIndex(1)], seq)
        .await
        .expect("pending"));
    assert!(!store
        .has_pending_replay("balances", "", &[ShardIndex(1)], seq - 1)
        .await
        .expect("pending"));

    // A refused commit leaves the job as it was.
    let mut stale = lease.clone();
    stale.epoch = shardbox_core::LeaseEpoch(lease.epoch.0 - 1);
    let mut commit = stage(&stale, secs(2), vec![]);
    let mut done = job.clone();
    done.status = CatchUpStatus::Completed;
    commit.catch_ups = vec![done];
    assert!(store.commit_stage(commit).await.is_err());
    assert_eq!(
        store.catch_up(job.id).await.expect("get").map(|j| j.cursor),
        Some(17)
    );
}

/// Live rows parked by a running catch-up are not read, not waited for and not pending replay
/// work; the stage that completes the job removes the ones the replay covered, makes the
/// others due in `seq` order, and re-fences the other affected shards.
pub async fn parked_rows_settle_when_the_job_completes<S: Storage + Inspect>(store: S) {
    use shardbox_core::catch_up::parked_until;
    use shardbox_core::storage::{RowChange, RowUpdate, WriteBatch};
    let job = store
        .start_catch_up(spec("balances", "", ids(&["x", "y"])), SHARDS)
        .await
        .expect("start");
    let live = |signal: &str, target: &str, kind: &str| {
        with(command(1, target, signal), |m| {
            m.kind = shardbox_core::MessageKind::Event;
            m.target_kind = kind.into();
        })
    };
    let names = ["ev-1", "ev-2", "ev-3", "ev-4", "ev-5"];
    store
        .write(WriteBatch {
            events: names
                .iter()
                .map(|n| event(n, "balances.event", secs(1)))
                .collect(),
            messages: vec![
                live("ev-1", "x", "balances"),
                live("ev-2", "y", "balances"),
                live("ev-3", "x", "balances"),
                // Not a target of the job (another id; another kind): parked by hand, left so.
                live("ev-4", "z", "balances"),
                live("ev-5", "x", "ledger"),
            ],
        })
        .await
        .expect("write");
    let seqs = event_seqs_by_id(&store, &names).await;
    let lease = store
        .pick_up(ShardIndex(1), &node("a"), WorkerId(0), secs(2), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    let page = store
        .read_page(ShardIndex(1), secs(2), 10)
        .await
        .expect("page");
    assert_eq!(page.messages.len(), 5);
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

    // Parked: never read, no due time, not pending replay work, still pending.
    let later = secs(100_000);
    let parked = store
        .read_page(ShardIndex(1), later, 10)
        .await
        .expect("page");
    assert!(parked.messages.is_empty());
    assert_eq!(parked.next_due, None, "parked rows have no due time");
    assert_eq!(
        store.next_due(ShardIndex(1), secs(3)).await.expect("due"),
        None
    );
    assert!(!store
        .has_pending_replay("balances", "", &[ShardIndex(1)], seqs["ev-3"])
        .await
        .expect("pending"));
    assert_eq!(store.counts(None).await.expect("counts").pending(), 5);

    // Completed in a stage of shard 3, with the cursor past ev-1 and ev-2 only.
    let home = store
        .pick_up(ShardIndex(3), &node("a"), WorkerId(1), secs(3), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    let mut done = job.clone();
    done.status = CatchUpStatus::Completed;
    done.cursor = seqs["ev-2"];
    done.finished_at = Some(secs(3));
    let mut commit = stage(&home, secs(3), vec![]);
    commit.catch_ups = vec![done];
    store.commit_stage(commit).await.expect("complete");

    let page = store
        .read_page(ShardIndex(1), secs(3), 10)
        .await
        .expect("page");
    assert_eq!(
        signals(&page.messages),
        ["ev-3"],
        "covered removed, the rest due"
    );
    assert_eq!(store.counts(None).await.expect("counts").pending(), 3);
    // The completing shard keeps its lease; the other affected shard is re-fenced.
    store
        .commit_stage(stage(&home, secs(4), vec![]))
        .await
        .expect("own lease kept");
    let refused = store.commit_stage(stage(&lease, secs(4), vec![])).await;
    assert!(
        matches!(refused, Err(StorageError::LeaseLost { .. })),
        "{refused:?}"
    );
}

/// `event_seqs` finds the seq of stored events by id; `count_events` counts by type and time.
pub async fn event_seqs_and_counts<S: Storage + Inspect>(store: S) {
    use shardbox_core::SignalId;
    let batch = shardbox_core::storage::WriteBatch {
        events: vec![
            event("e1", "a.event", secs(1)),
            event("e2", "b.event", secs(2)),
            event("e3", "a.event", secs(3)),
        ],
        messages: vec![],
    };
    store.write(batch).await.expect("write");
    let mut seqs = store
        .event_seqs(&[
            SignalId::from("e3"),
            SignalId::from("e1"),
            SignalId::from("nope"),
        ])
        .await
        .expect("seqs");
    seqs.sort();
    assert_eq!(seqs.len(), 2);
    let last = store.last_event_seq().await.expect("last");
    assert_eq!(seqs[1], (SignalId::from("e3"), last));
    assert!(seqs[0].1 < seqs[1].1);
    let a = ["a.event".to_string()];
    assert_eq!(store.count_events(&a, None).await.expect("count"), 2);
    assert_eq!(
        store.count_events(&a, Some(secs(2))).await.expect("count"),
        1
    );
    assert_eq!(store.count_events(&[], None).await.expect("count"), 3);
}

/// A row that failed and was then parked by a catch-up (its retry was pending when the job
/// started) waits for the job, not for a time: its target is not reported as waiting, so the
/// target's replayed rows are not held behind it. Were it waiting until the parking time, the
/// replay of that target could never be delivered and the job never complete.
pub async fn a_parked_retrying_row_does_not_make_its_target_wait<S: Storage + Inspect>(store: S) {
    use shardbox_core::catch_up::parked_until;
    use shardbox_core::storage::{RowChange, RowUpdate, WriteBatch};
    let live = with(command(1, "x", "ev-1"), |m| {
        m.kind = shardbox_core::MessageKind::Event;
        m.target_kind = "balances".into();
    });
    store
        .write(WriteBatch {
            events: vec![],
            messages: vec![live],
        })
        .await
        .expect("write");
    let lease = store
        .pick_up(ShardIndex(1), &node("a"), WorkerId(0), secs(1), secs(60))
        .await
        .expect("pick up")
        .expect("free");
    let page = store
        .read_page(ShardIndex(1), secs(1), 10)
        .await
        .expect("page");
    let seq = page.messages[0].seq;
    let retry = RowUpdate {
        seq,
        change: RowChange::RetryAt {
            at: secs(5),
            attempts: 1,
            error: "boom".into(),
            errors: Default::default(),
        },
    };
    store
        .commit_stage(stage(&lease, secs(1), vec![retry]))
        .await
        .expect("retry");
    let page = store
        .read_page(ShardIndex(1), secs(2), 10)
        .await
        .expect("page");
    assert_eq!(
        page.waiting,
        vec![(
            shardbox_core::storage::EntityKey::new("balances", "", "x"),
            secs(5)
        )]
    );

    // The retry comes due while a catch-up of x runs: the stage parks it.
    let page = store
        .read_page(ShardIndex(1), secs(5), 10)
        .await
        .expect("page");
    assert_eq!(signals(&page.messages), ["ev-1"]);
    let park = RowUpdate {
        seq,
        change: RowChange::Hold {
            until: parked_until(),
        },
    };
    store
        .commit_stage(stage(&lease, secs(5), vec![park]))
        .await
        .expect("park");
    let page = store
        .read_page(ShardIndex(1), secs(6), 10)
        .await
        .expect("page");
    assert!(page.messages.is_empty(), "parked rows are not read");
    assert!(
        page.waiting.is_empty(),
        "a parked row waits for its job, not a time: {:?}",
        page.waiting
    );
}

//! Catch-up cases: progress committed with the stage, and the event seqs and counts a job
//! reads.

use super::*;

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

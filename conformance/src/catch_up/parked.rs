//! Catch-up cases: rows parked behind a job, settled when it completes; a parked retrying row
//! does not make its target wait.

use super::*;

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

    complete_in_a_stage(&store, &job, &seqs, &lease).await;
}

/// `job` completed in a stage of shard 3, with the cursor past ev-1 and ev-2 only: the covered
/// rows are removed, the rest due; the completing shard keeps its lease, the other affected
/// shard's `lease` is re-fenced.
async fn complete_in_a_stage<S: Storage + Inspect>(
    store: &S,
    job: &CatchUpJob,
    seqs: &std::collections::HashMap<String, i64>,
    lease: &shardbox_core::storage::Lease,
) {
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
    let refused = store.commit_stage(stage(lease, secs(4), vec![])).await;
    assert!(
        matches!(refused, Err(StorageError::LeaseLost { .. })),
        "{refused:?}"
    );
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

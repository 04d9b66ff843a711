//! The outbox: rows for other databases written in a stage's fenced commit (or not at all),
//! read and trimmed per database in id order, ids that follow commit order under concurrent
//! stages, and the relay's copy that moves its recorded position by compare-and-set.

use super::fixtures::*;
use shardbox_core::storage::{
    Inspect, OutboxRow, OutboxWrite, RelayCopy, RelayOutcome, StageCommit,
};
use shardbox_core::{InboxWrite, ShardIndex, Storage, StorageError};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A row for database `database`: a command to `account/<target>` in shard `shard`.
fn for_database(database: u32, shard: u32, target: &str, signal: &str) -> OutboxWrite {
    OutboxWrite {
        database,
        write: with(command(shard, target, signal), |m| {
            m.deliver_after = Some(secs(5));
            m.expires_at = Some(secs(3600));
        }),
    }
}

/// `commit` with `outbox` added.
fn with_outbox(mut commit: StageCommit, outbox: Vec<OutboxWrite>) -> StageCommit {
    commit.outbox = outbox;
    commit
}

/// The messages of `rows`, for comparing with what was written.
fn writes(rows: &[OutboxRow]) -> Vec<InboxWrite> {
    rows.iter().map(|r| r.write.clone()).collect()
}

/// A stage's outbox rows commit with the stage, each whole (payload, metadata, times), and
/// are read per database in id order from a position; a commit refused by the fence writes
/// none; a trim deletes one database's rows up to an id and no other.
pub async fn a_stage_commits_its_outbox_rows_with_it<S: Storage + Inspect>(store: S) {
    let lease = pick(&store, 0, "node-a", t0()).await;
    let rows = vec![
        for_database(1, 4, "x", "x1"),
        for_database(2, 5, "y", "y1"),
        for_database(1, 6, "z", "z1"),
    ];
    store
        .commit_stage(with_outbox(stage(&lease, secs(1), vec![]), rows.clone()))
        .await
        .expect("commit");
    let one = store.outbox_page(1, 0, 10).await.expect("page of 1");
    assert_eq!(
        writes(&one),
        vec![rows[0].write.clone(), rows[2].write.clone()]
    );
    assert!(one[0].id < one[1].id, "id order: {one:?}");
    assert!(one.iter().all(|r| r.database == 1));
    let two = store.outbox_page(2, 0, 10).await.expect("page of 2");
    assert_eq!(writes(&two), vec![rows[1].write.clone()]);
    assert_eq!(
        writes(&store.outbox_page(1, one[0].id, 10).await.expect("after")),
        vec![rows[2].write.clone()],
        "a page starts after the position it is given"
    );
    assert_eq!(store.outbox_page(1, 0, 1).await.expect("limit").len(), 1);
    assert!(
        store.rows().await.expect("rows").is_empty(),
        "nothing in the Inbox"
    );

    // A commit whose lease was taken over writes no outbox row.
    let taken = take_over(&store, 0, "node-b").await;
    let refused = store
        .commit_stage(with_outbox(
            stage(&lease, secs(40), vec![]),
            vec![for_database(1, 4, "x", "x2")],
        ))
        .await;
    assert!(
        matches!(refused, Err(StorageError::LeaseLost { .. })),
        "{refused:?}"
    );
    assert_eq!(store.outbox_page(1, 0, 10).await.expect("page").len(), 2);

    // The trim removes database 1's rows up to the first id, and nothing of database 2.
    assert_eq!(store.trim_outbox(1, one[0].id).await.expect("trim"), 1);
    assert_eq!(
        writes(&store.outbox_page(1, 0, 10).await.expect("page")),
        vec![rows[2].write.clone()]
    );
    assert_eq!(store.outbox_page(2, 0, 10).await.expect("page").len(), 1);
    store
        .commit_stage(stage(&taken, secs(41), vec![]))
        .await
        .expect("the new owner commits");
}

/// A relay's copy writes its rows into the Inbox (duplicates of rows already there counted)
/// and moves the recorded position to its last id; the same copy again, or one from a stale
/// position, writes nothing and says where the position is; positions are kept per source;
/// rows out of order are refused whole.
pub async fn a_relay_copy_moves_its_position_once<S: Storage + Inspect>(store: S) {
    assert_eq!(store.relay_position(7).await.expect("position"), 0);
    store
        .write(messages(vec![command(2, "b", "b1")]))
        .await
        .expect("a row already there");
    let row = |id: i64, target: &str, signal: &str| OutboxRow {
        id,
        database: 0,
        write: command(2, target, signal),
    };
    let first = RelayCopy {
        from: 7,
        after: 0,
        rows: vec![row(3, "a", "a1"), row(5, "b", "b1"), row(9, "a", "a2")],
    };
    let RelayOutcome::Copied { position, written } =
        store.relay_into(first.clone()).await.expect("copy")
    else {
        panic!("the first copy is made");
    };
    assert_eq!(position, 9);
    assert_eq!((written.written, written.duplicates), (2, 1));
    assert_eq!(written.shards, vec![ShardIndex(2)]);
    assert_eq!(store.relay_position(7).await.expect("position"), 9);
    assert_eq!(
        signals(&store.rows().await.expect("rows")),
        vec!["b1", "a1", "a2"],
        "copied in id order after what was there"
    );

    // The same copy again (a relay that stalled and came back): nothing written.
    assert_eq!(
        store.relay_into(first).await.expect("again"),
        RelayOutcome::Moved { recorded: 9 }
    );
    assert_eq!(store.rows().await.expect("rows").len(), 3);
    let stale = RelayCopy {
        from: 7,
        after: 5,
        rows: vec![row(11, "c", "c1")],
    };
    assert_eq!(
        store.relay_into(stale).await.expect("stale"),
        RelayOutcome::Moved { recorded: 9 }
    );

    // Another source has a position of its own; an empty copy changes nothing.
    assert_eq!(store.relay_position(8).await.expect("other source"), 0);
    let empty = RelayCopy {
        from: 7,
        after: 9,
        rows: vec![],
    };
    assert!(matches!(
        store.relay_into(empty).await.expect("empty"),
        RelayOutcome::Copied { position: 9, .. }
    ));

    // Rows out of id order: refused, nothing written, the position kept.
    let disordered = RelayCopy {
        from: 7,
        after: 9,
        rows: vec![row(12, "c", "c1"), row(10, "c", "c2")],
    };
    let refused = store.relay_into(disordered).await;
    assert!(
        matches!(refused, Err(StorageError::Corrupt(_))),
        "{refused:?}"
    );
    assert_eq!(store.relay_position(7).await.expect("position"), 9);
    assert_eq!(store.rows().await.expect("rows").len(), 3);

    let next = RelayCopy {
        from: 7,
        after: 9,
        rows: vec![row(12, "c", "c1")],
    };
    assert!(matches!(
        store.relay_into(next).await.expect("next"),
        RelayOutcome::Copied { position: 12, .. }
    ));
}

/// Two relays copying from one position at once: exactly one copy is made, the other is told
/// the position moved — also for the first copy of a source, which inserts its position.
pub async fn concurrent_relay_copies_from_one_position_make_one<S: Storage + Inspect>(store: S) {
    let store = Arc::new(store);
    for (round, after) in [(0i64, 0i64), (1, 100)] {
        let copy = |relay: usize| RelayCopy {
            from: 3,
            after,
            rows: vec![OutboxRow {
                id: after + 100,
                database: 0,
                write: command(0, "a", &format!("r{round}-{relay}")),
            }],
        };
        let tasks: Vec<_> = (0..4)
            .map(|relay| {
                let (store, copy) = (store.clone(), copy(relay));
                tokio::spawn(async move { store.relay_into(copy).await.expect("copy") })
            })
            .collect();
        let mut copied = 0;
        for t in tasks {
            match t.await.expect("task") {
                RelayOutcome::Copied { position, .. } => {
                    assert_eq!(position, after + 100);
                    copied += 1;
                }
                RelayOutcome::Moved { recorded } => assert_eq!(recorded, after + 100),
            }
        }
        assert_eq!(copied, 1, "round {round}: one copy of four");
        assert_eq!(
            store.rows().await.expect("rows").len(),
            round as usize + 1,
            "one row written per round"
        );
    }
}

/// Outbox ids follow commit order: stages of four shards commit outbox rows at once while a
/// reader pages from the last id it saw, as a relay does; at the end every row is one the
/// reader saw — none committed with an id below one already read.
pub async fn outbox_ids_follow_commit_order<S: Storage + Inspect>(store: S) {
    let store = Arc::new(store);
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4u32)
        .map(|shard| {
            let store = store.clone();
            tokio::spawn(async move {
                let lease = pick(store.as_ref(), shard, "node-a", t0()).await;
                for n in 0..30 {
                    let rows = (0..3)
                        .map(|i| for_database(1, 9, "t", &format!("s{shard}-{n}-{i}")))
                        .collect();
                    store
                        .commit_stage(with_outbox(stage(&lease, millis(n), vec![]), rows))
                        .await
                        .expect("commit");
                }
            })
        })
        .collect();
    let reader = {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move {
            let (mut after, mut seen) = (0, BTreeSet::new());
            loop {
                let finished = done.load(Ordering::SeqCst);
                let page = store.outbox_page(1, after, 50).await.expect("page");
                for row in &page {
                    seen.insert(row.id);
                    after = row.id;
                }
                if finished && page.is_empty() {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);
    let seen = reader.await.expect("reader");
    let all: BTreeSet<i64> = store
        .outbox_page(1, 0, 10_000)
        .await
        .expect("all")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(all.len(), 4 * 30 * 3);
    let skipped: Vec<_> = all.difference(&seen).collect();
    assert!(
        skipped.is_empty(),
        "rows committed below an id the reader had passed: {skipped:?}"
    );
}

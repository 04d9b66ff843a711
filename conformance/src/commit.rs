//! Stage-commit cases: retries and waiting targets, the purge of delivered rows, atomicity.

use super::fixtures::*;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{DeadLetter, Lease, RowChange, RowUpdate, StageCommit, WriteBatch};
use shardbox_core::{MessageKind, MessageStatus, ShardIndex, Storage, StorageError};

/// A failed message is retried at its time with its attempt count and error, and its target
/// is reported as waiting until then; a held message is not a waiting target.
pub async fn retry_reports_waiting_target<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(0);
    store
        .write(messages(vec![
            command(0, "a", "a1"),
            command(0, "a", "a2"),
            command(0, "b", "b1"),
        ]))
        .await
        .expect("write");
    let lease = pick(&store, 0, "node-a", t0()).await;
    let page = store.read_page(shard, t0(), 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["a1", "a2", "b1"]);
    let (a1, a2, b1) = (
        page.messages[0].seq,
        page.messages[1].seq,
        page.messages[2].seq,
    );
    let updates = vec![
        RowUpdate {
            seq: a1,
            change: RowChange::RetryAt {
                at: secs(30),
                attempts: 1,
                error: "boom".into(),
                errors: Default::default(),
            },
        },
        RowUpdate {
            seq: a2,
            change: RowChange::Hold { until: secs(30) },
        },
        delivered(b1, secs(60)),
    ];
    store
        .commit_stage(stage(&lease, t0(), updates))
        .await
        .expect("commit");

    let page = store.read_page(shard, secs(10), 10).await.expect("read");
    assert!(page.messages.is_empty(), "{:?}", signals(&page.messages));
    assert_eq!(page.waiting, vec![(key("a"), secs(30))]);
    assert_eq!(
        store.next_due(shard, secs(10)).await.expect("next"),
        Some(secs(30))
    );

    let page = store.read_page(shard, secs(30), 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["a1", "a2"]);
    let retried = &page.messages[0];
    assert_eq!(retried.attempts, 1);
    assert_eq!(retried.last_error.as_deref(), Some("boom"));
    assert_eq!(retried.message.deliver_after, Some(secs(30)));
    assert_eq!(page.messages[1].attempts, 0);
    assert!(page.waiting.is_empty());
}

/// Delivered rows stay until `keep_until`; a purge removes at most the asked number, oldest
/// window first, of the committing shard only.
pub async fn delivered_rows_kept_until_window_then_purged<S: Storage + Inspect>(store: S) {
    let zero = deliver_rows_of_two_shards(&store).await;

    // A page read tells whether a purge has work: a window has passed (at 10 s, not before).
    for (at, due) in [(secs(5), false), (secs(10), true)] {
        let page = store.read_page(ShardIndex(0), at, 10).await.expect("read");
        assert_eq!(page.purge_due, due, "at {at}");
    }
    // The shards where a purge has work, for idle shards that no stage would visit.
    assert_eq!(
        store.purge_due_shards(secs(5)).await.expect("purge due"),
        vec![]
    );
    assert_eq!(
        store.purge_due_shards(secs(10)).await.expect("purge due"),
        vec![ShardIndex(0), ShardIndex(1)]
    );
    let purge = |now, limit| {
        let mut commit = stage(&zero, now, vec![]);
        commit.purge_delivered = limit;
        commit
    };
    let report = store
        .commit_stage(purge(secs(5), 10))
        .await
        .expect("commit");
    assert_eq!(report.purged, 0);
    let report = store
        .commit_stage(purge(secs(20), 2))
        .await
        .expect("commit");
    assert_eq!(report.purged, 2, "at most purge_delivered rows");
    let left: Vec<String> = store
        .rows()
        .await
        .expect("rows")
        .iter()
        .map(|r| r.message.signal_id.0.clone())
        .collect();
    assert_eq!(
        left,
        ["d3", "x1"],
        "oldest window (then seq) first, other shards untouched"
    );
    let report = store
        .commit_stage(purge(secs(20), 10))
        .await
        .expect("commit");
    assert_eq!(report.purged, 1);
    assert_eq!(
        store
            .counts(Some(ShardIndex(0)))
            .await
            .expect("c")
            .delivered,
        0
    );
    assert_eq!(
        store
            .counts(Some(ShardIndex(1)))
            .await
            .expect("c")
            .delivered,
        1
    );
}

/// d1, d2, d3 in shard 0 delivered until 10 s, 20 s and 20 s, x1 in shard 1 until 10 s:
/// shard 0's lease.
async fn deliver_rows_of_two_shards<S: Storage + Inspect>(store: &S) -> Lease {
    store
        .write(messages(vec![
            command(0, "a", "d1"),
            command(0, "b", "d2"),
            command(0, "c", "d3"),
            command(1, "x", "x1"),
        ]))
        .await
        .expect("write");
    let zero = pick(store, 0, "node-a", t0()).await;
    let one = pick(store, 1, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    let keep = [secs(10), secs(20), secs(20)];
    let updates = page
        .messages
        .iter()
        .zip(keep)
        .map(|(r, k)| delivered(r.seq, k))
        .collect();
    store
        .commit_stage(stage(&zero, t0(), updates))
        .await
        .expect("commit");
    let page = store
        .read_page(ShardIndex(1), t0(), 10)
        .await
        .expect("read");
    store
        .commit_stage(stage(
            &one,
            t0(),
            vec![delivered(page.messages[0].seq, secs(10))],
        ))
        .await
        .expect("commit");
    zero
}

/// A commit whose last update is bogus writes nothing at all; the same commit without it
/// writes everything (states, events, fan-out rows, dead letters, row changes).
pub async fn commit_is_all_or_nothing<S: Storage + Inspect>(store: S) {
    let (lease, r1, r2, x1) = two_rows_and_one_elsewhere(&store).await;
    let (r1, r2, x1) = (&r1, &r2, x1.seq);

    let full = |bogus: Option<i64>| {
        let mut updates = vec![
            delivered(r1.seq, secs(60)),
            RowUpdate {
                seq: r2.seq,
                change: RowChange::Remove,
            },
        ];
        updates.extend(bogus.map(|seq| delivered(seq, secs(60))));
        let mut commit = stage(&lease, secs(1), updates);
        commit.states = vec![state(key("a"), Some("{\"balance\":1}"))];
        commit.writes = WriteBatch {
            events: vec![event("e1", "Deposited", secs(1))],
            messages: vec![with(command(2, "z", "e1"), |m| m.kind = MessageKind::Event)],
        };
        commit.dead_letters = vec![DeadLetter {
            original: r2.clone(),
            reason: "poison".into(),
            attempts: 3,
            first_attempt_at: Some(t0()),
            last_attempt_at: secs(1),
        }];
        commit.purge_delivered = 10;
        commit
    };
    let before_rows = store.rows().await.expect("rows");
    let before_sessions = store.sessions().await.expect("sessions");
    for bogus in [x1, i64::MAX - 7] {
        let err = store
            .commit_stage(full(Some(bogus)))
            .await
            .expect_err("a commit touching a row outside its shard must fail");
        assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
        assert_eq!(
            store.rows().await.expect("rows"),
            before_rows,
            "rows unchanged"
        );
        assert_no_state_nor_event(&store, &["a"]).await;
        assert!(store.dead_letters().await.expect("dead").is_empty());
        assert_eq!(
            store.sessions().await.expect("s"),
            before_sessions,
            "lease not renewed"
        );
    }

    let report = store.commit_stage(full(None)).await.expect("commit");
    assert_eq!((report.written.events, report.written.written), (1, 1));
    assert_eq!(report.written.shards, vec![ShardIndex(2)]);
    assert_eq!(report.lease.lease_until, secs(31));
    let states = store.load_states(&[key("a")]).await.expect("load");
    assert_eq!(states.len(), 1);
    assert_eq!((states[0].version, states[0].updated_at), (1, secs(1)));
    assert!(store.last_event_seq().await.expect("seq") > 0);
    let dead = store.dead_letters().await.expect("dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].original, *r2, "the original row round-trips");
    assert_eq!((dead[0].reason.as_str(), dead[0].attempts), ("poison", 3));
    assert_eq!(dead[0].last_attempt_at, secs(1));
    let left: Vec<String> = store
        .rows()
        .await
        .expect("rows")
        .iter()
        .map(|r| r.message.signal_id.0.clone())
        .collect();
    assert_eq!(left, ["r1", "x1", "e1"], "r2 removed, fan-out row added");
    let sessions = store.sessions().await.expect("sessions");
    assert_eq!(sessions[0].lease_until, Some(secs(31)), "lease renewed");
}

/// A stage that only delivers rows, stores states and appends events (the shape a backend
/// may commit as one statement, see `sql::stage_statement`) keeps the write transaction's
/// promises: a row outside the shard writes nothing and is `Corrupt`; a lease taken over
/// writes nothing and is `LeaseLost` naming the new epoch; otherwise every part is written
/// (a key written twice moves up two versions), with and without events.
pub async fn a_stage_that_only_delivers_is_fenced_and_all_or_nothing<S: Storage + Inspect>(
    store: S,
) {
    let (lease, r1, r2, x1) = two_rows_and_one_elsewhere(&store).await;
    let (r1, r2, x1) = (r1.seq, r2.seq, x1.seq);
    let before_rows = store.rows().await.expect("rows");
    let before_sessions = store.sessions().await.expect("sessions");
    let unchanged = |what: &str, rows, sessions| {
        assert_eq!(rows, before_rows, "{what}: rows unchanged");
        assert_eq!(sessions, before_sessions, "{what}: lease not renewed");
    };
    for with_events in [true, false] {
        let err = store
            .commit_stage(delivering_stage(&lease, &[r1, r2, x1], with_events))
            .await
            .expect_err("a commit delivering a row outside its shard must fail");
        assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
        unchanged(
            "outside the shard",
            store.rows().await.expect("rows"),
            store.sessions().await.expect("sessions"),
        );
        assert_no_state_nor_event(&store, &["a", "b"]).await;
    }

    // The lease expires and another worker takes the shard: the old one's commit is fenced.
    let taker = take_over(&store, 0, "node-b").await;
    let before_sessions = store.sessions().await.expect("sessions");
    for with_events in [true, false] {
        match store
            .commit_stage(delivering_stage(&lease, &[r1, r2], with_events))
            .await
        {
            Err(StorageError::LeaseLost { held, current, .. }) => {
                assert_eq!((held, current), (lease.epoch, Some(taker.epoch)))
            }
            other => panic!("expected LeaseLost, got {other:?}"),
        }
        assert_eq!(store.rows().await.expect("rows"), before_rows);
        assert_eq!(store.sessions().await.expect("sessions"), before_sessions);
        assert_no_state_nor_event(&store, &["a"]).await;
    }

    // The owner's commit writes every part.
    let report = store
        .commit_stage(delivering_stage(&taker, &[r1], true))
        .await
        .expect("commit");
    assert_eq!(report.written.events, 2);
    assert_eq!(report.lease.epoch, taker.epoch);
    assert_eq!(report.lease.lease_until, secs(31));
    let mut states = store
        .load_states(&[key("a"), key("b")])
        .await
        .expect("load");
    states.sort_by(|x, y| x.key.id.cmp(&y.key.id));
    let versions: Vec<_> = states
        .iter()
        .map(|s| (s.key.id.as_str(), s.version, s.updated_at))
        .collect();
    assert_eq!(versions, vec![("a", 2, secs(1)), ("b", 1, secs(1))]);
    assert_eq!(
        event_seqs_by_id(&store, &["p1", "p2"]).await.len(),
        2,
        "both events appended"
    );
    // A second stage without events: the other statement.
    let report = store
        .commit_stage(delivering_stage(&taker, &[r2], false))
        .await
        .expect("commit");
    assert_eq!(report.written.events, 0);
    let states = store.load_states(&[key("a")]).await.expect("load");
    assert_eq!(states[0].version, 4, "two more writes of a");
    let rows = store.rows().await.expect("rows");
    let delivered: Vec<_> = rows
        .iter()
        .filter(|r| r.status == MessageStatus::Delivered)
        .map(|r| (r.seq, r.keep_until))
        .collect();
    assert_eq!(delivered, vec![(r1, Some(secs(60))), (r2, Some(secs(60)))]);
    let session = &store.sessions().await.expect("sessions")[0];
    assert_eq!(session.lease_until, Some(secs(31)), "renewed by the commit");
}

/// A stage of the one-statement shape: `seqs` delivered until 60 s, states of a (twice) and b,
/// and (`with_events`) two events.
fn delivering_stage(lease: &Lease, seqs: &[i64], with_events: bool) -> StageCommit {
    let mut commit = stage(
        lease,
        secs(1),
        seqs.iter().map(|&s| delivered(s, secs(60))).collect(),
    );
    commit.states = vec![
        state(key("a"), Some("{\"n\":1}")),
        state(key("b"), Some("{\"n\":1}")),
        state(key("a"), Some("{\"n\":2}")),
    ];
    if with_events {
        commit.writes.events = vec![
            event("p1", "Deposited", secs(1)),
            event("p2", "Deposited", secs(1)),
        ];
    }
    commit
}

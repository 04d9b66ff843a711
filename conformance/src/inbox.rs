//! Inbox cases: order, paging, delays, counts, replayed rows, concurrent writers.

use super::fixtures::*;
use chrono::Duration;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{InboxCounts, RowChange, RowUpdate, WriteBatch, WriteReport};
use shardbox_core::InboxWrite;
use shardbox_core::{MessageKind, MessageStatus, ShardIndex, SignalId, Storage};
use std::sync::Arc;

/// Rows come back in `seq` order, whole, only from the shard asked for; the write report
/// counts rows and lists touched shards sorted and once.
pub async fn write_then_read_in_seq_order<S: Storage + Inspect>(store: S) {
    let first = vec![
        command(2, "a", "s1"),
        command(0, "b", "s2"),
        command(2, "c", "s3"),
    ];
    let report = store.write(messages(first.clone())).await.expect("write");
    assert_eq!(
        report,
        WriteReport {
            events: 0,
            written: 3,
            duplicates: 0,
            shards: vec![ShardIndex(0), ShardIndex(2)],
        }
    );
    let rich = with(command(2, "a", "s4"), |m| {
        m.kind = MessageKind::Event;
        m.tenant = "tenant-9".into();
        m.received_at = millis(1_234);
        m.expires_at = Some(secs(3_600));
        m.deliver_after = Some(secs(-1));
        m.metadata.insert("actor".into(), "ünïcode ✓".into());
        m.payload = vec![0, 159, 146, 150, 255];
        m.payload_version = 3;
    });
    // Written with another row, so that a backend's multi-row form carries every field too.
    let rich_too = with(rich.clone(), |m| {
        m.signal_id = SignalId("s5".into());
        m.target_id = "z".into();
        m.deliver_after = None;
        m.expires_at = None;
        m.payload = vec![7; 3];
        m.payload_version = 2;
    });
    let rich_too = InboxWrite {
        shard: ShardIndex(5),
        ..rich_too
    };
    let report = store
        .write(messages(vec![rich.clone(), rich_too.clone()]))
        .await
        .expect("write");
    assert_eq!(report.shards, vec![ShardIndex(2), ShardIndex(5)]);
    let fifth = store
        .read_page(ShardIndex(5), t0(), 10)
        .await
        .expect("read");
    assert_eq!(fifth.messages.len(), 1);
    assert_eq!(fifth.messages[0].message, rich_too.message);

    let page = store
        .read_page(ShardIndex(2), t0(), 10)
        .await
        .expect("read");
    assert_eq!(signals(&page.messages), ["s1", "s3", "s4"]);
    assert!(page.waiting.is_empty(), "{:?}", page.waiting);
    let expected = [&first[0], &first[2], &rich];
    for (row, written) in page.messages.iter().zip(expected) {
        assert_eq!(row.message, written.message, "row {} round trip", row.seq);
        assert_eq!(row.shard, ShardIndex(2));
        assert_eq!(row.status, MessageStatus::ToDeliver);
        assert_eq!(
            (row.attempts, &row.last_error, row.keep_until),
            (0, &None, None)
        );
    }
    let other = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    assert_eq!(signals(&other.messages), ["s2"]);
    let seqs = [
        page.messages[0].seq,
        other.messages[0].seq,
        page.messages[1].seq,
        page.messages[2].seq,
    ];
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seq follows insertion order: {seqs:?}"
    );

    let limited = store.read_page(ShardIndex(2), t0(), 2).await.expect("read");
    assert_eq!(signals(&limited.messages), ["s1", "s3"]);
    let empty = store
        .read_page(ShardIndex(7), t0(), 10)
        .await
        .expect("read");
    assert!(empty.messages.is_empty());
}

/// Rows with equal timestamps are neither skipped nor repeated across page boundaries.
pub async fn paging_with_equal_timestamps_crosses_pages<S: Storage + Inspect>(store: S) {
    let names: Vec<String> = (0..7).map(|i| format!("m{i}")).collect();
    let mut batch: Vec<_> = names
        .iter()
        .map(|n| command(1, &format!("target-{n}"), n))
        .collect();
    batch.insert(3, command(4, "elsewhere", "x"));
    store.write(messages(batch)).await.expect("write");

    let lease = pick(&store, 1, "node-a", t0()).await;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = store.read_page(ShardIndex(1), t0(), 3).await.expect("read");
        if page.messages.is_empty() {
            break;
        }
        pages += 1;
        assert!(pages <= 3, "more pages than rows allow: {seen:?}");
        assert!(page.messages.len() <= 3);
        seen.extend(signals(&page.messages));
        let updates = page
            .messages
            .iter()
            .map(|r| delivered(r.seq, secs(60)))
            .collect();
        store
            .commit_stage(stage(&lease, t0(), updates))
            .await
            .expect("commit");
    }
    assert_eq!(seen, names);
    assert_eq!(pages, 3);
    let counts = store.counts(Some(ShardIndex(1))).await.expect("counts");
    assert_eq!((counts.to_deliver, counts.delivered), (0, 7));
}

/// A page holds the first due rows by `seq`, whether they had a delay or not, however many
/// delayed rows are due: a row whose delay passed long ago does not jump ahead of earlier
/// rows, and rows held by a stage come back in `seq` order once their time comes.
pub async fn due_pages_take_the_first_rows_by_seq<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(3);
    let mut batch = Vec::new();
    for i in 0..6i64 {
        // Delayed rows whose times run backwards: the later the row, the earlier its time.
        batch.push(with(command(3, "t", &format!("d{i}")), |m| {
            m.deliver_after = Some(secs(-10 * (i + 1)))
        }));
        batch.push(command(3, "t", &format!("i{i}")));
        batch.push(with(command(3, "t", &format!("later{i}")), |m| {
            m.deliver_after = Some(secs(3_600))
        }));
    }
    store.write(messages(batch)).await.expect("write");
    let lease = pick(&store, 3, "node-a", t0()).await;
    let page = store.read_page(shard, t0(), 5).await.expect("read");
    assert_eq!(signals(&page.messages), ["d0", "i0", "d1", "i1", "d2"]);
    // The stage holds the first three until t0 + 10 s and delivers the other two.
    let mut updates: Vec<_> = page.messages[..3]
        .iter()
        .map(|r| RowUpdate {
            seq: r.seq,
            change: RowChange::Hold { until: secs(10) },
        })
        .collect();
    updates.extend(
        page.messages[3..]
            .iter()
            .map(|r| delivered(r.seq, secs(60))),
    );
    store
        .commit_stage(stage(&lease, t0(), updates))
        .await
        .expect("commit");
    let page = store.read_page(shard, t0(), 4).await.expect("read");
    assert_eq!(signals(&page.messages), ["i2", "d3", "i3", "d4"]);
    assert_eq!(
        store.next_due(shard, t0()).await.expect("next"),
        Some(secs(10)),
        "the held rows"
    );
    assert_eq!(
        page.next_due,
        Some(secs(10)),
        "the held rows, with the page"
    );
    let page = store.read_page(shard, secs(10), 100).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["d0", "i0", "d1", "i2", "d3", "i3", "d4", "i4", "d5", "i5"]
    );
}

/// A delayed row is not due before `deliver_after`, and is due at it.
pub async fn deliver_after_is_respected<S: Storage + Inspect>(store: S) {
    let batch = vec![
        command(0, "a", "now"),
        with(command(0, "b", "later"), |m| {
            m.deliver_after = Some(secs(10))
        }),
        with(command(0, "c", "past"), |m| {
            m.deliver_after = Some(secs(-5))
        }),
    ];
    store.write(messages(batch)).await.expect("write");
    let shard = ShardIndex(0);

    let page = store.read_page(shard, t0(), 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["now", "past"]);
    assert!(page.waiting.is_empty(), "a delay is not a retry");
    assert_eq!(
        store.next_due(shard, t0()).await.expect("next"),
        Some(secs(10))
    );
    assert_eq!(page.next_due, Some(secs(10)), "the page tells it too");

    let just_before = secs(10) - Duration::milliseconds(1);
    let page = store.read_page(shard, just_before, 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["now", "past"]);

    let page = store.read_page(shard, secs(10), 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["now", "later", "past"]);
    assert_eq!(store.next_due(shard, secs(10)).await.expect("next"), None);
    assert_eq!(page.next_due, None);
    assert_eq!(
        store.next_due(ShardIndex(3), t0()).await.expect("next"),
        None
    );
}

/// Counts by status, per shard and in total.
pub async fn counts_by_status<S: Storage + Inspect>(store: S) {
    let batch = vec![
        command(0, "a", "c1"),
        command(0, "b", "c2"),
        with(command(0, "p", "h1"), |m| m.kind = MessageKind::CatchUp),
        command(1, "c", "c3"),
    ];
    store.write(messages(batch)).await.expect("write");
    let counts = |to_deliver, delivered, to_catch_up| InboxCounts {
        blocked: 0,
        to_deliver,
        delivered,
        to_catch_up,
    };
    assert_eq!(store.counts(None).await.expect("counts"), counts(3, 0, 1));
    assert_eq!(
        store.counts(Some(ShardIndex(0))).await.expect("counts"),
        counts(2, 0, 1)
    );
    assert_eq!(
        store.counts(Some(ShardIndex(1))).await.expect("counts"),
        counts(1, 0, 0)
    );
    assert_eq!(
        store.counts(Some(ShardIndex(9))).await.expect("counts"),
        counts(0, 0, 0)
    );

    let lease = pick(&store, 0, "node-a", t0()).await;
    let page = store.read_page(ShardIndex(0), t0(), 1).await.expect("read");
    store
        .commit_stage(stage(
            &lease,
            t0(),
            vec![delivered(page.messages[0].seq, secs(60))],
        ))
        .await
        .expect("commit");
    let after = store.counts(Some(ShardIndex(0))).await.expect("counts");
    assert_eq!(after, counts(1, 1, 1));
    assert_eq!(after.pending(), 2);
}

/// Depths sort every row by what it waits for (due, delayed, retrying, parked, replay,
/// blocked, delivered), per shard, with the time the oldest due row became due.
pub async fn depths_by_wait<S: Storage + Inspect>(store: S) {
    let batch = vec![
        with(command(0, "a", "due-1"), |m| m.received_at = secs(-30)),
        with(command(0, "a", "came-due"), |m| {
            m.deliver_after = Some(secs(-50))
        }),
        with(command(0, "b", "delayed"), |m| {
            m.deliver_after = Some(secs(60))
        }),
        command(0, "c", "to-retry"),
        command(0, "d", "to-block"),
        command(0, "d", "behind-block"),
        command(0, "e", "to-deliver"),
        with(command(0, "p", "replay"), |m| m.kind = MessageKind::CatchUp),
        command(2, "z", "other-shard"),
    ];
    store.write(messages(batch)).await.expect("write");
    assert_eq!(
        store.depths(t0()).await.expect("depths").len(),
        2,
        "one entry per shard holding rows"
    );
    let lease = pick(&store, 0, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(0), t0(), 100)
        .await
        .expect("read");
    let seq = |signal: &str| {
        page.messages
            .iter()
            .find(|m| m.message.signal_id.0 == signal)
            .map(|m| m.seq)
            .unwrap_or_else(|| panic!("{signal} in the page"))
    };
    let change = |signal: &str, change: RowChange| RowUpdate {
        seq: seq(signal),
        change,
    };
    store
        .commit_stage(stage(
            &lease,
            t0(),
            vec![
                change(
                    "to-retry",
                    RowChange::RetryAt {
                        at: secs(10),
                        attempts: 1,
                        error: "boom".into(),
                        errors: Default::default(),
                    },
                ),
                change(
                    "to-block",
                    RowChange::Block {
                        attempts: 3,
                        error: "stuck".into(),
                        errors: Default::default(),
                    },
                ),
                change("behind-block", RowChange::BehindBlock),
                delivered(seq("to-deliver"), secs(60)),
            ],
        ))
        .await
        .expect("commit");

    let depths = store.depths(t0()).await.expect("depths");
    let shards: Vec<ShardIndex> = depths.iter().map(|d| d.shard).collect();
    assert_eq!(shards, vec![ShardIndex(0), ShardIndex(2)]);
    let d = depths[0];
    assert_eq!(
        (
            d.due,
            d.delayed,
            d.retrying,
            d.parked,
            d.replay,
            d.blocked,
            d.delivered
        ),
        (2, 1, 1, 1, 1, 1, 1),
        "due, delayed, retrying, parked, replay, blocked, delivered: {d:?}"
    );
    assert_eq!(
        d.oldest_due_at,
        Some(secs(-50)),
        "the delay that passed first"
    );
    assert_eq!(d.lag(t0()), Duration::seconds(50));
    assert_eq!((depths[1].due, depths[1].oldest_due_at), (1, Some(t0())));

    // Later, the delay and the retry have passed: both are due.
    let later = store.depths(secs(61)).await.expect("depths");
    assert_eq!(
        (later[0].due, later[0].delayed, later[0].retrying),
        (4, 0, 0)
    );
}

/// Kind depths sort every pending row by its target's kind: due (with the time the oldest
/// became due), waiting (delayed, retrying, parked, replay), blocked; delivered rows are
/// not counted and a kind with nothing pending is not listed.
pub async fn depths_by_kind<S: Storage + Inspect>(store: S) {
    let of =
        |kind: &'static str| move |m: &mut shardbox_core::NewMessage| m.target_kind = kind.into();
    let batch = vec![
        with(command(0, "a", "due-1"), |m| m.received_at = secs(-30)),
        with(command(1, "b", "came-due"), |m| {
            m.deliver_after = Some(secs(-50))
        }),
        with(command(0, "c", "delayed"), |m| {
            m.deliver_after = Some(secs(60))
        }),
        command(0, "d", "to-block"),
        command(0, "d", "behind-block"),
        with(command(0, "e", "replay"), |m| m.kind = MessageKind::CatchUp),
        with(command(0, "f", "to-deliver"), of("ledger")),
        with(command(2, "g", "ledger-due"), of("ledger")),
        with(command(3, "h", "ledger-delivered"), of("ledger")),
        with(command(3, "i", "only-delivered"), of("audit")),
    ];
    store.write(messages(batch)).await.expect("write");
    let lease = pick(&store, 0, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(0), t0(), 100)
        .await
        .expect("read");
    let seq = |signal: &str| {
        page.messages
            .iter()
            .find(|m| m.message.signal_id.0 == signal)
            .map(|m| m.seq)
            .unwrap_or_else(|| panic!("{signal} in the page"))
    };
    store
        .commit_stage(stage(
            &lease,
            t0(),
            vec![
                RowUpdate {
                    seq: seq("to-block"),
                    change: RowChange::Block {
                        attempts: 3,
                        error: "stuck".into(),
                        errors: Default::default(),
                    },
                },
                RowUpdate {
                    seq: seq("behind-block"),
                    change: RowChange::BehindBlock,
                },
                delivered(seq("to-deliver"), secs(60)),
            ],
        ))
        .await
        .expect("commit");
    let lease = pick(&store, 3, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(3), t0(), 100)
        .await
        .expect("read");
    let delivered_all = page
        .messages
        .iter()
        .map(|m| delivered(m.seq, secs(60)))
        .collect();
    store
        .commit_stage(stage(&lease, t0(), delivered_all))
        .await
        .expect("commit");

    let kinds = store.kind_depths(t0()).await.expect("kind depths");
    let names: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(
        names,
        ["account", "ledger"],
        "sorted; audit has nothing pending"
    );
    let account = &kinds[0];
    assert_eq!(
        (account.due, account.waiting, account.blocked),
        (2, 3, 1),
        "due (due-1, came-due), waiting (delayed, behind-block, replay), blocked: {account:?}"
    );
    assert_eq!(account.oldest_due_at, Some(secs(-50)));
    assert_eq!(account.lag(t0()), Duration::seconds(50));
    let ledger = &kinds[1];
    assert_eq!(
        (ledger.due, ledger.waiting, ledger.blocked),
        (1, 0, 0),
        "{ledger:?}"
    );
    assert_eq!(ledger.oldest_due_at, Some(t0()));

    // Later, the delay has passed: due.
    let later = store.kind_depths(secs(61)).await.expect("kind depths");
    assert_eq!((later[0].due, later[0].waiting), (3, 2));
}

/// Replayed history (`to_catch_up`) and live rows come back merged in `seq` order.
pub async fn catch_up_rows_interleave_in_seq_order<S: Storage + Inspect>(store: S) {
    let replay = |w| with(w, |m| m.kind = MessageKind::CatchUp);
    let batch = vec![
        command(0, "a", "c1"),
        replay(command(0, "p", "h1")),
        command(0, "b", "c2"),
        replay(command(0, "p", "h2")),
        command(0, "c", "c3"),
    ];
    store.write(messages(batch)).await.expect("write");
    let page = store.read_page(ShardIndex(0), t0(), 3).await.expect("read");
    assert_eq!(signals(&page.messages), ["c1", "h1", "c2"]);
    let statuses: Vec<MessageStatus> = page.messages.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            MessageStatus::ToDeliver,
            MessageStatus::ToCatchUp,
            MessageStatus::ToDeliver
        ]
    );
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    assert_eq!(signals(&page.messages), ["c1", "h1", "c2", "h2", "c3"]);
}

/// Many tasks writing at once all succeed (no "database is locked"), and every row and
/// event is stored once with a distinct `seq`.
pub async fn concurrent_writers_all_succeed<S: Storage + Inspect>(store: S) {
    const TASKS: usize = 8;
    const WRITES: usize = 25;
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for i in 0..WRITES {
                let id = format!("w{task}-{i}");
                let shard = (task % 4) as u32;
                let batch = WriteBatch {
                    events: vec![event(&id, "Written", t0())],
                    messages: vec![
                        command(shard, &format!("t{task}"), &id),
                        command(shard, &format!("u{task}"), &id),
                    ],
                };
                let report = store.write(batch).await.expect("concurrent write failed");
                assert_eq!((report.written, report.events), (2, 1));
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer task panicked");
    }
    let counts = store.counts(None).await.expect("counts");
    assert_eq!(counts.to_deliver, (TASKS * WRITES * 2) as u64);
    let rows = store.rows().await.expect("rows");
    assert!(rows.windows(2).all(|w| w[0].seq < w[1].seq));
    let events = store
        .read_events(0, &[], None, TASKS * WRITES * 2)
        .await
        .expect("events");
    assert_eq!(events.len(), TASKS * WRITES);
}

/// `write_all` writes every batch with a report of its own, in order: a duplicate of an
/// earlier batch's row counts in the later batch's report, events are appended in batch
/// order, and the rows are read back as if written one batch at a time.
pub async fn write_all_reports_each_batch<S: Storage + Inspect>(store: S) {
    let first = messages(vec![command(1, "a", "s1"), command(3, "b", "s2")]);
    let second = WriteBatch {
        events: vec![super::fixtures::event("e1", "booked", t0())],
        messages: vec![command(1, "a", "s1"), command(1, "c", "s3")],
    };
    let reports = store
        .write_all(vec![first, WriteBatch::default(), second])
        .await
        .expect("write_all");
    assert_eq!(
        reports,
        vec![
            WriteReport {
                events: 0,
                written: 2,
                duplicates: 0,
                shards: vec![ShardIndex(1), ShardIndex(3)],
            },
            WriteReport::default(),
            WriteReport {
                events: 1,
                written: 1,
                duplicates: 1,
                shards: vec![ShardIndex(1)],
            },
        ]
    );
    let page = store
        .read_page(ShardIndex(1), t0(), 10)
        .await
        .expect("read");
    assert_eq!(signals(&page.messages), ["s1", "s3"]);
    let events = store.read_events(0, &[], None, 10).await.expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.id.0, "e1");
}

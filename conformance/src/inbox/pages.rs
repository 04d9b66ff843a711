//! Inbox cases: rows read in `seq` order, page by page, as they fall due, replayed rows
//! interleaved.

use super::*;

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

//! Inbox cases: concurrent writers, and a group write's report per batch.

use super::*;

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
        events: vec![crate::fixtures::event("e1", "booked", t0())],
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

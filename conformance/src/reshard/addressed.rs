//! Re-sharding cases: writes addressed by a shard count are checked against the recorded one,
//! counted, and refused whole when it differs.

use super::*;

/// A write addressed by another count than the recorded one is refused whole (no row, no
/// event), naming both counts; by the recorded count, or with none recorded, it is written.
pub async fn a_write_addressed_by_another_count_is_refused_whole<S: Storage + Inspect>(store: S) {
    let batch = || {
        let mut b = messages(vec![routed(4, "a", "a-1"), routed(4, "bb", "bb-1")]);
        b.events = vec![event("e-1", "account.event", secs(0))];
        b
    };
    let reports = store
        .write_all_addressed(vec![batch()], 4)
        .await
        .expect("nothing recorded: written");
    assert_eq!(reports[0].written, 2);
    store.claim_shard_count(8).await.expect("claim");
    let mut other = batch();
    other.messages = vec![routed(4, "ccc", "ccc-1")];
    other.events = vec![event("e-2", "account.event", secs(0))];
    let refused = store.write_all_addressed(vec![other.clone()], 4).await;
    assert_count_changed(&refused, 4, 8);
    let rows = store.rows().await.expect("rows");
    assert_eq!(rows.len(), 2, "the refused row was not written");
    let events = store.read_events(0, &[], None, 100).await.expect("events");
    assert_eq!(
        events.len(),
        1,
        "the refused batch's event was not appended"
    );
    let mut readdressed = other;
    readdressed.messages = vec![routed(8, "ccc", "ccc-1")];
    let reports = store
        .write_all_addressed(vec![readdressed], 8)
        .await
        .expect("addressed by the recorded count");
    assert_eq!((reports[0].written, reports[0].events), (1, 1));
}

/// Batches of messages addressed by a count (a send, a send group; on PostgreSQL one
/// statement that checks and inserts them all) report each its rows written, their shards and
/// its duplicates — a key in two batches of a group is written by the first — and are refused
/// whole by another recorded count.
pub async fn addressed_writes_of_messages_are_checked_and_counted<S: Storage + Inspect>(store: S) {
    let batch = |count: u32, ids: &[&str]| {
        messages(
            ids.iter()
                .map(|id| routed(count, id, &format!("{id}-1")))
                .collect(),
        )
    };
    let report = store
        .write_all_addressed(vec![batch(4, &["a", "bb"])], 4)
        .await
        .expect("nothing recorded: written")
        .remove(0);
    assert_eq!((report.written, report.duplicates), (2, 0));
    assert_eq!(report.shards, [ShardIndex(1), ShardIndex(2)]);
    let again = store
        .write_all_addressed(vec![batch(4, &["a", "bb"])], 4)
        .await
        .expect("duplicates")
        .remove(0);
    assert_eq!((again.written, again.duplicates), (0, 2));
    assert!(again.shards.is_empty(), "{:?}", again.shards);
    store.claim_shard_count(8).await.expect("claim");
    let refused = store.write_all_addressed(vec![batch(4, &["ccc"])], 4).await;
    assert_count_changed(&refused, 4, 8);
    assert_eq!(
        store.rows().await.expect("rows").len(),
        2,
        "nothing written"
    );
    let report = store
        .write_all_addressed(vec![batch(8, &["ccc", "a"])], 8)
        .await
        .expect("addressed by the recorded count")
        .remove(0);
    assert_eq!((report.written, report.duplicates), (1, 1));
    assert_eq!(report.shards, [ShardIndex(3)]);

    // A group: the second batch repeats a key of the first and of the store.
    let group = vec![batch(8, &["dddd", "e"]), batch(8, &["e", "ccc", "ffffff"])];
    let reports = store
        .write_all_addressed(group.clone(), 8)
        .await
        .expect("a group by the recorded count");
    let counted: Vec<_> = reports
        .iter()
        .map(|r| (r.written, r.duplicates, r.shards.clone()))
        .collect();
    assert_eq!(
        counted,
        [
            (2, 0, vec![ShardIndex(1), ShardIndex(4)]),
            (1, 2, vec![ShardIndex(6)]),
        ]
    );
    let refused = store.write_all_addressed(group, 4).await;
    assert_count_changed(&refused, 4, 8);
    assert_eq!(
        store.rows().await.expect("rows").len(),
        6,
        "nothing more written"
    );
}

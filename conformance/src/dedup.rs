//! Deduplication cases: duplicates in a batch, across writes, of delivered rows kept for
//! their window, and the tenant as part of the key.

use super::fixtures::*;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{EntityKey, WriteReport};
use shardbox_core::{ShardIndex, Storage};

/// The same signal to the same target is stored once; the first write wins; another target
/// or kind with the same signal is another row.
pub async fn duplicate_write_is_ignored_and_counted<S: Storage + Inspect>(store: S) {
    let changed = with(command(0, "a", "s1"), |m| m.payload = b"second".to_vec());
    let batch = vec![
        command(0, "a", "s1"),
        changed.clone(),
        command(0, "b", "s1"),
        with(command(0, "a", "s1"), |m| m.target_kind = "ledger".into()),
    ];
    let report = store.write(messages(batch)).await.expect("write");
    assert_eq!((report.written, report.duplicates), (3, 1));

    let report = store.write(messages(vec![changed])).await.expect("write");
    assert_eq!(
        report,
        WriteReport {
            events: 0,
            written: 0,
            duplicates: 1,
            shards: vec![],
        }
    );
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    assert_eq!(page.messages.len(), 3);
    assert_eq!(
        page.messages[0].message.payload,
        command(0, "a", "s1").message.payload,
        "the first write wins"
    );
    let counts = store.counts(None).await.expect("counts");
    assert_eq!(counts.to_deliver, 3);
}

/// A duplicate of a row delivered on an earlier page is refused while the row is kept (until
/// `keep_until`), and accepted again once the row was purged.
pub async fn duplicate_of_delivered_row_is_ignored_until_purged<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(0);
    store
        .write(messages(vec![command(0, "a", "s1"), command(0, "a", "s2")]))
        .await
        .expect("write");
    let lease = pick(&store, 0, "node-a", t0()).await;
    let first = store.read_page(shard, t0(), 1).await.expect("read");
    assert_eq!(signals(&first.messages), ["s1"]);
    let old_seq = first.messages[0].seq;
    store
        .commit_stage(stage(&lease, t0(), vec![delivered(old_seq, secs(60))]))
        .await
        .expect("commit");

    let again = with(command(0, "a", "s1"), |m| m.payload = b"again".to_vec());
    let report = store
        .write(messages(vec![again.clone()]))
        .await
        .expect("write");
    assert_eq!((report.written, report.duplicates), (0, 1));
    let page = store.read_page(shard, secs(1), 10).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["s2"],
        "the delivered row is not redelivered"
    );

    let mut commit = stage(
        &lease,
        secs(30),
        vec![delivered(page.messages[0].seq, secs(90))],
    );
    commit.purge_delivered = 10;
    let report = store.commit_stage(commit).await.expect("commit");
    assert_eq!(report.purged, 0, "no window has passed at 30 s");
    let report = store
        .write(messages(vec![again.clone()]))
        .await
        .expect("write");
    assert_eq!(report.duplicates, 1, "still kept at 30 s");

    let mut commit = stage(&lease, secs(60), vec![]);
    commit.purge_delivered = 10;
    let report = store.commit_stage(commit).await.expect("commit");
    assert_eq!(report.purged, 1, "s1's window ends at 60 s, s2's at 90 s");

    let report = store.write(messages(vec![again])).await.expect("write");
    assert_eq!((report.written, report.duplicates), (1, 0));
    let page = store.read_page(shard, secs(60), 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["s1"]);
    assert!(page.messages[0].seq > old_seq);
    assert_eq!(page.messages[0].message.payload, b"again");
}

/// The same target id and signal in two tenants are two rows and two states.
pub async fn tenant_isolation<S: Storage + Inspect>(store: S) {
    let batch = vec![
        with(command(0, "a", "s1"), |m| m.tenant = "t1".into()),
        with(command(0, "a", "s1"), |m| m.tenant = "t2".into()),
    ];
    let report = store.write(messages(batch)).await.expect("write");
    assert_eq!((report.written, report.duplicates), (2, 0));
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    let tenants: Vec<&str> = page
        .messages
        .iter()
        .map(|r| r.message.tenant.as_str())
        .collect();
    assert_eq!(tenants, ["t1", "t2"]);

    let lease = pick(&store, 0, "node-a", t0()).await;
    let k1 = EntityKey {
        tenant: "t1".into(),
        ..key("a")
    };
    let k2 = EntityKey {
        tenant: "t2".into(),
        ..key("a")
    };
    let mut commit = stage(&lease, t0(), vec![]);
    commit.states = vec![
        state(k1.clone(), Some("one")),
        state(k2.clone(), Some("two")),
    ];
    store.commit_stage(commit).await.expect("commit");
    let mut states = store.load_states(&[k1, k2]).await.expect("load");
    states.sort_by(|a, b| a.key.cmp(&b.key));
    let got: Vec<(&str, &[u8], i64)> = states
        .iter()
        .map(|s| (s.key.tenant.as_str(), s.state.as_slice(), s.version))
        .collect();
    assert_eq!(got, [("t1", &b"one"[..], 1), ("t2", &b"two"[..], 1)]);
}

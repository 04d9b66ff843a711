//! Failure cases: the reads of rows whose TTL passed, due or not.

use super::*;

/// Rows whose TTL has passed are found per shard whether due or not (delayed, backed off),
/// in seq order and up to a limit; rows still alive, delivered or blocked are not; a
/// retrying row whose TTL passed does not make its target wait.
pub async fn expired_rows_are_found_due_or_not<S: Storage + Inspect>(store: S) {
    let ttl = |w, at| with(w, |m| m.expires_at = Some(at));
    store
        .write(messages(vec![
            ttl(command(0, "a", "a1"), secs(10)),
            ttl(
                with(command(0, "b", "b1"), |m| m.deliver_after = Some(secs(100))),
                secs(5),
            ),
            ttl(command(0, "c", "c1"), secs(60)),
            command(0, "d", "d1"),
            ttl(command(2, "e", "e1"), secs(1)),
            ttl(command(3, "f", "f1"), secs(1)),
            ttl(command(4, "g", "g1"), secs(1)),
            ttl(command(0, "h", "h1"), secs(1)),
        ]))
        .await
        .expect("write");
    assert!(store
        .expired_shards(t0())
        .await
        .expect("expired")
        .is_empty());
    // f1 is delivered (kept for dedup), g1 blocked: neither is expired by a sweep.
    let f1 = row_of(&store, "f1").await;
    commit_at(&store, 3, t0(), vec![delivered(f1.seq, secs(60))]).await;
    let g1 = row_of(&store, "g1").await;
    commit_at(&store, 4, t0(), vec![block(g1.seq, 1, "bad")]).await;
    // h1 failed and waits for a retry at 30 s; its TTL ends before.
    let h1 = row_of(&store, "h1").await;
    commit_at(&store, 0, t0(), vec![retry(h1.seq, secs(30), 1, "boom")]).await;

    assert_eq!(
        store.expired_shards(secs(10)).await.expect("expired"),
        vec![ShardIndex(0), ShardIndex(2)]
    );
    let rows = store
        .read_expired(ShardIndex(0), secs(10), 10)
        .await
        .expect("read");
    assert_eq!(
        signals(&rows),
        ["a1", "b1", "h1"],
        "due or not, in seq order"
    );
    let rows = store
        .read_expired(ShardIndex(0), secs(10), 2)
        .await
        .expect("read");
    assert_eq!(signals(&rows), ["a1", "b1"]);
    let rows = store
        .read_expired(ShardIndex(0), secs(5), 10)
        .await
        .expect("read");
    assert_eq!(signals(&rows), ["b1", "h1"], "a1 lives until 10 s");
    let page = store
        .read_page(ShardIndex(0), secs(10), 10)
        .await
        .expect("read");
    // An expired retry still holds its target until it is expired (a sweep's stage, which
    // releases the rows held behind it, or the page that reads it at its retry time): later
    // rows of the target must not overtake the rows already held behind it.
    assert_eq!(
        page.waiting,
        vec![(key("h"), secs(30))],
        "h waits behind its expired retry until that is expired"
    );
}

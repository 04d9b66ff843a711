//! Failure cases: the first-failure time kept across retries, and a blocked row that stops
//! only its own target.

use super::*;

/// The first failure's time is set by the first retry and kept by later ones; a dead letter
/// carries its first and last attempt times and the original row whole.
pub async fn first_failure_time_is_kept_across_retries<S: Storage + Inspect>(store: S) {
    store
        .write(messages(vec![with(command(0, "a", "a1"), |m| {
            m.payload_version = 3;
        })]))
        .await
        .expect("write");
    let a1 = row_of(&store, "a1").await;
    assert_eq!(a1.first_failed_at, None);
    commit_at(&store, 0, secs(1), vec![retry(a1.seq, secs(2), 1, "e1")]).await;
    assert_eq!(row_of(&store, "a1").await.first_failed_at, Some(secs(1)));
    commit_at(&store, 0, secs(2), vec![retry(a1.seq, secs(4), 2, "e2")]).await;
    let a1 = row_of(&store, "a1").await;
    assert_eq!(
        (a1.first_failed_at, a1.attempts, a1.last_error.as_deref()),
        (Some(secs(1)), 2, Some("e2"))
    );
    kill(&store, &a1, "e3", secs(4)).await;
    let dead = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("list");
    assert_eq!(dead.len(), 1);
    let letter = &dead[0].letter;
    assert_eq!(letter.original, a1, "the original row round-trips");
    assert_eq!(letter.original.message.payload_version, 3);
    assert_eq!(
        (
            letter.first_attempt_at,
            letter.last_attempt_at,
            letter.attempts
        ),
        (Some(secs(1)), secs(4), 3)
    );
    assert_eq!(store.dead_letters().await.expect("inspect").len(), 1);
}

/// A blocked row is never read by pages nor counted as pending; its target is reported with
/// the page until an operator acts; the target's other rows and other targets are read.
pub async fn blocked_row_stops_only_its_target<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(1);
    store
        .write(messages(vec![
            command(1, "a", "a1"),
            command(1, "a", "a2"),
            command(1, "b", "b1"),
        ]))
        .await
        .expect("write");
    let a1 = row_of(&store, "a1").await;
    commit_at(&store, 1, secs(1), vec![retry(a1.seq, secs(2), 1, "boom")]).await;
    commit_at(&store, 1, secs(2), vec![block(a1.seq, 2, "boom again")]).await;

    let page = store.read_page(shard, secs(3), 10).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["a2", "b1"],
        "blocked row not read"
    );
    assert_eq!(page.blocked, vec![key("a")]);
    assert!(page.waiting.is_empty(), "{:?}", page.waiting);
    let other = store
        .read_page(ShardIndex(0), secs(3), 10)
        .await
        .expect("read");
    assert!(other.blocked.is_empty(), "blocked targets are per shard");
    let counts = store.counts(Some(shard)).await.expect("counts");
    assert_eq!(
        (counts.to_deliver, counts.blocked, counts.pending()),
        (2, 1, 2)
    );
    assert_eq!(
        store.next_due(shard, secs(3)).await.expect("next_due"),
        None,
        "a blocked row is never due"
    );
    let blocked = store.blocked_targets(10).await.expect("blocked");
    assert_eq!(blocked.len(), 1);
    let b = &blocked[0];
    assert_eq!(
        (b.target.clone(), b.shard, b.seq),
        (key("a"), shard, a1.seq)
    );
    assert_eq!(b.signal_id.0, "a1");
    assert_eq!(
        (
            b.attempts,
            b.last_error.as_deref(),
            b.first_failed_at,
            b.blocked_at
        ),
        (2, Some("boom again"), Some(secs(1)), Some(secs(2)))
    );
    let row = row_of(&store, "a1").await;
    assert_eq!(row.status, MessageStatus::Blocked);
    assert!(store.blocked_targets(0).await.expect("blocked").is_empty());
}

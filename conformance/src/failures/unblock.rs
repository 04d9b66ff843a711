//! Failure cases: the operators' unblock (requeue, drop, dead-letter), and the rows parked
//! behind a block until the unblock.

use super::*;

/// Unblock by requeue puts the blocked row back in its place (same seq, due, attempts 0, no
/// TTL); by drop deletes it; by dead letter moves it with its origin. Only blocked rows are
/// touched: a target that is not blocked is left alone.
pub async fn unblock_by_requeue_drop_or_dead_letter<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(2);
    store
        .write(messages(vec![
            with(command(2, "a", "a1"), |m| m.expires_at = Some(secs(5))),
            command(2, "a", "a2"),
            command(2, "b", "b1"),
            command(2, "c", "c1"),
        ]))
        .await
        .expect("write");
    let (a1, b1, c1) = (
        row_of(&store, "a1").await,
        row_of(&store, "b1").await,
        row_of(&store, "c1").await,
    );
    commit_at(
        &store,
        2,
        secs(1),
        vec![
            block(a1.seq, 1, "bad a"),
            block(b1.seq, 3, "bad b"),
            block(c1.seq, 1, "bad c"),
        ],
    )
    .await;
    assert_eq!(store.blocked_targets(10).await.expect("blocked").len(), 3);

    let untouched = store
        .unblock_target(&key("zzz"), Unblock::Requeue, secs(9))
        .await
        .expect("unblock");
    assert_eq!(untouched.unblocked, 0);

    let r = store
        .unblock_target(&key("a"), Unblock::Requeue, secs(9))
        .await
        .expect("unblock");
    assert_eq!((r.unblocked, r.shards.clone()), (1, vec![shard]));
    let page = store.read_page(shard, secs(9), 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["a1", "a2"], "back in its place");
    let back = &page.messages[0];
    assert_eq!(back.seq, a1.seq);
    assert_eq!(
        (back.attempts, back.last_error.clone(), back.first_failed_at),
        (0, None, None)
    );
    assert_eq!(
        (back.message.deliver_after, back.message.expires_at),
        (None, None),
        "due now, no TTL: the operator asked for a delivery"
    );
    assert_eq!(page.blocked, vec![key("b"), key("c")]);
    let again = store
        .unblock_target(&key("a"), Unblock::Drop, secs(9))
        .await
        .expect("unblock");
    assert_eq!(
        again.unblocked, 0,
        "a2 and a1 are not blocked: nothing dropped"
    );
    assert_eq!(store.rows().await.expect("rows").len(), 4);

    let r = store
        .unblock_target(&key("b"), Unblock::Drop, secs(9))
        .await
        .expect("unblock");
    assert_eq!(r.unblocked, 1);
    let r = store
        .unblock_target(&key("c"), Unblock::DeadLetter, secs(10))
        .await
        .expect("unblock");
    assert_eq!(r.unblocked, 1);
    assert!(store.blocked_targets(10).await.expect("blocked").is_empty());
    assert_eq!(signals(&store.rows().await.expect("rows")), ["a1", "a2"]);
    let dead = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("list");
    assert_eq!(dead.len(), 1);
    let letter = &dead[0].letter;
    assert_eq!(letter.original.message.signal_id.0, "c1");
    assert_eq!(letter.reason, "unblocked by operator: bad c");
    assert_eq!(
        (
            letter.attempts,
            letter.first_attempt_at,
            letter.last_attempt_at
        ),
        (1, Some(secs(1)), secs(10))
    );
    assert_eq!(store.counts(Some(shard)).await.expect("counts").blocked, 0);
}

/// Row `seq` waits behind a blocked message of its target.
fn behind_block(seq: i64) -> RowUpdate {
    RowUpdate {
        seq,
        change: RowChange::BehindBlock,
    }
}

/// Rows parked behind a blocked message (with a block of the same commit or an earlier one)
/// are not read, not due and not waited for by a timer, yet counted as pending and found by
/// a TTL sweep; a row "behind a block" whose target is not blocked at commit stays due; an
/// unblock (requeue or drop) makes all of the target's parked rows due at once, whatever the
/// reader's clock, so that the next page reads them in `seq` order.
pub async fn rows_behind_a_block_are_parked_until_the_unblock<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(1);
    park_rows_behind_blocks(&store).await;
    parked_rows_wait_for_the_unblock(&store, shard).await;
    let r = store
        .unblock_target(&key("a"), Unblock::Requeue, secs(100))
        .await
        .expect("unblock");
    assert_eq!(
        (r.unblocked, r.released, r.shards.clone()),
        (1, 3, vec![shard])
    );
    // A reader whose clock is behind the operator's still finds them due.
    let page = store.read_page(shard, secs(3), 10).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["a1", "a2", "a3", "b1", "d1", "a4"],
        "the target's rows, due at once, in seq order"
    );
    assert_eq!(page.blocked, vec![key("c")]);

    let r = store
        .unblock_target(&key("c"), Unblock::Drop, secs(100))
        .await
        .expect("unblock");
    assert_eq!((r.unblocked, r.released), (1, 1));
    let page = store.read_page(shard, secs(3), 10).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["a1", "a2", "a3", "b1", "c2", "d1", "a4"]
    );
    assert!(page.blocked.is_empty());
}

/// Rows of shard 1 for targets a..d: a1 and c1 blocked, the rows after them parked behind
/// their block — a4 arriving later with a TTL, parked by the stage that first reads it —,
/// and d1, read while d was blocked but committed after its unblock, left due.
async fn park_rows_behind_blocks<S: Storage + Inspect>(store: &S) {
    store
        .write(messages(vec![
            command(1, "a", "a1"),
            command(1, "a", "a2"),
            command(1, "c", "c1"),
            command(1, "a", "a3"),
            command(1, "b", "b1"),
            command(1, "c", "c2"),
            command(1, "d", "d1"),
        ]))
        .await
        .expect("write");
    let seq = |rows: &[InboxMessage], signal: &str| {
        rows.iter()
            .find(|r| r.message.signal_id.0 == signal)
            .map(|r| r.seq)
            .unwrap_or_else(|| panic!("row {signal}"))
    };
    let rows = store.rows().await.expect("rows");
    commit_at(
        store,
        1,
        secs(1),
        vec![
            block(seq(&rows, "a1"), 1, "bad a"),
            behind_block(seq(&rows, "a2")),
            block(seq(&rows, "c1"), 1, "bad c"),
            behind_block(seq(&rows, "c2")),
            // Read while d was blocked, committed after its unblock: not parked.
            behind_block(seq(&rows, "d1")),
        ],
    )
    .await;
    // a4 arrives later, with a TTL, and is parked by the stage that first reads it.
    store
        .write(messages(vec![with(command(1, "a", "a4"), |m| {
            m.expires_at = Some(secs(500))
        })]))
        .await
        .expect("write");
    let rows = store.rows().await.expect("rows");
    commit_at(
        store,
        1,
        secs(2),
        vec![
            behind_block(seq(&rows, "a3")),
            behind_block(seq(&rows, "a4")),
        ],
    )
    .await;
}

/// Parked rows are not read, have no due time, are still pending and still expire.
async fn parked_rows_wait_for_the_unblock<S: Storage + Inspect>(store: &S, shard: ShardIndex) {
    let page = store.read_page(shard, secs(100), 10).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["b1", "d1"],
        "parked rows are not read"
    );
    assert_eq!(page.blocked, vec![key("a"), key("c")]);
    assert!(page.waiting.is_empty(), "{:?}", page.waiting);
    assert_eq!(page.next_due, None, "parked rows have no due time");
    assert_eq!(
        store.next_due(shard, secs(100)).await.expect("next due"),
        None
    );
    let counts = store.counts(Some(shard)).await.expect("counts");
    assert_eq!(
        (counts.to_deliver, counts.blocked, counts.pending()),
        (6, 2, 6),
        "parked rows are still pending: they go on after an unblock"
    );
    assert_eq!(
        store.expired_shards(secs(600)).await.expect("expired"),
        vec![shard],
        "a parked row's TTL still runs"
    );
    assert_eq!(
        signals(
            &store
                .read_expired(shard, secs(600), 10)
                .await
                .expect("expired")
        ),
        ["a4"]
    );
}

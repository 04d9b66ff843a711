//! Failure cases: first-failure times, blocked rows and targets, the operators' dead-letter
//! and unblock API, TTL expiry reads, lease takeovers.

use super::fixtures::*;
use chrono::{DateTime, Utc};
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{
    DeadLetter, DeadLetterFilter, DeadLetterId, Requeue, RowChange, RowUpdate, Unblock,
};
use shardbox_core::{InboxMessage, Lease, MessageStatus, ShardIndex, Storage};
use std::sync::Arc;

fn retry(seq: i64, at: DateTime<Utc>, attempts: u32, error: &str) -> RowUpdate {
    RowUpdate {
        seq,
        change: RowChange::RetryAt {
            at,
            attempts,
            error: error.into(),
            errors: Default::default(),
        },
    }
}

fn block(seq: i64, attempts: u32, error: &str) -> RowUpdate {
    RowUpdate {
        seq,
        change: RowChange::Block {
            attempts,
            error: error.into(),
            errors: Default::default(),
        },
    }
}

/// Dead-letters `row` at `at` with `reason` in a fenced commit (removing it from the Inbox).
async fn kill<S: Storage>(store: &S, row: &InboxMessage, reason: &str, at: DateTime<Utc>) {
    let lease: Lease = pick(store, row.shard.0, "node-a", at).await;
    let mut commit = stage(
        &lease,
        at,
        vec![RowUpdate {
            seq: row.seq,
            change: RowChange::Remove,
        }],
    );
    commit.dead_letters = vec![DeadLetter {
        original: row.clone(),
        reason: reason.into(),
        attempts: row.attempts + 1,
        first_attempt_at: Some(row.first_failed_at.unwrap_or(at)),
        last_attempt_at: at,
    }];
    store.commit_stage(commit).await.expect("commit");
    store.release(&lease).await.expect("release");
}

async fn row_of<S: Storage + Inspect>(store: &S, signal: &str) -> InboxMessage {
    store
        .rows()
        .await
        .expect("rows")
        .into_iter()
        .find(|r| r.message.signal_id.0 == signal)
        .unwrap_or_else(|| panic!("row {signal} is in the Inbox"))
}

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
        &store,
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
        &store,
        1,
        secs(2),
        vec![
            behind_block(seq(&rows, "a3")),
            behind_block(seq(&rows, "a4")),
        ],
    )
    .await;

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

/// Dead letters are listed oldest first and filtered by kind, target, tenant, time, ids and
/// position, with a limit; counting ignores the limit; a purge removes what its filter
/// selects and nothing else.
pub async fn dead_letters_are_listed_counted_and_purged_by_filter<S: Storage + Inspect>(store: S) {
    store
        .write(messages(vec![
            command(0, "a", "a1"),
            command(0, "a", "a2"),
            with(command(0, "b", "b1"), |m| m.target_kind = "order".into()),
            with(command(0, "c", "c1"), |m| m.tenant = "t1".into()),
        ]))
        .await
        .expect("write");
    for (signal, at) in [("a1", 10), ("a2", 20), ("b1", 30), ("c1", 40)] {
        let row = row_of(&store, signal).await;
        kill(&store, &row, &format!("dead {signal}"), secs(at)).await;
    }
    let list = |f: DeadLetterFilter| {
        let store = &store;
        async move {
            store
                .list_dead_letters(&f)
                .await
                .expect("list")
                .into_iter()
                .map(|d| d.letter.original.message.signal_id.0)
                .collect::<Vec<_>>()
        }
    };
    let all = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("list");
    let ids: Vec<DeadLetterId> = all.iter().map(|d| d.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first: {ids:?}");
    assert_eq!(
        list(DeadLetterFilter::all()).await,
        ["a1", "a2", "b1", "c1"]
    );
    assert_eq!(list(DeadLetterFilter::all().kind("order")).await, ["b1"]);
    assert_eq!(
        list(DeadLetterFilter::all().target("account", "a")).await,
        ["a1", "a2"]
    );
    assert_eq!(list(DeadLetterFilter::all().tenant("t1")).await, ["c1"]);
    assert_eq!(
        list(DeadLetterFilter::all().since(secs(20)).until(secs(40))).await,
        ["a2", "b1"]
    );
    assert_eq!(
        list(DeadLetterFilter::ids([ids[3], ids[0]])).await,
        ["a1", "c1"]
    );
    assert_eq!(
        list(DeadLetterFilter::all().after(ids[1])).await,
        ["b1", "c1"]
    );
    assert_eq!(
        list(DeadLetterFilter::all().limit(3)).await,
        ["a1", "a2", "b1"]
    );
    let count = |f: DeadLetterFilter| {
        let store = &store;
        async move { store.count_dead_letters(&f).await.expect("count") }
    };
    assert_eq!(count(DeadLetterFilter::all().limit(1)).await, 4);
    assert_eq!(count(DeadLetterFilter::all().kind("account")).await, 3);
    assert_eq!(count(DeadLetterFilter::all().kind("nothing")).await, 0);

    let purged = store
        .purge_dead_letters(&DeadLetterFilter::all().kind("account").limit(1))
        .await
        .expect("purge");
    assert_eq!(purged, 1);
    assert_eq!(list(DeadLetterFilter::all()).await, ["a2", "b1", "c1"]);
    let purged = store
        .purge_dead_letters(&DeadLetterFilter::all().until(secs(35)))
        .await
        .expect("purge");
    assert_eq!(purged, 2);
    assert_eq!(list(DeadLetterFilter::all()).await, ["c1"]);
    assert_eq!(store.dead_letters().await.expect("inspect").len(), 1);
}

/// A requeue puts a dead letter back as a new row in the given shard (same signal, payload
/// and metadata, attempts 0, due, no TTL) and removes it from the dead letters; a signal
/// already in the target's Inbox is not written twice; unknown ids are counted as missing;
/// letters without a target stay.
pub async fn requeued_dead_letters_return_to_the_inbox<S: Storage + Inspect>(store: S) {
    store
        .write(messages(vec![
            with(command(0, "a", "a1"), |m| {
                m.expires_at = Some(secs(5));
                m.deliver_after = Some(secs(-1));
                m.payload_version = 2;
            }),
            command(0, "b", "b1"),
            with(command(0, "", "orphan"), |m| m.target_kind = "order".into()),
        ]))
        .await
        .expect("write");
    let a1 = row_of(&store, "a1").await;
    kill(&store, &a1, "dead a1", secs(1)).await;
    let b1 = row_of(&store, "b1").await;
    kill(&store, &b1, "dead b1", secs(1)).await;
    let orphan = row_of(&store, "orphan").await;
    kill(&store, &orphan, "unroutable", secs(1)).await;
    // b1 is sent again by its producer meanwhile: the same signal is back in the Inbox.
    store
        .write(messages(vec![command(0, "b", "b1")]))
        .await
        .expect("write");
    let ids: Vec<DeadLetterId> = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("list")
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(ids.len(), 3);
    let requeue = |id, shard| Requeue {
        id,
        shard: ShardIndex(shard),
    };
    let report = store
        .requeue_dead_letters(
            vec![
                requeue(ids[0], 3),
                requeue(ids[1], 0),
                requeue(ids[2], 0),
                requeue(DeadLetterId(i64::MAX), 0),
            ],
            SHARDS,
            secs(2),
        )
        .await
        .expect("requeue");
    assert_eq!(
        (
            report.requeued,
            report.already_in_inbox,
            report.missing,
            report.skipped
        ),
        (1, 1, 1, 1),
        "{report:?}"
    );
    assert_eq!(report.shards, vec![ShardIndex(3)]);
    let left = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("list");
    assert_eq!(left.len(), 1, "only the letter without a target stays");
    assert_eq!(left[0].id, ids[2]);

    let page = store
        .read_page(ShardIndex(3), secs(2), 10)
        .await
        .expect("read");
    assert_eq!(signals(&page.messages), ["a1"]);
    let back = &page.messages[0];
    assert!(back.seq > a1.seq, "a new row");
    assert_eq!(back.shard, ShardIndex(3), "in the shard the caller gave");
    assert_eq!((back.attempts, back.first_failed_at), (0, None));
    assert_eq!(back.status, MessageStatus::ToDeliver);
    assert_eq!(
        (back.message.deliver_after, back.message.expires_at),
        (None, None)
    );
    assert_eq!(back.message.payload, a1.message.payload);
    assert_eq!(
        back.message.payload_version, 2,
        "the payload's version is kept: it is upcast as it was written"
    );
    assert_eq!(back.message.metadata, a1.message.metadata);
    assert_eq!(back.message.received_at, a1.message.received_at);

    let again = store
        .requeue_dead_letters(vec![requeue(ids[0], 3)], SHARDS, secs(3))
        .await
        .expect("requeue");
    assert_eq!(
        (again.requeued, again.missing),
        (0, 1),
        "requeued once only"
    );
}

/// Two operators requeue the same dead letters at once: each is requeued exactly once.
pub async fn concurrent_requeue_of_one_dead_letter_requeues_it_once<S: Storage + Inspect>(
    store: S,
) {
    let writes: Vec<_> = (0..20)
        .map(|i| command(0, &format!("t{i}"), &format!("s{i}")))
        .collect();
    store.write(messages(writes)).await.expect("write");
    for row in store.rows().await.expect("rows") {
        kill(&store, &row, "dead", secs(1)).await;
    }
    let ids: Vec<DeadLetterId> = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("list")
        .iter()
        .map(|d| d.id)
        .collect();
    let store = Arc::new(store);
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
        let requeue: Vec<Requeue> = ids
            .iter()
            .map(|id| Requeue {
                id: *id,
                shard: ShardIndex(1),
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .requeue_dead_letters(requeue, SHARDS, secs(2))
                .await
                .expect("requeue")
        }));
    }
    let (mut requeued, mut missing, mut already) = (0, 0, 0);
    for t in tasks {
        let r = t.await.expect("task");
        requeued += r.requeued;
        missing += r.missing;
        already += r.already_in_inbox;
    }
    assert_eq!((requeued, already, missing), (20, 0, 60));
    assert_eq!(
        store
            .counts(Some(ShardIndex(1)))
            .await
            .expect("c")
            .to_deliver,
        20
    );
    assert_eq!(
        store
            .count_dead_letters(&DeadLetterFilter::all())
            .await
            .expect("count"),
        0
    );
}

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

/// A pick-up says whether it took over a lease that expired without a release.
pub async fn pick_up_tells_a_takeover_from_a_free_shard<S: Storage + Inspect>(store: S) {
    let a = pick(&store, 6, "node-a", t0()).await;
    assert!(!a.taken_over, "never picked up before");
    store.release(&a).await.expect("release");
    let b = pick(&store, 6, "node-b", secs(1)).await;
    assert!(!b.taken_over, "released: free, not taken over");
    // node-b vanishes: its lease (until 31 s) runs out.
    let c = pick(&store, 6, "node-c", secs(31)).await;
    assert!(c.taken_over, "expired without a release");
    assert!(c.epoch > b.epoch);
    store.release(&c).await.expect("release");
    let d = pick(&store, 6, "node-a", secs(40)).await;
    assert!(!d.taken_over);
}

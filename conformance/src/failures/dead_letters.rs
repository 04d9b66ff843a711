//! Failure cases: the operators' dead-letter API (list, count, purge by filter, requeue), and
//! a requeue raced by another.

use super::*;

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

//! Inbox cases: the counts by status, and the depths by wait and by kind.

use super::*;

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

//! Re-sharding cases: the switch moves every row and record to its target's shard and re-lays
//! the lock table, or writes nothing.

use super::*;

/// The switch gives every inbox row of every status (due, delayed, retrying, delivered) and
/// every dead letter the shard of its target among the new count, keeps each row's `seq`,
/// status and times, computes running catch-ups' affected shards again, frees the leases,
/// drops lock-table rows outside the layout and starts new ones above every epoch, records
/// the count and ends the announcement. Pages of the new shards then hold each target's rows
/// in `seq` order.
pub async fn a_reshard_switch_moves_every_row_to_its_targets_shard<S: Storage + Inspect>(store: S) {
    let job = seed_rows_of_every_status(&store).await;
    let before: BTreeMap<i64, _> = store
        .rows()
        .await
        .expect("rows")
        .into_iter()
        .map(|r| (r.seq, r))
        .collect();
    let top_epoch = store
        .sessions()
        .await
        .expect("sessions")
        .iter()
        .map(|s| s.epoch.0)
        .max()
        .unwrap_or(0);

    let announced = ReshardAnnouncement {
        by: node("operator"),
        to: 8,
        until: secs(100),
    };
    store
        .announce_reshard(&announced, secs(2))
        .await
        .expect("announce");
    let leases = hold_all(&store, 4, secs(2)).await;
    let moves = store
        .reshard(ReshardSwitch {
            from: 4,
            to: 8,
            leases,
            route: route(8),
        })
        .await
        .expect("switch");

    assert_rows_moved_and_unchanged(&store, &before, &moves).await;
    assert_records_moved(&store, job.id, &moves).await;
    assert_lock_table_relaid(&store, top_epoch).await;
    assert_new_layout_served(&store, top_epoch).await;
}

/// Four shards of rows of every status: two per target (the second delayed), "a"'s first
/// delivered (kept for the window), "eeeee"'s first retrying, "ffffff"'s first
/// dead-lettered; and a running catch-up of two ids. Returns the catch-up.
async fn seed_rows_of_every_status<S: Storage + Inspect>(
    store: &S,
) -> shardbox_core::storage::CatchUpJob {
    store.claim_shard_count(4).await.expect("claim");
    let mut writes = Vec::new();
    for (n, id) in TARGETS.iter().enumerate() {
        writes.push(routed(4, id, &format!("{id}-1")));
        writes.push(with(routed(4, id, &format!("{id}-2")), |m| {
            m.deliver_after = Some(secs(60 + n as i64));
        }));
    }
    store.write(messages(writes)).await.expect("write");
    let rows = store.rows().await.expect("rows");
    let seq_of = |signal: &str| {
        rows.iter()
            .find(|r| r.message.signal_id.0 == signal)
            .map(|r| r.seq)
            .expect("row")
    };
    let lease = pick(store, 1, "node-a", secs(1)).await;
    let commit = stage(
        &lease,
        secs(1),
        vec![
            delivered(seq_of("a-1"), secs(600)),
            RowUpdate {
                seq: seq_of("eeeee-1"),
                change: RowChange::RetryAt {
                    at: secs(30),
                    attempts: 1,
                    error: "e1".into(),
                    errors: Default::default(),
                },
            },
        ],
    );
    store.commit_stage(commit).await.expect("commit");
    store.release(&lease).await.expect("release");
    let dead = rows
        .iter()
        .find(|r| r.message.signal_id.0 == "ffffff-1")
        .cloned()
        .expect("ffffff-1");
    let lease = pick(store, 2, "node-a", secs(1)).await;
    let mut commit = stage(
        &lease,
        secs(1),
        vec![RowUpdate {
            seq: dead.seq,
            change: RowChange::Remove,
        }],
    );
    commit.dead_letters = vec![DeadLetter {
        original: dead.clone(),
        reason: "dead".into(),
        attempts: 1,
        first_attempt_at: Some(secs(1)),
        last_attempt_at: secs(1),
    }];
    store.commit_stage(commit).await.expect("commit");
    store.release(&lease).await.expect("release");
    store
        .start_catch_up(spec("account", "", ids(&["ccc", "ggggggg"])), 4)
        .await
        .expect("catch-up")
}

/// Every row is in its target's shard among 8, with nothing but its shard changed, and the
/// switch counted the rows it read and moved.
async fn assert_rows_moved_and_unchanged<S: Storage + Inspect>(
    store: &S,
    before: &BTreeMap<i64, shardbox_core::InboxMessage>,
    moves: &shardbox_core::storage::ReshardMoves,
) {
    let after = store.rows().await.expect("rows");
    assert_eq!(after.len(), before.len(), "no row gained or lost");
    assert_eq!(moves.inbox_rows, before.len() as u64);
    let mut moved = 0;
    for row in &after {
        let old = &before[&row.seq];
        assert_eq!(
            row.shard,
            ShardIndex(row.message.target_id.len() as u32 % 8),
            "{} is in its target's shard among 8",
            row.message.signal_id
        );
        if row.shard != old.shard {
            moved += 1;
        }
        let mut unchanged = old.clone();
        unchanged.shard = row.shard;
        assert_eq!(
            row, &unchanged,
            "only the shard of {} changed",
            row.message.signal_id
        );
    }
    assert_eq!(moves.inbox_moved, moved);
    assert!(moved > 0);
}

/// The dead letter carries its target's new shard, and the running catch-up `job` its
/// shards among 8.
async fn assert_records_moved<S: Storage + Inspect>(
    store: &S,
    job: i64,
    moves: &shardbox_core::storage::ReshardMoves,
) {
    let letters = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("dead letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].letter.original.shard,
        ShardIndex(6),
        "the dead letter carries its target's new shard"
    );
    let job = store.catch_up(job).await.expect("read").expect("job");
    assert_eq!(
        job.spec.affected_shards,
        vec![ShardIndex(3), ShardIndex(7)],
        "the running catch-up's shards among 8"
    );
    assert_eq!(moves.catch_ups, 1);
}

/// The lock table holds the 8 shards, all free, the new ones above every epoch of the old
/// layout (`top_epoch`); the count is recorded and the announcement ended.
async fn assert_lock_table_relaid<S: Storage + Inspect>(store: &S, top_epoch: i64) {
    let sessions = store.sessions().await.expect("sessions");
    let shards: Vec<u32> = sessions.iter().map(|s| s.shard.0).collect();
    assert_eq!(
        shards,
        (0..8).collect::<Vec<_>>(),
        "the lock table of 8 shards"
    );
    for s in &sessions {
        assert_eq!(s.lease_until, None, "shard {} is free", s.shard);
        if s.shard.0 >= 4 {
            assert!(
                s.epoch.0 > top_epoch,
                "a new shard's epoch is above every old one"
            );
        }
    }
    let layout = store.layout().await.expect("layout");
    assert_eq!((layout.shard_count, layout.resharding), (Some(8), None));
}

/// The due rows are read from their new shards; a new shard can be picked up, one outside
/// the layout cannot, and gets no row.
async fn assert_new_layout_served<S: Storage + Inspect>(store: &S, top_epoch: i64) {
    for id in TARGETS {
        let shard = ShardIndex(id.len() as u32 % 8);
        let page = store.read_page(shard, secs(3), 100).await.expect("page");
        let signals = signals(&page.messages);
        let first = format!("{id}-1");
        let due = !["a", "eeeee", "ffffff"].contains(&id);
        assert_eq!(signals.contains(&first), due, "{id}: {signals:?}");
    }
    let lease = pick(store, 7, "node-a", secs(3)).await;
    assert!(lease.epoch.0 > top_epoch);
    let outside = store
        .pick_up(
            ShardIndex(9),
            &node("stale-node"),
            shardbox_core::WorkerId(0),
            secs(3),
            secs(30),
        )
        .await
        .expect("pick-up");
    assert_eq!(outside, None, "no lease outside the layout");
    let shards: Vec<u32> = store
        .sessions()
        .await
        .expect("sessions")
        .iter()
        .map(|s| s.shard.0)
        .collect();
    assert_eq!(
        shards,
        (0..8).collect::<Vec<_>>(),
        "no row outside the layout"
    );
}

/// The switch refuses, writing nothing, when the recorded count is not its `from` or when
/// one of its leases moved on (another holder took the shard).
pub async fn a_reshard_switch_is_refused_whole<S: Storage + Inspect>(store: S) {
    store.claim_shard_count(4).await.expect("claim");
    let writes: Vec<InboxWrite> = TARGETS
        .iter()
        .map(|id| routed(4, id, &format!("{id}-1")))
        .collect();
    store.write(messages(writes)).await.expect("write");
    let before = store.rows().await.expect("rows");
    let leases = hold_all(&store, 4, secs(1)).await;
    let refused = store
        .reshard(ReshardSwitch {
            from: 5,
            to: 8,
            leases: leases.clone(),
            route: route(8),
        })
        .await;
    assert_count_changed(&refused, 5, 4);
    // Shard 2's lease runs out and another node takes it over.
    let later = secs(1) + Duration::seconds(31);
    let taken = pick(&store, 2, "node-b", later).await;
    assert!(taken.taken_over);
    let refused = store
        .reshard(ReshardSwitch {
            from: 4,
            to: 8,
            leases,
            route: route(8),
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(StorageError::LeaseLost {
                shard: ShardIndex(2),
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(store.rows().await.expect("rows"), before, "no row moved");
    assert_eq!(store.recorded_shard_count().await.expect("count"), Some(4));
    let sessions = store.sessions().await.expect("sessions");
    assert!(
        sessions.iter().all(|s| s.shard.0 < 4),
        "no new lock-table row"
    );
    let holder = sessions.iter().find(|s| s.shard.0 == 2).expect("shard 2");
    assert_eq!(
        holder.node_id,
        Some(node("node-b")),
        "node-b still holds shard 2"
    );
}

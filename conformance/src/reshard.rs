//! Re-sharding cases: the switch moves every row and record to its target's shard and
//! re-lays the lock table, or writes nothing; a write addressed by another count is refused
//! whole; one announcement is in force at a time; no epoch is handed out twice across
//! layouts.

use super::catch_up::{ids, spec};
use super::fixtures::*;
use chrono::Duration;
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{
    DeadLetter, DeadLetterFilter, Lease, ReshardAnnouncement, ReshardSwitch, Route, RowChange,
    RowUpdate,
};
use shardbox_core::{InboxWrite, ShardIndex, Storage, StorageError};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The test's strategy: an id's length modulo the count (spreads "a".."ggggggg" over shards).
fn route(count: u32) -> Route {
    Arc::new(move |_kind: &str, id: &str| ShardIndex(id.len() as u32 % count))
}

/// A command to `account/<id>` in its shard among `count`.
fn routed(count: u32, id: &str, signal: &str) -> InboxWrite {
    command(id.len() as u32 % count, id, signal)
}

/// Asserts that `result` is the refusal of a count that changed from `expected` to `recorded`.
fn assert_count_changed<T: std::fmt::Debug>(
    result: &Result<T, StorageError>,
    expected: u32,
    recorded: u32,
) {
    assert!(
        matches!(
            result,
            Err(StorageError::ShardCountChanged { expected: e, recorded: r })
                if *e == expected && *r == recorded
        ),
        "expected ShardCountChanged {{ expected: {expected}, recorded: {recorded} }}, got {result:?}"
    );
}

/// The operator's leases of shards `0..count`, at `now`.
async fn hold_all<S: Storage>(
    store: &S,
    count: u32,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Lease> {
    let mut leases = Vec::new();
    for shard in 0..count {
        leases.push(pick(store, shard, "operator", now).await);
    }
    leases
}

const TARGETS: [&str; 7] = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg"];

/// The switch gives every inbox row of every status (due, delayed, retrying, delivered) and
/// every dead letter the shard of its target among the new count, keeps each row's `seq`,
/// status and times, computes running catch-ups' affected shards again, frees the leases,
/// drops lock-table rows outside the layout and starts new ones above every epoch, records
/// the count and ends the announcement. Pages of the new shards then hold each target's rows
/// in `seq` order.
pub async fn a_reshard_switch_moves_every_row_to_its_targets_shard<S: Storage + Inspect>(store: S) {
    store.claim_shard_count(4).await.expect("claim");
    let mut writes = Vec::new();
    for (n, id) in TARGETS.iter().enumerate() {
        writes.push(routed(4, id, &format!("{id}-1")));
        writes.push(with(routed(4, id, &format!("{id}-2")), |m| {
            m.deliver_after = Some(secs(60 + n as i64));
        }));
    }
    store.write(messages(writes)).await.expect("write");
    // "a"'s first row delivered (kept for the window), "eeeee"'s first retrying,
    // "ffffff"'s first dead-lettered.
    let rows = store.rows().await.expect("rows");
    let seq_of = |signal: &str| {
        rows.iter()
            .find(|r| r.message.signal_id.0 == signal)
            .map(|r| r.seq)
            .expect("row")
    };
    let lease = pick(&store, 1, "node-a", secs(1)).await;
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
    let lease = pick(&store, 2, "node-a", secs(1)).await;
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
    let job = store
        .start_catch_up(spec("account", "", ids(&["ccc", "ggggggg"])), 4)
        .await
        .expect("catch-up");
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
    let job = store.catch_up(job.id).await.expect("read").expect("job");
    assert_eq!(
        job.spec.affected_shards,
        vec![ShardIndex(3), ShardIndex(7)],
        "the running catch-up's shards among 8"
    );
    assert_eq!(moves.catch_ups, 1);
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
    // The due rows read from their new shards, in seq order per target.
    for id in TARGETS {
        let shard = ShardIndex(id.len() as u32 % 8);
        let page = store.read_page(shard, secs(3), 100).await.expect("page");
        let signals = signals(&page.messages);
        let first = format!("{id}-1");
        let due = !["a", "eeeee", "ffffff"].contains(&id);
        assert_eq!(signals.contains(&first), due, "{id}: {signals:?}");
    }
    // A new shard can be picked up; one outside the layout cannot, and gets no row.
    let lease = pick(&store, 7, "node-a", secs(3)).await;
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

/// A shard that a re-sharding to fewer shards dropped, and a later one made again, hands out
/// epochs above every epoch it handed out before, as every shard kept does; no lease of an
/// old layout matches a shard of the new one (issue 37: the dropped shards' epochs were
/// forgotten, and handed out a second time).
pub async fn a_shard_made_again_hands_out_no_epoch_twice<S: Storage + Inspect>(store: S) {
    store.claim_shard_count(4).await.expect("claim");
    // Every shard gets its row, then shard 3 runs ahead of the others.
    let mut handed_out = 0;
    for shard in [0, 1, 2, 3, 3, 3, 3, 3] {
        let lease = pick(&store, shard, "node-a", secs(1)).await;
        store.release(&lease).await.expect("release");
        handed_out = handed_out.max(lease.epoch.0);
    }
    let mut old_leases = Vec::new();
    for (from, to) in [(4, 2), (2, 4)] {
        let leases = hold_all(&store, from, secs(2)).await;
        old_leases.extend(leases.iter().cloned());
        handed_out = handed_out.max(leases.iter().map(|l| l.epoch.0).max().unwrap_or(0));
        store
            .reshard(ReshardSwitch {
                from,
                to,
                leases,
                route: route(to),
            })
            .await
            .unwrap_or_else(|e| panic!("switch {from} -> {to}: {e}"));
    }
    let pick_above = |shard: u32| {
        let store = &store;
        async move {
            let lease = pick(store, shard, "node-a", secs(3)).await;
            assert!(
                lease.epoch.0 > handed_out,
                "shard {shard} hands out epoch {}, not above the {handed_out} handed out before",
                lease.epoch
            );
        }
    };
    // The shards made again, then the shards kept, once no old lease matched them.
    pick_above(3).await;
    pick_above(2).await;
    for lease in old_leases.iter().filter(|l| l.shard.0 < 2) {
        assert!(
            store.renew(lease, secs(3)).await.is_err(),
            "the switch's lease of shard {} (epoch {}) matches no shard of the new layout",
            lease.shard,
            lease.epoch
        );
    }
    pick_above(0).await;
    pick_above(1).await;
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

/// One announcement is in force at a time: another operator's is returned until it runs out
/// or is withdrawn; withdrawing someone else's changes nothing; the layout shows it.
pub async fn one_reshard_announcement_is_in_force_at_a_time<S: Storage + Inspect>(store: S) {
    store.claim_shard_count(4).await.expect("claim");
    assert_eq!(store.layout().await.expect("layout").resharding, None);
    let a = ReshardAnnouncement {
        by: node("op-a"),
        to: 8,
        until: secs(10),
    };
    let b = ReshardAnnouncement {
        by: node("op-b"),
        to: 2,
        until: secs(20),
    };
    assert_eq!(store.announce_reshard(&a, secs(0)).await.expect("a"), a);
    assert_eq!(
        store.announce_reshard(&b, secs(5)).await.expect("b"),
        a,
        "a's is in force"
    );
    let renewed = ReshardAnnouncement {
        until: secs(15),
        ..a.clone()
    };
    assert_eq!(
        store
            .announce_reshard(&renewed, secs(5))
            .await
            .expect("renew"),
        renewed,
        "its operator renews it"
    );
    assert_eq!(
        store.layout().await.expect("layout").resharding,
        Some(renewed.clone())
    );
    store
        .withdraw_reshard(&node("op-b"))
        .await
        .expect("withdraw");
    assert_eq!(
        store.layout().await.expect("layout").resharding,
        Some(renewed),
        "withdrawing another's changes nothing"
    );
    assert_eq!(
        store.announce_reshard(&b, secs(16)).await.expect("b"),
        b,
        "a's ran out: b's is in force"
    );
    store
        .withdraw_reshard(&node("op-b"))
        .await
        .expect("withdraw");
    let layout = store.layout().await.expect("layout");
    assert_eq!((layout.shard_count, layout.resharding), (Some(4), None));
}

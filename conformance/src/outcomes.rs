//! Command outcomes: written with the stage commit, read by key while their window lasts,
//! replaced by a later decision, forgotten after the window and purged with the delivered
//! rows.

use super::fixtures::*;
use chrono::{DateTime, Utc};
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{Lease, RowChange, RowUpdate};
use shardbox_core::{
    CommandOutcome, DedupKey, OutcomeLookup, OutcomeRecord, ShardIndex, SignalId, Storage,
};

fn key(target: &str, signal: &str) -> DedupKey {
    command(0, target, signal).message.dedup_key()
}

fn record(target: &str, signal: &str, outcome: CommandOutcome, keep: i64) -> OutcomeRecord {
    OutcomeRecord {
        key: key(target, signal),
        shard: ShardIndex(0),
        outcome,
        decided_at: t0(),
        keep_until: secs(keep),
    }
}

fn decided(outcome: CommandOutcome) -> OutcomeLookup {
    OutcomeLookup::Decided {
        outcome,
        decided_at: t0(),
    }
}

/// A waiting command is pending. A handled command's outcome is its delivered row: handled at
/// the stage's time, with the events its target emitted for it (found by their derived ids,
/// not another command's), until the row's `keep_until`, even over an older record of its key
/// (a requeued dead letter handled). The other outcomes are records (dead-lettered with its
/// reason, expired), read back until their `keep_until`; a later record of a key replaces the
/// earlier; a purge deletes the forgotten ones with the delivered rows.
pub async fn command_outcomes_are_kept_for_their_window<S: Storage + Inspect>(store: S) {
    store
        .write(messages(vec![
            command(0, "a", "s1"),
            command(0, "b", "s2"),
            command(0, "c", "s3"),
            command(0, "d", "s4"),
        ]))
        .await
        .expect("write");
    assert_eq!(
        lookup(&store, key("a", "s1"), t0()).await,
        OutcomeLookup::Pending
    );
    assert_eq!(
        lookup(&store, key("a", "nope"), t0()).await,
        OutcomeLookup::Unknown
    );
    let lease = pick(&store, 0, "node-a", t0()).await;
    a_stage_decides_four_outcomes(&store, &lease).await;
    a_later_record_replaces_the_earlier(&store, &lease).await;
    a_requeued_command_answers_by_its_delivered_row(&store, &lease).await;
    forgotten_outcomes_are_purged_with_the_rows(&store, &lease).await;
}

/// `store`'s answer for `key` at `at`.
async fn lookup<S: Storage>(store: &S, key: DedupKey, at: DateTime<Utc>) -> OutcomeLookup {
    store.outcome(&key, at).await.expect("outcome")
}

/// One stage handles s1 (with 17 events) and s4 (none), records s2 dead-lettered and s3
/// expired: each read back as decided, s3 forgotten when its window ends.
async fn a_stage_decides_four_outcomes<S: Storage + Inspect>(store: &S, lease: &Lease) {
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    let seq = |signal: &str| seq_of(&page.messages, signal);
    // s1's target emitted 17 events (more than one probe reads), s4's none; another target's
    // event for s1 is not s1's.
    let s1_events: Vec<SignalId> = (0..17)
        .map(|n| key("a", "s1").emitted_id("event", n))
        .collect();
    let mut events: Vec<_> = s1_events
        .iter()
        .map(|id| event(&id.0, "Happened", t0()))
        .collect();
    events.push(event(
        &key("z", "s1").emitted_id("event", 17).0,
        "Happened",
        t0(),
    ));
    let dead = CommandOutcome::DeadLettered {
        reason: "boom \"quoted\"".into(),
    };
    let mut commit = stage(
        lease,
        t0(),
        vec![
            delivered(seq("s1"), secs(60)),
            RowUpdate {
                seq: seq("s2"),
                change: RowChange::Remove,
            },
            RowUpdate {
                seq: seq("s3"),
                change: RowChange::Remove,
            },
            delivered(seq("s4"), secs(60)),
        ],
    );
    commit.writes.events = events;
    commit.outcomes = vec![
        record("b", "s2", dead.clone(), 60),
        record("c", "s3", CommandOutcome::Expired, 30),
    ];
    store.commit_stage(commit).await.expect("commit");
    assert_eq!(
        lookup(store, key("a", "s1"), secs(1)).await,
        decided(CommandOutcome::Handled { events: s1_events })
    );
    assert_eq!(
        lookup(store, key("d", "s4"), secs(1)).await,
        decided(CommandOutcome::Handled { events: vec![] })
    );
    assert_eq!(lookup(store, key("b", "s2"), secs(1)).await, decided(dead));
    assert_eq!(
        lookup(store, key("c", "s3"), secs(29)).await,
        decided(CommandOutcome::Expired)
    );
    assert_eq!(
        lookup(store, key("c", "s3"), secs(30)).await,
        OutcomeLookup::Unknown,
        "forgotten when its window ends"
    );
}

/// Decided again: the later record wins.
async fn a_later_record_replaces_the_earlier<S: Storage + Inspect>(store: &S, lease: &Lease) {
    let mut again = stage(lease, t0(), vec![]);
    again.outcomes = vec![record(
        "b",
        "s2",
        CommandOutcome::Dropped {
            reason: "later".into(),
        },
        90,
    )];
    store.commit_stage(again).await.expect("commit again");
    assert_eq!(
        lookup(store, key("b", "s2"), secs(61)).await,
        decided(CommandOutcome::Dropped {
            reason: "later".into()
        })
    );
}

/// Requeued (written again) and handled at 2 s: its delivered row answers, not the record.
async fn a_requeued_command_answers_by_its_delivered_row<S: Storage + Inspect>(
    store: &S,
    lease: &Lease,
) {
    store
        .write(messages(vec![command(0, "b", "s2")]))
        .await
        .expect("requeue");
    assert_eq!(
        lookup(store, key("b", "s2"), secs(2)).await,
        OutcomeLookup::Pending
    );
    let page = store
        .read_page(ShardIndex(0), secs(2), 10)
        .await
        .expect("read again");
    let requeued = page
        .messages
        .iter()
        .find(|m| m.message.signal_id.0 == "s2")
        .map(|m| m.seq)
        .expect("the requeued row");
    let handled = stage(lease, secs(2), vec![delivered(requeued, secs(62))]);
    store.commit_stage(handled).await.expect("handled");
    assert_eq!(
        lookup(store, key("b", "s2"), secs(3)).await,
        OutcomeLookup::Decided {
            outcome: CommandOutcome::Handled { events: vec![] },
            decided_at: secs(2),
        }
    );
}

/// A purge at 61 s deletes the rows and records forgotten by then (s1, s3, s4), not s2's
/// delivered row (kept to 62 s); asked at an earlier time, s1 is gone for good.
async fn forgotten_outcomes_are_purged_with_the_rows<S: Storage + Inspect>(
    store: &S,
    lease: &Lease,
) {
    let mut purge = stage(lease, secs(61), vec![]);
    purge.purge_delivered = 10;
    store.commit_stage(purge).await.expect("purge");
    assert_eq!(
        lookup(store, key("a", "s1"), secs(1)).await,
        OutcomeLookup::Unknown
    );
    assert_eq!(
        lookup(store, key("c", "s3"), secs(1)).await,
        OutcomeLookup::Unknown
    );
    assert_eq!(
        lookup(store, key("b", "s2"), secs(61)).await,
        OutcomeLookup::Decided {
            outcome: CommandOutcome::Handled { events: vec![] },
            decided_at: secs(2),
        }
    );
}

/// Records of commands that are never handled — so their shard has no delivered row to purge
/// — are still found and purged: `purge_due_shards` names their shard once their window has
/// passed, a purging stage deletes them although it purges no delivered row, and a stage
/// that records outcomes deletes at least as many forgotten ones of its shard. An operator
/// who drops or dead-letters a blocked command decides its outcome anew (the sender no longer
/// reads `Blocked`); a requeue makes it pending.
pub async fn unhandled_commands_outcomes_are_purged_and_decided_again_by_unblock<
    S: Storage + Inspect,
>(
    store: S,
) {
    store
        .write(messages(vec![
            command(0, "a", "s1"),
            command(0, "b", "s2"),
            command(0, "c", "s3"),
            command(0, "d", "s4"),
        ]))
        .await
        .expect("write");
    let lease = pick(&store, 0, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    let seq = |signal: &str| seq_of(&page.messages, signal);
    let remove = |seq| RowUpdate {
        seq,
        change: RowChange::Remove,
    };
    let block = |seq, error: &str| RowUpdate {
        seq,
        change: RowChange::Block {
            attempts: 1,
            error: error.into(),
            errors: Default::default(),
        },
    };
    let dead = CommandOutcome::DeadLettered {
        reason: "boom".into(),
    };
    let blocked = |error: &str| CommandOutcome::Blocked {
        reason: error.into(),
    };
    let mut first = stage(
        &lease,
        t0(),
        vec![
            remove(seq("s1")),
            block(seq("s2"), "bad b"),
            block(seq("s3"), "bad c"),
        ],
    );
    first.outcomes = vec![
        record("a", "s1", dead.clone(), 60),
        record("b", "s2", blocked("bad b"), 60),
        record("c", "s3", blocked("bad c"), 60),
    ];
    store.commit_stage(first).await.expect("commit");
    assert_eq!(store.outcome_records().await.expect("count"), 3);
    assert_eq!(
        store.purge_due_shards(secs(59)).await.expect("due"),
        Vec::<ShardIndex>::new()
    );
    unblocked_commands_are_decided_anew(&store).await;
    forgotten_records_are_purged_without_delivered_rows(&store, &lease, seq("s4")).await;
}

/// Unblocked by the operator at 10 s: b dropped, c dead-lettered, each decided anew with the
/// operator's reason; their window is unchanged.
async fn unblocked_commands_are_decided_anew<S: Storage + Inspect>(store: &S) {
    use shardbox_core::storage::Unblock;
    for (target, action) in [("b", Unblock::Drop), ("c", Unblock::DeadLetter)] {
        store
            .unblock_target(
                &shardbox_core::storage::EntityKey {
                    kind: "account".into(),
                    tenant: String::new(),
                    id: target.into(),
                },
                action,
                secs(10),
            )
            .await
            .expect("unblock");
    }
    let reason = shardbox_core::storage::unblocked_reason(Some("bad b"));
    assert_eq!(
        store.outcome(&key("b", "s2"), secs(11)).await.expect("b"),
        OutcomeLookup::Decided {
            outcome: CommandOutcome::Dropped { reason },
            decided_at: secs(10),
        }
    );
    let reason = shardbox_core::storage::unblocked_reason(Some("bad c"));
    assert_eq!(
        store.outcome(&key("c", "s3"), secs(59)).await.expect("c"),
        OutcomeLookup::Decided {
            outcome: CommandOutcome::DeadLettered { reason },
            decided_at: secs(10),
        }
    );
}

/// At 61 s the three records are forgotten and their shard, which holds no delivered row, is
/// named; a purging stage deletes them (two, its limit). A stage that records an outcome (s4's,
/// removing its row `s4`) deletes a forgotten one too, with no purge asked.
async fn forgotten_records_are_purged_without_delivered_rows<S: Storage + Inspect>(
    store: &S,
    lease: &Lease,
    s4: i64,
) {
    let remove = |seq| RowUpdate {
        seq,
        change: RowChange::Remove,
    };
    assert_eq!(
        store.purge_due_shards(secs(61)).await.expect("due"),
        vec![ShardIndex(0)]
    );
    let mut purge = stage(lease, secs(61), vec![]);
    purge.purge_delivered = 2;
    store.commit_stage(purge).await.expect("purge");
    assert_eq!(
        store.outcome_records().await.expect("count"),
        1,
        "two purged (the stage's limit), one left"
    );

    // A stage that records an outcome deletes a forgotten one too, with no purge asked.
    let mut expiring = stage(lease, secs(62), vec![remove(s4)]);
    expiring.outcomes = vec![record("d", "s4", CommandOutcome::Expired, 120)];
    store.commit_stage(expiring).await.expect("commit");
    assert_eq!(
        store.outcome_records().await.expect("count"),
        1,
        "s4's only"
    );
    assert_eq!(
        store.purge_due_shards(secs(62)).await.expect("due"),
        Vec::<ShardIndex>::new()
    );
    assert_eq!(
        store.outcome(&key("d", "s4"), secs(63)).await.expect("d"),
        OutcomeLookup::Decided {
            outcome: CommandOutcome::Expired,
            decided_at: t0(),
        }
    );
}

//! Command outcomes: written with the stage commit, read by key while their window lasts,
//! replaced by a later decision, forgotten after the window and purged with the delivered
//! rows.

use super::fixtures::*;
use crate::Inspect;
use shardbox_core::storage::{RowChange, RowUpdate};
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

/// A waiting command is pending; the outcomes a commit records are read back (handled with
/// its event ids, dead-lettered with its reason, expired) until their `keep_until`, a later
/// record of the same key replaces the earlier, and a purge deletes the forgotten ones.
pub async fn command_outcomes_are_kept_for_their_window<S: Storage + Inspect>(store: S) {
    store
        .write(messages(vec![
            command(0, "a", "s1"),
            command(0, "b", "s2"),
            command(0, "c", "s3"),
        ]))
        .await
        .expect("write");
    let outcome = |k: DedupKey, at| {
        let store = &store;
        async move { store.outcome(&k, at).await.expect("outcome") }
    };
    assert_eq!(outcome(key("a", "s1"), t0()).await, OutcomeLookup::Pending);
    assert_eq!(
        outcome(key("a", "nope"), t0()).await,
        OutcomeLookup::Unknown
    );

    let lease = pick(&store, 0, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    let seq = |signal: &str| {
        page.messages
            .iter()
            .find(|m| m.message.signal_id.0 == signal)
            .map(|m| m.seq)
            .expect("row of the page")
    };
    let handled = CommandOutcome::Handled {
        events: vec![SignalId::from("e-1"), SignalId::from("e-2")],
    };
    let dead = CommandOutcome::DeadLettered {
        reason: "boom \"quoted\"".into(),
    };
    let mut commit = stage(
        &lease,
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
        ],
    );
    commit.outcomes = vec![
        record("a", "s1", handled.clone(), 60),
        record("b", "s2", dead.clone(), 60),
        record("c", "s3", CommandOutcome::Expired, 30),
    ];
    store.commit_stage(commit).await.expect("commit");
    assert_eq!(outcome(key("a", "s1"), secs(1)).await, decided(handled));
    assert_eq!(outcome(key("b", "s2"), secs(1)).await, decided(dead));
    assert_eq!(
        outcome(key("c", "s3"), secs(29)).await,
        decided(CommandOutcome::Expired)
    );
    assert_eq!(
        outcome(key("c", "s3"), secs(30)).await,
        OutcomeLookup::Unknown,
        "forgotten when its window ends"
    );

    // Decided again (a requeued dead letter, handled): the later record wins.
    let mut again = stage(&lease, secs(2), vec![]);
    again.outcomes = vec![record(
        "b",
        "s2",
        CommandOutcome::Handled { events: vec![] },
        90,
    )];
    store.commit_stage(again).await.expect("commit again");
    assert_eq!(
        outcome(key("b", "s2"), secs(61)).await,
        decided(CommandOutcome::Handled { events: vec![] })
    );

    // A purge at 61 s deletes the records forgotten by then (s1, s3), not the one kept to
    // 90 s; asked at an earlier time, s1 is gone for good.
    let mut purge = stage(&lease, secs(61), vec![]);
    purge.purge_delivered = 10;
    store.commit_stage(purge).await.expect("purge");
    assert_eq!(
        outcome(key("a", "s1"), secs(1)).await,
        OutcomeLookup::Unknown
    );
    assert_eq!(
        outcome(key("c", "s3"), secs(1)).await,
        OutcomeLookup::Unknown
    );
    assert_eq!(
        outcome(key("b", "s2"), secs(1)).await,
        decided(CommandOutcome::Handled { events: vec![] })
    );
}

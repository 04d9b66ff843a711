//! Error history cases: the last failed attempts a row carries (written by the failure
//! UPDATEs, read back by the page read), kept by its dead letter, cleared by a requeue, kept
//! by a blocked row through an unblock.
//!
//! ```text
//!  page read ─► row.errors_after_failure(now, e) ─► RetryAt / Block { errors } ─► page read …
//!                                               ─► Remove + DeadLetter { original.errors }
//!  requeue (of a dead letter, or unblock by requeue) ─► the row's history empty again
//! ```
//!
//! The cases compute each history from the row the page read, as a stage does, so that a
//! backend whose page read, UPDATE or dead-letter row drops the history fails them.

use super::fixtures::*;
use chrono::{DateTime, Utc};
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{
    DeadLetter, DeadLetterFilter, Requeue, RowChange, RowUpdate, StoredDeadLetter, Unblock,
};
use shardbox_core::{ErrorHistory, InboxMessage, ShardIndex, Storage};

/// The error of attempt `n`: with a quote, a backslash, a newline and a non-ASCII char, so
/// that a stored form that does not escape or decode them fails the cases.
fn error_of(n: u32) -> String {
    format!("attempt \"{n}\" failed: C:\\tmp\nnaïve")
}

/// The row of `signal` as a page read at `now` returns it (its history included).
async fn read<S: Storage>(store: &S, signal: &str, now: DateTime<Utc>) -> InboxMessage {
    store
        .read_page(ShardIndex(0), now, 10)
        .await
        .expect("read")
        .messages
        .into_iter()
        .find(|r| r.message.signal_id.0 == signal)
        .unwrap_or_else(|| panic!("row {signal} is due at {now}"))
}

/// Fails `row`'s next attempt at `now` with `error`, retried a second later: what a stage
/// commits for it.
async fn fail_and_retry<S: Storage>(
    store: &S,
    row: &InboxMessage,
    now: DateTime<Utc>,
    error: &str,
) {
    let change = RowChange::RetryAt {
        at: now + chrono::Duration::seconds(1),
        attempts: row.attempts + 1,
        error: error.into(),
        errors: row.errors_after_failure(now, error),
    };
    commit_at(
        store,
        0,
        now,
        vec![RowUpdate {
            seq: row.seq,
            change,
        }],
    )
    .await;
}

/// `(attempt, error)` of each kept entry, oldest first.
fn kept(errors: &ErrorHistory) -> Vec<(u32, String)> {
    errors
        .entries()
        .iter()
        .map(|e| (e.attempt, e.error.clone()))
        .collect()
}

/// `(attempt, error_of(attempt))` for each of `attempts`.
fn expected(attempts: std::ops::RangeInclusive<u32>) -> Vec<(u32, String)> {
    attempts.map(|n| (n, error_of(n))).collect()
}

async fn the_dead_letter<S: Storage>(store: &S) -> StoredDeadLetter {
    let mut dead = store
        .list_dead_letters(&DeadLetterFilter::all())
        .await
        .expect("list");
    assert_eq!(dead.len(), 1, "one dead letter");
    dead.remove(0)
}

/// Twelve failed attempts leave the last ten on the row, in order, each with its time; the
/// dead letter made of the row keeps them with its reason as the last; a requeue of that
/// dead letter starts a row with no history.
pub async fn the_last_ten_failed_attempts_are_kept_and_dead_lettered<S: Storage + Inspect>(
    store: S,
) {
    store
        .write(messages(vec![command(0, "a", "a1")]))
        .await
        .expect("write");
    let mut row = read(&store, "a1", t0()).await;
    assert!(row.errors.is_empty(), "a new row has no history");
    for n in 1..=12u32 {
        let now = secs(i64::from(n) * 10);
        row = read(&store, "a1", now).await;
        assert_eq!(row.attempts, n - 1);
        fail_and_retry(&store, &row, now, &error_of(n)).await;
    }
    let now = secs(130);
    let row = read(&store, "a1", now).await;
    assert_eq!(
        kept(&row.errors),
        expected(3..=12),
        "the last ten, oldest first"
    );
    let times: Vec<DateTime<Utc>> = row.errors.entries().iter().map(|e| e.at).collect();
    assert_eq!(times, (3..=12).map(|n| secs(n * 10)).collect::<Vec<_>>());
    let inspected = store
        .rows()
        .await
        .expect("rows")
        .into_iter()
        .find(|r| r.seq == row.seq)
        .expect("the row");
    assert_eq!(inspected.errors, row.errors, "every read gives the history");

    // The thirteenth attempt kills it: the dead letter's original ends with its reason.
    let lease = pick(&store, 0, "node-a", now).await;
    let mut commit = stage(
        &lease,
        now,
        vec![RowUpdate {
            seq: row.seq,
            change: RowChange::Remove,
        }],
    );
    commit.dead_letters = vec![DeadLetter {
        original: InboxMessage {
            errors: row.errors_after_failure(now, "gave up"),
            ..row.clone()
        },
        reason: "gave up".into(),
        attempts: 13,
        first_attempt_at: row.first_failed_at,
        last_attempt_at: now,
    }];
    store.commit_stage(commit).await.expect("commit");
    store.release(&lease).await.expect("release");
    let dead = the_dead_letter(&store).await;
    let mut want = expected(4..=12);
    want.push((13, "gave up".into()));
    assert_eq!(kept(&dead.letter.original.errors), want);
    assert_eq!(dead.letter.original.errors.entries()[9].at, now);

    // A requeue puts the message back with no history.
    let report = store
        .requeue_dead_letters(
            vec![Requeue {
                id: dead.id,
                shard: ShardIndex(0),
            }],
            SHARDS,
            secs(140),
        )
        .await
        .expect("requeue");
    assert_eq!(report.requeued, 1);
    let again = read(&store, "a1", secs(140)).await;
    assert_eq!((again.attempts, again.errors.is_empty()), (0, true));
}

/// A blocked row keeps its history (the blocking attempt last); an unblock that dead-letters
/// it hands that history to the dead letter; one that requeues it clears it.
pub async fn a_blocked_rows_history_is_kept_by_its_dead_letter_and_cleared_by_a_requeue<
    S: Storage + Inspect,
>(
    store: S,
) {
    store
        .write(messages(vec![command(0, "a", "a1"), command(0, "b", "b1")]))
        .await
        .expect("write");
    for signal in ["a1", "b1"] {
        for n in 1..=2u32 {
            let now = secs(i64::from(n) * 10);
            let row = read(&store, signal, now).await;
            fail_and_retry(&store, &row, now, &error_of(n)).await;
        }
        let now = secs(30);
        let row = read(&store, signal, now).await;
        commit_at(
            &store,
            0,
            now,
            vec![RowUpdate {
                seq: row.seq,
                change: RowChange::Block {
                    attempts: 3,
                    error: error_of(3),
                    errors: row.errors_after_failure(now, &error_of(3)),
                },
            }],
        )
        .await;
    }
    let blocked = store.rows().await.expect("rows");
    assert_eq!(blocked.len(), 2);
    for row in &blocked {
        assert_eq!(
            kept(&row.errors),
            expected(1..=3),
            "{}",
            row.message.signal_id
        );
    }

    let report = store
        .unblock_target(&key("a"), Unblock::DeadLetter, secs(40))
        .await
        .expect("unblock");
    assert_eq!(report.unblocked, 1);
    let dead = the_dead_letter(&store).await;
    assert_eq!(
        kept(&dead.letter.original.errors),
        expected(1..=3),
        "the dead letter keeps the blocked row's history"
    );

    let report = store
        .unblock_target(&key("b"), Unblock::Requeue, secs(40))
        .await
        .expect("unblock");
    assert_eq!(report.unblocked, 1);
    let again = read(&store, "b1", secs(40)).await;
    assert_eq!((again.attempts, again.errors.is_empty()), (0, true));
}

//! `LiveDelivery` under the failure policy: retries at the back-off (and no sooner than the
//! handler asks, up to the cap), the outcomes of an exhausted message (dead letter, drop,
//! block), blocked targets, unknown kinds and undecodable payloads; only the failing target
//! is held behind a failure.

mod common;

use common::*;
use shardbox_core::storage::{DeadLetter, Page, RowChange, RowUpdate};
use shardbox_core::{
    BatchResult, BatchRun, EntityHandler, ErrorHistory, ExhaustedOutcome, HandlerError,
    InboxMessage, Intent, MessageOutcome, NewEvent, NoopMonitor, Station,
};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn live_retries_a_failure_at_the_backoff_and_holds_only_its_target_behind_it() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // Row 2 already failed once: the second failure backs off base * 2 = 2 s.
    let mut c = fx.conveyor(vec![
        add(1, "a", 10),
        fail(2, "a", 1),
        add(3, "b", 30),
        add(4, "a", 40),
        add(5, "b", 50),
    ]);
    live().process(&mut c).await.unwrap();

    let retry_at = t0() + secs(2);
    assert_eq!(
        intents(&c),
        vec![
            Some(delivered()),
            Some(Intent::RetryAt {
                at: retry_at,
                error: "counter a refuses Fail".into()
            }),
            Some(delivered()),
            Some(hold(retry_at)),
            Some(delivered()),
        ]
    );
    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1, 2, 4]),
            ("counter".into(), "b".into(), vec![3, 5]),
        ]
    );

    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        counter_states(&commit),
        vec![
            ("a".into(), counter(&[10])),
            ("b".into(), counter(&[30, 50]))
        ],
        "the failed message and those behind it leave no trace in the state"
    );
    assert_eq!(
        commit.updates[1],
        RowUpdate {
            seq: 2,
            change: RowChange::RetryAt {
                at: retry_at,
                attempts: 2,
                error: "counter a refuses Fail".into(),
                // The row's history (none yet) with this attempt, at the stage's time.
                errors: ErrorHistory::default().with(t0(), 2, "counter a refuses Fail"),
            }
        }
    );
    assert_eq!(
        commit.updates[3],
        RowUpdate {
            seq: 4,
            change: RowChange::Hold { until: retry_at }
        }
    );
    assert!(commit.dead_letters.is_empty());
    assert_eq!((report.delivered, report.retried, report.held), (3, 1, 1));
    // Only the handled messages emitted events.
    let emitted: Vec<String> = commit
        .writes
        .events
        .iter()
        .map(|e| e.id.0.clone())
        .collect();
    let mut emitted = emitted;
    emitted.sort();
    assert_eq!(
        emitted,
        vec![
            "sig-1/counter:a/event/0",
            "sig-3/counter:b/event/0",
            "sig-5/counter:b/event/0"
        ]
    );
}

/// The parts of an `EntityHandler` of a test kind without state, commands, events or routes.
macro_rules! stateless_kind {
    ($kind:literal) => {
        fn kind(&self) -> &'static str {
            $kind
        }
        fn is_stateful(&self) -> bool {
            false
        }
        fn command_type(&self) -> Option<&'static str> {
            None
        }
        fn event_types(&self) -> &'static [&'static str] {
            &[]
        }
        fn route(
            &self,
            _: &NewEvent,
            _: &shardbox_core::Upcasters,
        ) -> Result<Vec<String>, HandlerError> {
            Ok(Vec::new())
        }
    };
}

/// Refuses every message of kind `slow`, asking for the next attempt after the number of
/// seconds in its payload.
struct Slow;

#[async_trait::async_trait]
impl EntityHandler for Slow {
    stateless_kind!("slow");
    async fn handle_batch(
        &self,
        _: Option<shardbox_core::StoredState<'_>>,
        batch: &[&InboxMessage],
        _: BatchRun<'_>,
    ) -> BatchResult {
        let delay: u64 = serde_json::from_slice(&batch[0].message.payload).unwrap();
        let mut outcomes = vec![MessageOutcome::Failed(
            HandlerError::new("busy").retry_after(Duration::from_secs(delay)),
        )];
        outcomes.resize(batch.len(), MessageOutcome::NotAttempted);
        BatchResult {
            outcomes,
            ..BatchResult::default()
        }
    }
}

fn slow(seq: i64, target: &str, delay_secs: u64) -> InboxMessage {
    let mut m = add(seq, target, 0);
    m.message.target_kind = "slow".into();
    m.message.payload = serde_json::to_vec(&delay_secs).unwrap();
    m
}

#[tokio::test]
async fn live_retries_no_sooner_than_the_handler_asks_up_to_the_backoff_cap() {
    let fx = Fixture::build(
        config().build().unwrap(),
        Arc::new(NoopMonitor),
        vec![Arc::new(Slow)],
    )
    .await;
    // The first failure backs off 1 s (cap 10 s): asking for 4 s gets 4 s, for 60 s gets 10 s.
    let mut c = fx.conveyor(vec![slow(1, "s", 4), slow(2, "s", 0), slow(3, "t", 60)]);
    live().process(&mut c).await.unwrap();
    let retry = |at| {
        Some(Intent::RetryAt {
            at,
            error: "busy".into(),
        })
    };
    assert_eq!(
        intents(&c),
        vec![
            retry(t0() + secs(4)),
            Some(hold(t0() + secs(4))),
            retry(t0() + secs(10)),
        ]
    );
}

#[tokio::test]
async fn live_dead_letters_an_exhausted_message_and_releases_its_target() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // Two attempts failed before; this is the third and last.
    let failing = fail(1, "a", 2);
    let mut c = fx.conveyor(vec![failing.clone(), add(2, "a", 20), add(3, "b", 30)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::DeadLetter {
                reason: "counter a refuses Fail".into()
            }),
            Some(hold(t0())),
            Some(delivered()),
        ]
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.dead_letters,
        vec![DeadLetter {
            // The row as read, its history ending with the attempt that killed it.
            original: InboxMessage {
                errors: ErrorHistory::default().with(t0(), 3, "counter a refuses Fail"),
                ..failing
            },
            reason: "counter a refuses Fail".into(),
            attempts: 3,
            first_attempt_at: Some(t0()),
            last_attempt_at: t0(),
        }]
    );
    assert_eq!(
        commit.updates[..2],
        [
            RowUpdate {
                seq: 1,
                change: RowChange::Remove
            },
            RowUpdate {
                seq: 2,
                change: RowChange::Hold { until: t0() }
            },
        ]
    );
    assert_eq!(counter_states(&commit), vec![("b".into(), counter(&[30]))]);
    assert_eq!(
        (
            report.dead_lettered,
            report.held,
            report.delivered,
            report.retried
        ),
        (1, 1, 1, 0)
    );
}

#[tokio::test]
async fn live_drops_an_exhausted_message_under_a_drop_policy() {
    let fx = Fixture::new(
        config()
            .kind_policy("counter", policy(ExhaustedOutcome::Drop))
            .build()
            .unwrap(),
    )
    .await;
    let mut c = fx.conveyor(vec![fail(1, "a", 2), add(2, "a", 20)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::Drop {
                reason: "counter a refuses Fail".into()
            }),
            Some(hold(t0())),
        ]
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert!(commit.dead_letters.is_empty());
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Remove
        }
    );
    assert_eq!(
        (report.dropped, report.dead_lettered, report.held),
        (1, 0, 1)
    );
}

#[tokio::test]
async fn live_sends_an_unknown_kind_through_the_failure_policy_naming_the_kind() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut ghost1 = add(1, "g", 1);
    ghost1.message.target_kind = "ghost".into();
    let mut ghost2 = add(2, "g", 2);
    ghost2.message.target_kind = "ghost".into();
    let mut ghost_last = add(3, "h", 3);
    ghost_last.message.target_kind = "ghost".into();
    ghost_last.attempts = 2;
    let mut c = fx.conveyor(vec![ghost1, ghost2, ghost_last, add(4, "a", 40)]);
    live().process(&mut c).await.unwrap();

    let (at, error) = retry_error(c.intent(0));
    assert_eq!(at, t0() + secs(1));
    assert!(error.contains("`ghost`"), "{error}");
    assert!(error.contains("node-a"), "{error}");
    assert_eq!(c.intent(1), Some(&hold(t0() + secs(1))));
    match c.intent(2) {
        Some(Intent::DeadLetter { reason }) => assert!(reason.contains("`ghost`"), "{reason}"),
        other => panic!("expected DeadLetter, got {other:?}"),
    }
    assert_eq!(c.intent(3), Some(&delivered()));
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![4])]);
}

#[tokio::test]
async fn live_sends_an_undecodable_payload_through_the_failure_policy() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut garbage = add(1, "a", 10);
    garbage.message.payload = b"{not json".to_vec();
    let mut wrong_type = add(3, "b", 30);
    wrong_type.message.payload_type = "other.command".into();
    wrong_type.attempts = 2;
    let mut c = fx.conveyor(vec![garbage, add(2, "a", 20), wrong_type, add(4, "c", 40)]);
    live().process(&mut c).await.unwrap();

    let (at, error) = retry_error(c.intent(0));
    assert_eq!(at, t0() + secs(1));
    assert!(error.contains("does not deserialize"), "{error}");
    assert_eq!(c.intent(1), Some(&hold(t0() + secs(1))));
    match c.intent(2) {
        Some(Intent::DeadLetter { reason }) => {
            assert!(reason.contains("`other.command`"), "{reason}")
        }
        other => panic!("expected DeadLetter, got {other:?}"),
    }
    assert_eq!(c.intent(3), Some(&delivered()));
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(counter_states(&commit), vec![("c".into(), counter(&[40]))]);
}

#[tokio::test]
async fn live_blocks_an_exhausted_message_under_a_block_policy_and_holds_only_its_target() {
    let config = config()
        .failure_policy(policy(ExhaustedOutcome::Block))
        .poll_interval(Duration::from_millis(700))
        .build()
        .unwrap();
    let fx = Fixture::new(config).await;
    let failing = fail(1, "a", 2);
    let mut c = fx.conveyor(vec![failing, add(2, "a", 20), add(3, "b", 30)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::Block {
                reason: "counter a refuses Fail".into()
            }),
            Some(Intent::BehindBlock),
            Some(delivered()),
        ],
        "a's later message is parked behind the block until an unblock; b goes on"
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.updates[0],
        RowUpdate {
            seq: 1,
            change: RowChange::Block {
                attempts: 3,
                error: "counter a refuses Fail".into(),
                errors: ErrorHistory::default().with(t0(), 3, "counter a refuses Fail"),
            }
        }
    );
    assert_eq!(
        commit.updates[1],
        RowUpdate {
            seq: 2,
            change: RowChange::BehindBlock
        }
    );
    assert!(commit.dead_letters.is_empty());
    assert_eq!((report.blocked, report.held, report.delivered), (1, 1, 1));
}

#[tokio::test]
async fn live_parks_a_blocked_targets_rows_and_serves_the_rest() {
    let config = config()
        .poll_interval(Duration::from_millis(400))
        .build()
        .unwrap();
    let fx = Fixture::new(config).await;
    let mut c = fx.conveyor_with(Page {
        messages: vec![add(1, "a", 10), add(2, "b", 20), add(3, "a", 30)],
        blocked: vec![counter_key("a")],
        ..Page::default()
    });
    assert_eq!(c.blocked(), [counter_key("a")]);
    live().process(&mut c).await.unwrap();
    assert_eq!(
        intents(&c),
        vec![
            Some(Intent::BehindBlock),
            Some(delivered()),
            Some(Intent::BehindBlock)
        ],
        "parked, with no time of their own: not a poll interval at a time"
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "b".into(), vec![2])]);
}

/// Panics in its batch, outside any guard of the adapters (a hand-written `EntityHandler`):
/// target `now` at once, in the batch's first poll; target `later` after awaiting a timer.
struct Panicky;

#[async_trait::async_trait]
impl EntityHandler for Panicky {
    stateless_kind!("panicky");
    async fn handle_batch(
        &self,
        _: Option<shardbox_core::StoredState<'_>>,
        batch: &[&InboxMessage],
        _: BatchRun<'_>,
    ) -> BatchResult {
        if batch[0].message.target_id == "later" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("kaboom in {}", batch[0].message.target_id);
    }
}

/// A batch that panics — in its first poll, run on the stage's task, or after awaiting, as a
/// task of its own — fails its own target's message with a reason naming the panic; the
/// stage goes on and the other targets are delivered.
#[tokio::test]
async fn live_fails_only_the_target_whose_batch_panicked() {
    let mut kinds = default_kinds();
    kinds.push(Arc::new(Panicky));
    let fx = Fixture::build(config().build().unwrap(), Arc::new(NoopMonitor), kinds).await;
    let panicky = |seq, target: &str| {
        let mut m = add(seq, target, 0);
        m.message.target_kind = "panicky".into();
        m
    };
    let mut c = fx.conveyor(vec![panicky(1, "now"), add(2, "a", 5), panicky(3, "later")]);
    live().process(&mut c).await.unwrap();
    for (i, target) in [(0, "now"), (2, "later")] {
        let (at, error) = retry_error(c.intent(i));
        assert_eq!(at, t0() + secs(1));
        assert_eq!(
            error,
            format!("handler of `panicky` panicked: kaboom in {target}")
        );
    }
    assert_eq!(c.intent(1), Some(&delivered()));
}

//! `LiveDelivery` asks the `DeliveryMonitor` what to do with a failure: every answer is
//! obeyed, and the monitor is shown the failure it decides on.

mod common;

use chrono::{DateTime, Utc};
use common::*;
use shardbox_core::{DeliveryMonitor, FailureAction, FailureInfo, Intent, Station};
use std::sync::{Arc, Mutex};

/// What a monitor was shown of a failure: seq, attempts, reason, time.
type SeenFailure = (i64, u32, String, DateTime<Utc>);

/// Answers every failure with one action and records what it was shown.
struct FixedAnswer {
    action: FailureAction,
    seen: Mutex<Vec<SeenFailure>>,
}

impl DeliveryMonitor for FixedAnswer {
    fn on_handler_failure(&self, failure: &FailureInfo<'_>) -> FailureAction {
        self.seen.lock().unwrap().push((
            failure.message.seq,
            failure.attempts,
            failure.error.reason.clone(),
            failure.now,
        ));
        self.action
    }
}

#[tokio::test]
async fn live_obeys_the_monitor_answer_to_a_failure() {
    let reason = "counter a refuses Fail".to_owned();
    let cases = [
        (FailureAction::MarkDelivered, delivered(), t0()),
        (
            FailureAction::DeadLetter,
            Intent::DeadLetter {
                reason: reason.clone(),
            },
            t0(),
        ),
        (
            FailureAction::Drop,
            Intent::Drop {
                reason: reason.clone(),
            },
            t0(),
        ),
        (
            FailureAction::RetryAt(t0() + secs(42)),
            Intent::RetryAt {
                at: t0() + secs(42),
                error: reason.clone(),
            },
            t0() + secs(42),
        ),
        (
            FailureAction::RetryAt(t0() - secs(5)),
            Intent::RetryAt {
                at: t0(),
                error: reason.clone(),
            },
            t0(),
        ),
        (
            FailureAction::FollowPolicy,
            Intent::RetryAt {
                at: t0() + secs(1),
                error: reason.clone(),
            },
            t0() + secs(1),
        ),
    ];
    for (action, expected, behind) in cases {
        let monitor = Arc::new(FixedAnswer {
            action,
            seen: Mutex::new(Vec::new()),
        });
        let fx = Fixture::with_monitor(config().build().unwrap(), monitor.clone()).await;
        // The first attempt: the policy alone would retry it in 1 s.
        let mut c = fx.conveyor(vec![fail(1, "a", 0), add(2, "a", 20)]);
        live().process(&mut c).await.unwrap();

        assert_eq!(
            intents(&c),
            vec![Some(expected), Some(hold(behind))],
            "{action:?}"
        );
        assert_eq!(
            *monitor.seen.lock().unwrap(),
            vec![(1, 1, reason.clone(), t0())],
            "{action:?}"
        );
        let (commit, _) = c.into_commit(t0() + secs(30));
        assert!(commit.states.is_empty(), "{action:?}: nothing was handled");
        assert_eq!(
            commit.dead_letters.len(),
            usize::from(action == FailureAction::DeadLetter),
            "{action:?}"
        );
    }
}

#[tokio::test]
async fn a_monitor_can_block_a_target_on_its_first_failure() {
    struct BlockAtOnce;
    impl DeliveryMonitor for BlockAtOnce {
        fn on_handler_failure(&self, _: &FailureInfo<'_>) -> FailureAction {
            FailureAction::Block
        }
    }
    let fx = Fixture::with_monitor(config().build().unwrap(), Arc::new(BlockAtOnce)).await;
    let mut c = fx.conveyor(vec![fail(1, "a", 0), add(2, "a", 20)]);
    live().process(&mut c).await.unwrap();
    assert!(
        matches!(c.intent(0), Some(Intent::Block { .. })),
        "{:?}",
        c.intent(0)
    );
    assert_eq!(c.intent(1), Some(&Intent::BehindBlock));
}

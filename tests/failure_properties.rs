//! A property test over random failure schedules: per message, how many attempts fail, a TTL
//! or not, a delay or not; per run, the policy's attempts, back-off and outcome, and whether
//! expired messages are dead-lettered. Driven by hand with a `ManualClock` until nothing is
//! left, with an operator unblocking blocked targets (by drop or dead letter) every round.
//!
//! Checked every time: each message ends exactly one way — delivered, dead-lettered, dropped
//! or expired — and the counts add up (never lost); no message is applied twice to state;
//! delivered messages sent without a delay are applied in send order per target; a message
//! without TTL that fails fewer times than `max_attempts` is delivered, one that fails more
//! is not; the counters match what happened.

mod common;

use chrono::DateTime;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Backoff, DeadLetterFilter, ExhaustedOutcome, FailurePolicy, ManualClock, Unblock};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Ledger {
    applied: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    n: u64,
    fail_times: u32,
}

impl Message for Step {
    const TYPE: &'static str = "failure-properties.step";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Applied(u64);

impl Message for Applied {
    const TYPE: &'static str = "failure-properties.applied";
}

impl Aggregate for Ledger {
    const KIND: &'static str = "ledger";
    type Command = Step;
    type Event = Applied;

    async fn handle(&self, s: &Step, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
        if cx.attempts < s.fail_times {
            return Err(HandlerError::new(format!("step {} fails", s.n)));
        }
        Ok(vec![Applied(s.n)])
    }

    fn apply(&mut self, e: &Applied) {
        self.applied.push(e.0);
    }
}

#[derive(Debug, Clone)]
struct Plan {
    target: u8,
    fail_times: u32,
    ttl_secs: Option<u64>,
    delay_secs: Option<u64>,
}

#[derive(Debug, Clone)]
struct Schedule {
    messages: Vec<Plan>,
    max_attempts: u32,
    exponential: bool,
    outcome: ExhaustedOutcome,
    dead_letter_expired: bool,
    /// Per round, whether the operator dead-letters (true) or drops a blocked message.
    unblock_to_dead_letters: bool,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        0u8..5,
        prop_oneof![3 => Just(0u32), 2 => 1u32..3, 1 => 3u32..6],
        prop::option::weighted(0.3, 1u64..20),
        prop::option::weighted(0.3, 0u64..12),
    )
        .prop_map(|(target, fail_times, ttl_secs, delay_secs)| Plan {
            target,
            fail_times,
            ttl_secs,
            delay_secs,
        })
}

fn schedule() -> impl Strategy<Value = Schedule> {
    (
        prop::collection::vec(plan(), 1..30),
        1u32..5,
        any::<bool>(),
        prop_oneof![
            Just(ExhaustedOutcome::DeadLetter),
            Just(ExhaustedOutcome::Drop),
            Just(ExhaustedOutcome::Block),
        ],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(messages, max_attempts, exponential, outcome, dead_letter_expired, unblock)| {
                Schedule {
                    messages,
                    max_attempts,
                    exponential,
                    outcome,
                    dead_letter_expired,
                    unblock_to_dead_letters: unblock,
                }
            },
        )
}

/// Runs `s` on `storage` and checks every property; panics on a broken one.
async fn run(storage: Arc<dyn Storage>, s: Schedule) {
    let clock = Arc::new(ManualClock::new(
        DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
    ));
    let backoff = if s.exponential {
        Backoff::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(8),
        }
    } else {
        Backoff::Fixed(Duration::from_secs(2))
    };
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .clock(clock.clone())
        .shards(2)
        .page_size(7)
        .poll_interval(Duration::from_millis(500))
        .dedup_window(Duration::ZERO)
        .dead_letter_expired(s.dead_letter_expired)
        .failure_policy(FailurePolicy::new(s.max_attempts, backoff, s.outcome))
        .aggregate::<Ledger>()
        .build()
        .await
        .unwrap();
    for (n, p) in s.messages.iter().enumerate() {
        let mut options = SendOptions::default().signal_id(format!("m{n}"));
        if let Some(t) = p.ttl_secs {
            options = options.ttl(Duration::from_secs(t));
        }
        if let Some(d) = p.delay_secs {
            options = options.delay(Duration::from_secs(d));
        }
        let step = Step {
            n: n as u64,
            fail_times: p.fail_times,
        };
        sb.send_with::<Ledger>(&format!("t{}", p.target), &step, options)
            .await
            .unwrap();
    }

    let (mut unblock_drops, mut unblock_dead) = (0u64, 0u64);
    let mut rounds = 0;
    loop {
        sb.deliver_all().await.unwrap();
        sb.sweep_expired().await.unwrap();
        for blocked in sb.blocked_targets().await.unwrap() {
            let action = if s.unblock_to_dead_letters {
                Unblock::DeadLetter
            } else {
                Unblock::Drop
            };
            let r = sb.unblock(&blocked.target, action).await.unwrap();
            match action {
                Unblock::DeadLetter => unblock_dead += r.unblocked as u64,
                _ => unblock_drops += r.unblocked as u64,
            }
        }
        let counts = storage.counts(None).await.unwrap();
        if counts.pending() == 0 && counts.blocked == 0 {
            break;
        }
        rounds += 1;
        assert!(rounds < 300, "the schedule never drained: {counts:?}");
        clock.advance(chrono::Duration::seconds(1));
    }

    // What ended how.
    let mut applied: BTreeMap<u64, usize> = BTreeMap::new();
    let mut order: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
    for t in 0..5u8 {
        let state = sb
            .aggregate_state::<Ledger>(&format!("t{t}"))
            .await
            .unwrap()
            .unwrap_or_default();
        for n in &state.applied {
            *applied.entry(*n).or_default() += 1;
        }
        order.insert(t, state.applied);
    }
    assert!(
        applied.values().all(|c| *c == 1),
        "a message applied twice: {applied:?}"
    );
    let dead = sb.dead_letters(DeadLetterFilter::all()).await.unwrap();
    let mut dead_signals = BTreeSet::new();
    let mut dead_expired = 0u64;
    for d in &dead {
        let signal = d.letter.original.message.signal_id.0.clone();
        let n: u64 = signal[1..].parse().unwrap();
        assert!(
            !applied.contains_key(&n),
            "m{n} delivered and dead-lettered"
        );
        assert!(dead_signals.insert(n), "m{n} dead-lettered twice");
        if d.letter.reason == "expired" {
            dead_expired += 1;
            assert!(s.messages[n as usize].ttl_secs.is_some(), "m{n} had no TTL");
        }
    }
    let m = sb.metrics();
    let total = s.messages.len() as u64;
    let delivered = applied.len() as u64;
    let dead_lettered = dead_signals.len() as u64;
    let dropped = m.dropped + unblock_drops;
    let expired_gone = m.expired - dead_expired;
    assert_eq!(
        delivered + dead_lettered + dropped + expired_gone,
        total,
        "every message ends one way: {delivered} delivered, {dead_lettered} dead, {dropped} \
         dropped, {expired_gone} expired of {total}; {m:?}"
    );
    assert_eq!(m.delivered, delivered);
    assert_eq!(m.dead_lettered + unblock_dead, dead_lettered);
    assert_eq!(m.unblocked, unblock_drops + unblock_dead);
    if !s.dead_letter_expired {
        assert_eq!(dead_expired, 0);
    }
    let counts = storage.counts(None).await.unwrap();
    assert_eq!(
        (counts.delivered, counts.blocked, counts.pending()),
        (0, 0, 0)
    );

    // Per message: what the policy promises.
    for (n, p) in s.messages.iter().enumerate() {
        let n = n as u64;
        if p.ttl_secs.is_some() {
            continue;
        }
        if p.fail_times < s.max_attempts {
            assert!(applied.contains_key(&n), "m{n} should be delivered: {p:?}");
        } else {
            assert!(!applied.contains_key(&n), "m{n} exhausted yet delivered");
            let kept = dead_signals.contains(&n);
            match s.outcome {
                ExhaustedOutcome::DeadLetter => assert!(kept, "m{n} not dead-lettered"),
                ExhaustedOutcome::Drop => assert!(!kept, "m{n} dropped yet dead-lettered"),
                ExhaustedOutcome::Block => assert_eq!(kept, s.unblock_to_dead_letters),
            }
        }
    }
    // Per target: delivered messages sent without a delay come in send order.
    for (t, seen) in order {
        let undelayed: Vec<u64> = seen
            .into_iter()
            .filter(|n| s.messages[*n as usize].delay_secs.is_none())
            .collect();
        assert!(
            undelayed.windows(2).all(|w| w[0] < w[1]),
            "target t{t} out of order: {undelayed:?}"
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_message_ends_one_way_on_memory(s in schedule()) {
        runtime().block_on(run(common::memory(), s));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_message_ends_one_way_on_sqlite(s in schedule()) {
        runtime().block_on(async {
            let (storage, _dir) = common::sqlite().await;
            run(storage, s).await;
        });
    }
}

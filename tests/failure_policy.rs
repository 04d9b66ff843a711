//! Failure policy, poison messages, delayed delivery and TTL end to end, on memory, SQLite
//! and PostgreSQL, driven by hand with a `ManualClock` (no sleeps): retries at the back-off
//! times and not before, each exhausted outcome (dead letter, drop, block), a blocked target
//! beside 100 healthy ones, per-target order around retries, poison payloads and unknown
//! kinds, delays, TTL with and without a worker, the operators' requeue and unblock, and the
//! counters of every one of them.

mod common;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox::core::storage::{EntityKey, WriteBatch};
use shardbox::core::{MessageKind, NewMessage};
use shardbox::core::{NodeId, Storage, WorkerId};
use shardbox::prelude::*;
use shardbox::{
    Backoff, Clock, DeadLetterFilter, ExhaustedOutcome, FailurePolicy, ManualClock, ShardIndex,
    SignalId, Unblock,
};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Targets whose poison commands have been "fixed" (the handler accepts them now).
static HEALED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn heal(id: &str) {
    HEALED.lock().unwrap().insert(id.to_owned());
}

/// A target id no other test uses (they share `HEALED`).
fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{name}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Records, per target, the numbers it applied, in order.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Journal {
    applied: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum JournalCommand {
    /// Apply `n`; fail while fewer than `fail_first` attempts have failed.
    Flaky { n: u64, fail_first: u32 },
    /// Apply `n` once the target is healed; fail until then.
    Poison { n: u64 },
}

impl Message for JournalCommand {
    const TYPE: &'static str = "failure-test.journal.command";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Applied(u64);

impl Message for Applied {
    const TYPE: &'static str = "failure-test.journal.applied";
}

impl Aggregate for Journal {
    const KIND: &'static str = "journal";
    type Command = JournalCommand;
    type Event = Applied;

    async fn handle(
        &self,
        c: &JournalCommand,
        cx: &Context<'_>,
    ) -> Result<Vec<Applied>, HandlerError> {
        match c {
            JournalCommand::Flaky { n, fail_first } if cx.attempts < *fail_first => Err(
                HandlerError::new(format!("flaky {n} fails attempt {}", cx.attempts + 1)),
            ),
            JournalCommand::Flaky { n, .. } => Ok(vec![Applied(*n)]),
            JournalCommand::Poison { n } if HEALED.lock().unwrap().contains(cx.target_id) => {
                Ok(vec![Applied(*n)])
            }
            JournalCommand::Poison { n } => Err(HandlerError::new(format!("poison {n}"))),
        }
    }

    fn apply(&mut self, e: &Applied) {
        self.applied.push(e.0);
    }
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn ms(n: i64) -> chrono::Duration {
    chrono::Duration::milliseconds(n)
}

fn policy(max_attempts: u32, on_exhausted: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy::new(
        max_attempts,
        Backoff::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        },
        on_exhausted,
    )
}

async fn build(
    storage: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
    edit: impl FnOnce(shardbox::ShardboxBuilder) -> shardbox::ShardboxBuilder,
) -> Shardbox {
    edit(
        Shardbox::builder()
            .shared_storage(storage)
            .clock(clock)
            .shards(1)
            .poll_interval(Duration::from_millis(500))
            .dedup_window(Duration::ZERO)
            .aggregate::<Journal>(),
    )
    .build()
    .await
    .expect("build")
}

async fn send(sb: &Shardbox, id: &str, c: JournalCommand) {
    sb.send::<Journal>(id, &c).await.expect("send");
}

async fn applied(sb: &Shardbox, id: &str) -> Vec<u64> {
    sb.aggregate_state::<Journal>(id)
        .await
        .expect("state")
        .map(|j| j.applied)
        .unwrap_or_default()
}

fn key(id: &str) -> EntityKey {
    EntityKey {
        kind: Journal::KIND.into(),
        tenant: String::new(),
        id: id.into(),
    }
}

/// A handler failing its first 3 attempts is retried 1 s, 2 s and 4 s later (not a
/// millisecond earlier) and delivered on attempt 4, once; the target's later message waits
/// behind it in order; another target goes on at once.
async fn retried_at_the_backoff_times_then_delivered_in_order(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(5, ExhaustedOutcome::DeadLetter))
    })
    .await;
    let (a, b) = (unique("flaky"), unique("other"));
    send(
        &sb,
        &a,
        JournalCommand::Flaky {
            n: 1,
            fail_first: 3,
        },
    )
    .await;
    send(
        &sb,
        &a,
        JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
    )
    .await;
    send(
        &sb,
        &b,
        JournalCommand::Flaky {
            n: 7,
            fail_first: 0,
        },
    )
    .await;

    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.delivered, r.totals.retried), (1, 1), "{r:?}");
    assert_eq!(applied(&sb, &b).await, [7], "the other target went on");
    for (attempt, delay_ms) in [(2, 1_000), (3, 2_000), (4, 4_000)] {
        assert_eq!(
            storage.next_due(ShardIndex(0), clock.now()).await.unwrap(),
            Some(clock.now() + ms(delay_ms)),
            "attempt {attempt} is due {delay_ms} ms after the failure"
        );
        clock.advance(ms(delay_ms - 1));
        let r = sb.deliver_all().await.unwrap();
        assert_eq!(
            (r.totals.delivered, r.totals.retried),
            (0, 0),
            "not a millisecond early: {r:?}"
        );
        clock.advance(ms(1));
        let r = sb.deliver_all().await.unwrap();
        if attempt < 4 {
            assert_eq!((r.totals.delivered, r.totals.retried), (0, 1), "{r:?}");
        } else {
            assert_eq!(
                r.totals.delivered, 2,
                "attempt 4 and the message behind it: {r:?}"
            );
        }
    }
    assert_eq!(applied(&sb, &a).await, [1, 2], "once each, in order");
    let m = sb.metrics();
    assert_eq!((m.delivered, m.retries), (3, 3), "{m:?}");
    assert_eq!(
        (m.dead_lettered, m.dropped, m.blocked, m.expired),
        (0, 0, 0, 0)
    );
    assert_eq!(storage.counts(None).await.unwrap().pending(), 0);
}

/// Exhausted under `dead_letter`: the message is kept with its whole origin; its target goes
/// on with the next message.
async fn exhausted_dead_letter_keeps_the_origin(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(3, ExhaustedOutcome::DeadLetter))
    })
    .await;
    let p = unique("poison");
    let options = SendOptions::default()
        .signal_id("poison-signal")
        .meta("trace", "t-1");
    let receipt = sb
        .send_with::<Journal>(&p, &JournalCommand::Poison { n: 1 }, options)
        .await
        .unwrap();
    send(
        &sb,
        &p,
        JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
    )
    .await;
    sb.deliver_all().await.unwrap();
    clock.advance(ms(1_000));
    sb.deliver_all().await.unwrap();
    clock.advance(ms(2_000));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(
        (r.totals.dead_lettered, r.totals.delivered),
        (1, 1),
        "{r:?}"
    );
    assert_eq!(applied(&sb, &p).await, [2], "the target went on");

    let dead = sb
        .dead_letters(DeadLetterFilter::all().target(Journal::KIND, &p))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let d = &dead[0].letter;
    let m = &d.original.message;
    assert_eq!(
        (m.target_kind.as_str(), m.target_id.as_str()),
        ("journal", p.as_str())
    );
    assert_eq!(m.signal_id, receipt.signal_id);
    assert_eq!(m.metadata.get("trace").map(String::as_str), Some("t-1"));
    assert_eq!(m.payload_type, JournalCommand::TYPE);
    let payload: JournalCommand = serde_json::from_slice(&m.payload).unwrap();
    assert!(matches!(payload, JournalCommand::Poison { n: 1 }));
    assert_eq!(d.original.shard, ShardIndex(0));
    assert_eq!(d.attempts, 3);
    assert_eq!(d.reason, "poison 1");
    assert_eq!(d.first_attempt_at, Some(t0()));
    assert_eq!(d.last_attempt_at, t0() + ms(3_000));
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap(),
        1
    );
    let m = sb.metrics();
    assert_eq!(
        (m.retries, m.dead_lettered, m.delivered),
        (2, 1, 1),
        "{m:?}"
    );
}

/// Exhausted under `drop`: counted, gone, and the target goes on.
async fn exhausted_drop_is_counted_and_the_target_goes_on(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(2, ExhaustedOutcome::Drop))
    })
    .await;
    let p = unique("poison");
    send(&sb, &p, JournalCommand::Poison { n: 1 }).await;
    send(
        &sb,
        &p,
        JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
    )
    .await;
    sb.deliver_all().await.unwrap();
    clock.advance(ms(1_000));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.dropped, r.totals.delivered), (1, 1), "{r:?}");
    assert_eq!(applied(&sb, &p).await, [2]);
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap(),
        0
    );
    assert_eq!(storage.counts(None).await.unwrap().pending(), 0);
    let m = sb.metrics();
    assert_eq!(
        (m.retries, m.dropped, m.delivered, m.dead_lettered),
        (1, 1, 1, 0)
    );
}

/// Exhausted under `block`, in a shard with 100 other targets: the poison target stops (its
/// later messages wait, in order, poll after poll), the 100 others are delivered; an operator
/// requeue (after the fix) delivers the blocked message and then the rest, in order.
async fn a_blocked_target_waits_while_100_others_go_on(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(2, ExhaustedOutcome::Block))
            .page_size(64)
    })
    .await;
    let p = unique("poison");
    send(&sb, &p, JournalCommand::Poison { n: 1 }).await;
    let others: Vec<String> = (0..100).map(|i| unique(&format!("healthy{i}"))).collect();
    for (i, id) in others.iter().enumerate() {
        send(
            &sb,
            id,
            JournalCommand::Flaky {
                n: i as u64,
                fail_first: 0,
            },
        )
        .await;
    }
    send(
        &sb,
        &p,
        JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
    )
    .await;
    send(
        &sb,
        &p,
        JournalCommand::Flaky {
            n: 3,
            fail_first: 0,
        },
    )
    .await;

    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.delivered, r.totals.retried), (100, 1), "{r:?}");
    clock.advance(ms(1_000));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.blocked, r.totals.delivered), (1, 0), "{r:?}");
    for id in &others {
        assert_eq!(applied(&sb, id).await.len(), 1, "{id} went on");
    }
    let blocked = sb.blocked_targets().await.unwrap();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].target, key(&p));
    assert_eq!(blocked[0].attempts, 2);
    assert_eq!(blocked[0].last_error.as_deref(), Some("poison 1"));
    assert_eq!(blocked[0].first_failed_at, Some(t0()));
    let counts = storage.counts(None).await.unwrap();
    assert_eq!((counts.blocked, counts.pending()), (1, 2));

    // Poll after poll, the later messages stay behind the blocked one.
    for _ in 0..3 {
        clock.advance(ms(500));
        let r = sb.deliver_all().await.unwrap();
        assert_eq!(r.totals.delivered, 0, "{r:?}");
    }
    assert!(applied(&sb, &p).await.is_empty());

    heal(&p);
    let report = sb.unblock(&key(&p), Unblock::Requeue).await.unwrap();
    assert_eq!(report.unblocked, 1);
    assert!(sb.blocked_targets().await.unwrap().is_empty());
    // The held rows are re-checked within one poll interval.
    clock.advance(ms(500));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(r.totals.delivered, 3, "{r:?}");
    assert_eq!(
        applied(&sb, &p).await,
        [1, 2, 3],
        "in order, the requeued one first"
    );
    let m = sb.metrics();
    assert_eq!(
        (m.delivered, m.blocked, m.unblocked, m.retries),
        (103, 1, 1, 1),
        "{m:?}"
    );
    assert_eq!(storage.counts(None).await.unwrap().pending(), 0);
}

/// Unblock by drop: the blocked message is gone, the target's later messages go on.
async fn unblock_by_drop_lets_the_target_go_on(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(1, ExhaustedOutcome::Block))
    })
    .await;
    let p = unique("poison");
    send(&sb, &p, JournalCommand::Poison { n: 1 }).await;
    send(
        &sb,
        &p,
        JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
    )
    .await;
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.blocked, r.totals.held), (1, 1), "{r:?}");
    let report = sb.unblock(&key(&p), Unblock::Drop).await.unwrap();
    assert_eq!(report.unblocked, 1);
    let again = sb.unblock(&key(&p), Unblock::Drop).await.unwrap();
    assert_eq!(again.unblocked, 0, "nothing left to unblock");
    clock.advance(ms(500));
    sb.deliver_all().await.unwrap();
    assert_eq!(applied(&sb, &p).await, [2]);
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap(),
        0
    );
    let m = sb.metrics();
    assert_eq!((m.blocked, m.unblocked, m.delivered), (1, 1, 1), "{m:?}");
}

/// `n` for a target, handled at once.
fn ok(n: u64) -> JournalCommand {
    JournalCommand::Flaky { n, fail_first: 0 }
}

/// The smallest case of messages waiting behind a block (one shard, 1 s poll interval): #0
/// blocks at t0 with #1 behind it, #2 arrives at t0 + 0.5 s, the operator unblocks at
/// t0 + 1.2 s. Every message behind the block is parked until the unblock and due at once
/// after it, so the target applies them in `seq` order: [0, 1, 2], not [0, 2, 1] (the order
/// of staggered "now + poll interval" holds).
async fn messages_behind_a_block_go_on_in_order_after_the_unblock(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(1, ExhaustedOutcome::Block))
            .poll_interval(Duration::from_secs(1))
    })
    .await;
    let p = unique("poison");
    send(&sb, &p, JournalCommand::Poison { n: 0 }).await;
    send(&sb, &p, ok(1)).await;
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.blocked, r.totals.delivered), (1, 0), "{r:?}");

    clock.advance(ms(500));
    send(&sb, &p, ok(2)).await;
    sb.deliver_all().await.unwrap();
    clock.advance(ms(700));
    sb.deliver_all().await.unwrap();
    assert!(applied(&sb, &p).await.is_empty(), "still blocked");

    heal(&p);
    let report = sb.unblock(&key(&p), Unblock::Requeue).await.unwrap();
    assert_eq!(report.unblocked, 1);
    for step in [0, 400, 700] {
        clock.advance(ms(step));
        sb.deliver_all().await.unwrap();
    }
    assert_eq!(applied(&sb, &p).await, [0, 1, 2], "in seq order");
    assert_eq!(storage.counts(None).await.unwrap().pending(), 0);
}

/// Twenty messages for a blocked target, arriving one every 100 ms while a second target
/// goes on: after the requeue the blocked target applies them all in `seq` order, within the
/// first deliveries after the unblock (no poll interval to wait out).
async fn twenty_messages_behind_a_block_are_delivered_in_order(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(1, ExhaustedOutcome::Block))
            .poll_interval(Duration::from_secs(1))
            .page_size(4)
    })
    .await;
    let (p, other) = (unique("poison"), unique("healthy"));
    send(&sb, &p, JournalCommand::Poison { n: 0 }).await;
    sb.deliver_all().await.unwrap();
    for n in 1..20 {
        clock.advance(ms(100));
        send(&sb, &p, ok(n)).await;
        send(&sb, &other, ok(n)).await;
        sb.deliver_all().await.unwrap();
    }
    assert!(applied(&sb, &p).await.is_empty(), "still blocked");
    assert_eq!(applied(&sb, &other).await, (1..20).collect::<Vec<_>>());

    heal(&p);
    let report = sb.unblock(&key(&p), Unblock::Requeue).await.unwrap();
    assert_eq!(report.unblocked, 1);
    let first = sb.deliver_all().await.unwrap();
    for _ in 0..11 {
        clock.advance(ms(100));
        sb.deliver_all().await.unwrap();
    }
    assert_eq!(applied(&sb, &p).await, (0..20).collect::<Vec<_>>());
    assert_eq!(first.totals.delivered, 20, "all due at once: {first:?}");
    assert_eq!(storage.counts(None).await.unwrap().pending(), 0);
}

/// While a target stays blocked, the messages waiting behind it are written once (when a
/// stage first sees them) and then left alone: poll interval after poll interval, no stage
/// reads or rewrites them (no stage runs at all), and the shard reports no due time for
/// them. They are still counted as pending, and go on after an unblock by drop.
async fn messages_behind_a_block_are_not_rewritten_while_it_lasts(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(1, ExhaustedOutcome::Block))
    })
    .await;
    let p = unique("poison");
    send(&sb, &p, JournalCommand::Poison { n: 0 }).await;
    for n in 1..=5 {
        send(&sb, &p, ok(n)).await;
    }
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.blocked, r.totals.held), (1, 5), "{r:?}");
    assert_eq!(
        storage.next_due(ShardIndex(0), clock.now()).await.unwrap(),
        None,
        "nothing behind a block is due by itself"
    );
    let (mut stages, mut held) = (0, 0);
    for _ in 0..40 {
        clock.advance(ms(500));
        let r = sb.deliver_all().await.unwrap();
        stages += r.stages;
        held += r.totals.held;
    }
    assert_eq!(
        (stages, held),
        (0, 0),
        "no row rewritten in 40 poll intervals"
    );
    let counts = storage.counts(None).await.unwrap();
    assert_eq!((counts.blocked, counts.pending()), (1, 5), "{counts:?}");

    // A message that arrives later is parked by the first stage that sees it, then left too.
    send(&sb, &p, ok(6)).await;
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.stages, r.totals.held), (1, 1), "{r:?}");
    clock.advance(ms(5_000));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(r.stages, 0, "{r:?}");

    let report = sb.unblock(&key(&p), Unblock::Drop).await.unwrap();
    assert_eq!(report.unblocked, 1);
    sb.deliver_all().await.unwrap();
    assert_eq!(applied(&sb, &p).await, [1, 2, 3, 4, 5, 6]);
}

/// A payload that does not deserialize and a kind nobody registered go through the policy
/// and end in the dead letters with a reason that says so; the shard goes on.
async fn poison_payloads_and_unknown_kinds_are_dead_lettered(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(1, ExhaustedOutcome::DeadLetter))
    })
    .await;
    let raw = |kind: &str, id: &str, payload: &[u8], payload_type: &str| NewMessage {
        signal_id: SignalId::generate(),
        kind: MessageKind::Command,
        target_kind: kind.into(),
        target_id: id.into(),
        tenant: String::new(),
        payload: payload.to_vec(),
        payload_type: payload_type.into(),
        payload_version: 1,
        metadata: Default::default(),
        received_at: t0(),
        deliver_after: None,
        expires_at: None,
    };
    let (bad, ghost, fine) = (unique("bad"), unique("ghost"), unique("fine"));
    let messages = vec![
        sb.address(raw("journal", &bad, b"{not json", JournalCommand::TYPE)),
        sb.address(raw("ghost", &ghost, b"{}", "ghost.command")),
    ];
    storage
        .write(WriteBatch {
            events: vec![],
            messages,
        })
        .await
        .unwrap();
    send(
        &sb,
        &fine,
        JournalCommand::Flaky {
            n: 5,
            fail_first: 0,
        },
    )
    .await;
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(
        (r.totals.dead_lettered, r.totals.delivered),
        (2, 1),
        "{r:?}"
    );
    assert_eq!(applied(&sb, &fine).await, [5]);
    let reason_of = |kind: &'static str| {
        let sb = sb.clone();
        async move {
            let dead = sb
                .dead_letters(DeadLetterFilter::all().kind(kind))
                .await
                .unwrap();
            assert_eq!(dead.len(), 1, "{kind}");
            dead[0].letter.reason.clone()
        }
    };
    let reason = reason_of("journal").await;
    assert!(reason.contains("does not deserialize"), "{reason}");
    let reason = reason_of("ghost").await;
    assert!(
        reason.contains("no handler for entity kind `ghost`"),
        "{reason}"
    );
    assert_eq!(sb.metrics().dead_lettered, 2);
}

/// A delayed message (by delay or due time) is not delivered a millisecond early, and is
/// delivered by the first stage after it is due; the shard's next due time says when.
async fn delayed_delivery_is_never_early(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| b).await;
    let (a, b) = (unique("later"), unique("at"));
    sb.send_with::<Journal>(
        &a,
        &JournalCommand::Flaky {
            n: 1,
            fail_first: 0,
        },
        SendOptions::default().delay(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let due = SendOptions::default().due_at(t0() + ms(45_000));
    sb.send_with::<Journal>(
        &b,
        &JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
        due,
    )
    .await
    .unwrap();
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 0);
    assert_eq!(
        storage.next_due(ShardIndex(0), t0()).await.unwrap(),
        Some(t0() + ms(30_000))
    );
    clock.advance(ms(29_999));
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 0);
    clock.advance(ms(1));
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 1);
    clock.set(t0() + ms(44_999));
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 0);
    clock.advance(ms(1));
    assert_eq!(sb.deliver_all().await.unwrap().totals.delivered, 1);
    assert_eq!(
        (applied(&sb, &a).await, applied(&sb, &b).await),
        (vec![1], vec![2])
    );
    assert_eq!(sb.metrics().delivered, 2);
}

/// TTL with a worker: a due message whose TTL ran out is not delivered, is counted, and is
/// dead-lettered with reason `expired` only when configured.
async fn ttl_expires_due_messages_with_a_worker(storage: Arc<dyn Storage>) {
    for keep in [false, true] {
        let clock = Arc::new(ManualClock::new(t0()));
        let sb = build(storage.clone(), clock.clone(), |b| {
            b.dead_letter_expired(keep)
        })
        .await;
        let id = unique("ttl");
        let before = sb
            .count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap();
        sb.send_with::<Journal>(
            &id,
            &JournalCommand::Flaky {
                n: 1,
                fail_first: 0,
            },
            SendOptions::default().ttl(Duration::from_secs(10)),
        )
        .await
        .unwrap();
        clock.advance(ms(10_000));
        let r = sb.deliver_all().await.unwrap();
        assert_eq!((r.totals.expired, r.totals.delivered), (1, 0), "{r:?}");
        assert!(applied(&sb, &id).await.is_empty());
        let dead = sb
            .dead_letters(DeadLetterFilter::all().target(Journal::KIND, &id))
            .await
            .unwrap();
        let after = sb
            .count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap();
        if keep {
            assert_eq!(dead.len(), 1);
            assert_eq!(dead[0].letter.reason, "expired");
            assert_eq!(
                (dead[0].letter.attempts, dead[0].letter.first_attempt_at),
                (0, None)
            );
            assert_eq!(after, before + 1);
        } else {
            assert!(dead.is_empty());
            assert_eq!(after, before);
        }
        let m = sb.metrics();
        assert_eq!((m.expired, m.dead_lettered), (1, u64::from(keep)), "{m:?}");
    }
}

/// TTL without a worker: a message delayed past its TTL is never read by a page; the sweep
/// finds it in a shard nobody serves and expires it in a fenced commit.
async fn ttl_sweep_expires_messages_no_page_reads(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.shards(4).dead_letter_expired(true)
    })
    .await;
    let (id, alive) = (unique("sleeper"), unique("alive"));
    let late = SendOptions::default()
        .delay(Duration::from_secs(60))
        .ttl(Duration::from_secs(10));
    sb.send_with::<Journal>(
        &id,
        &JournalCommand::Flaky {
            n: 1,
            fail_first: 0,
        },
        late,
    )
    .await
    .unwrap();
    let long = SendOptions::default()
        .delay(Duration::from_secs(60))
        .ttl(Duration::from_secs(600));
    sb.send_with::<Journal>(
        &alive,
        &JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
        long,
    )
    .await
    .unwrap();
    clock.advance(ms(11_000));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(r.totals.expired, 0, "not due: no page reads it");
    let r = sb.sweep_expired().await.unwrap();
    assert_eq!((r.totals.expired, r.totals.dead_lettered), (1, 1), "{r:?}");
    assert_eq!(
        storage.counts(None).await.unwrap().to_deliver,
        1,
        "only the live one left"
    );
    let dead = sb
        .dead_letters(DeadLetterFilter::all().target(Journal::KIND, &id))
        .await
        .unwrap();
    assert_eq!(dead[0].letter.reason, "expired");
    let r = sb.sweep_expired().await.unwrap();
    assert_eq!(r.totals.expired, 0, "nothing left to sweep");
    // A shard held by another node is left to it.
    let expiring = SendOptions::default()
        .delay(Duration::from_secs(60))
        .ttl(Duration::from_secs(1));
    let held = unique("held");
    sb.send_with::<Journal>(
        &held,
        &JournalCommand::Flaky {
            n: 3,
            fail_first: 0,
        },
        expiring,
    )
    .await
    .unwrap();
    let shard = sb.shard_of(Journal::KIND, &held);
    let now = clock.now();
    let lease = storage
        .pick_up(
            shard,
            &NodeId("other".into()),
            WorkerId(0),
            now,
            now + ms(30_000),
        )
        .await
        .unwrap()
        .expect("free");
    clock.advance(ms(2_000));
    assert_eq!(
        sb.sweep_expired().await.unwrap().totals.expired,
        0,
        "held elsewhere"
    );
    storage.release(&lease).await.unwrap();
    assert_eq!(sb.sweep_expired().await.unwrap().totals.expired, 1);
    clock.advance(ms(60_000));
    sb.deliver_all().await.unwrap();
    assert_eq!(applied(&sb, &alive).await, [2]);
    let m = sb.metrics();
    assert_eq!(
        (m.expired, m.dead_lettered, m.delivered),
        (2, 2, 1),
        "{m:?}"
    );
}

/// Requeued dead letters go back to the Inbox with a fresh attempt count and are delivered.
async fn requeued_dead_letters_are_delivered(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(2, ExhaustedOutcome::DeadLetter))
            .shards(4)
    })
    .await;
    let ids: Vec<String> = (0..3).map(|i| unique(&format!("requeue{i}"))).collect();
    for (i, id) in ids.iter().enumerate() {
        send(&sb, id, JournalCommand::Poison { n: i as u64 }).await;
    }
    sb.deliver_all().await.unwrap();
    clock.advance(ms(1_000));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(r.totals.dead_lettered, 3, "{r:?}");
    for id in &ids {
        heal(id);
    }
    // One by target, then the rest.
    let one = sb
        .requeue_dead_letters(DeadLetterFilter::all().target(Journal::KIND, &ids[0]))
        .await
        .unwrap();
    assert_eq!((one.requeued, one.missing, one.skipped), (1, 0, 0));
    assert_eq!(one.shards, vec![sb.shard_of(Journal::KIND, &ids[0])]);
    let rest = sb
        .requeue_dead_letters(DeadLetterFilter::all().kind(Journal::KIND))
        .await
        .unwrap();
    assert_eq!(rest.requeued, 2);
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap(),
        0
    );
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.delivered, r.totals.retried), (3, 0), "{r:?}");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(applied(&sb, id).await, [i as u64]);
    }
    let m = sb.metrics();
    assert_eq!(
        (m.dead_lettered, m.requeued, m.delivered, m.retries),
        (3, 3, 3, 3),
        "{m:?}"
    );
}

/// A pick-up of a lease that expired without a release is counted as a takeover.
async fn a_lease_takeover_is_counted(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| b).await;
    let now = clock.now();
    storage
        .pick_up(
            ShardIndex(0),
            &NodeId("crashed".into()),
            WorkerId(0),
            now,
            now + ms(5_000),
        )
        .await
        .unwrap()
        .expect("free");
    let id = unique("takeover");
    send(
        &sb,
        &id,
        JournalCommand::Flaky {
            n: 1,
            fail_first: 0,
        },
    )
    .await;
    assert!(
        !sb.deliver_all().await.unwrap().picked_up,
        "held by the crashed node"
    );
    clock.advance(ms(5_000));
    let r = sb.deliver_all().await.unwrap();
    assert_eq!(r.totals.delivered, 1);
    sb.deliver_all().await.unwrap();
    let m = sb.metrics();
    assert_eq!(
        (m.lease_pick_ups, m.lease_takeovers, m.lease_refusals),
        (2, 1, 1),
        "{m:?}"
    );
}

/// A message that waits in retry back-off with a TTL expires before its retry: the messages
/// held behind it (until its retry time) go on at once, in `seq` order with those that arrived
/// after the hold. Before, a later message could overtake them: it was due while they were
/// still held for a retry that would never come (found by the simulation, seed 310).
async fn messages_behind_a_retry_that_expires_go_on_in_order(storage: Arc<dyn Storage>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = build(storage.clone(), clock.clone(), |b| {
        b.failure_policy(policy(5, ExhaustedOutcome::DeadLetter))
    })
    .await;
    let p = unique("expiring");
    sb.send_with::<Journal>(
        &p,
        &JournalCommand::Flaky {
            n: 1,
            fail_first: 1,
        },
        SendOptions::default().ttl(Duration::from_millis(500)),
    )
    .await
    .expect("send");
    send(&sb, &p, ok(2)).await;
    let r = sb.deliver_all().await.unwrap();
    assert_eq!((r.totals.retried, r.totals.held), (1, 1), "{r:?}");

    clock.advance(ms(600));
    send(&sb, &p, ok(3)).await;
    let swept = sb.sweep_expired().await.unwrap();
    assert_eq!(
        swept.totals.expired, 1,
        "#1 expired in its back-off: {swept:?}"
    );
    sb.deliver_all().await.unwrap();
    clock.advance(ms(1_000));
    sb.deliver_all().await.unwrap();
    assert_eq!(applied(&sb, &p).await, [2, 3], "in seq order");
}

common::on_every_backend!("failure_policy";
    retried_at_the_backoff_times_then_delivered_in_order,
    exhausted_dead_letter_keeps_the_origin,
    exhausted_drop_is_counted_and_the_target_goes_on,
    a_blocked_target_waits_while_100_others_go_on,
    unblock_by_drop_lets_the_target_go_on,
    messages_behind_a_block_go_on_in_order_after_the_unblock,
    twenty_messages_behind_a_block_are_delivered_in_order,
    messages_behind_a_block_are_not_rewritten_while_it_lasts,
    messages_behind_a_retry_that_expires_go_on_in_order,
    poison_payloads_and_unknown_kinds_are_dead_lettered,
    delayed_delivery_is_never_early,
    ttl_expires_due_messages_with_a_worker,
    ttl_sweep_expires_messages_no_page_reads,
    requeued_dead_letters_are_delivered,
    a_lease_takeover_is_counted,
);

/// Time as the (paused) tokio runtime sees it, so that a running node's timers and the
/// delivery clock move together without real sleeps.
struct TokioClock {
    base: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        self.base + chrono::Duration::from_std(self.start.elapsed()).unwrap_or_default()
    }
}

/// A node for a running test on paused tokio time (memory backend, the tokio clock, 4 shards,
/// an hour's lease, a 50-minute poll interval), as `edit` changes it; not started.
async fn running_node(
    edit: impl FnOnce(shardbox::ShardboxBuilder) -> shardbox::ShardboxBuilder,
) -> Shardbox {
    let clock = Arc::new(TokioClock {
        base: t0(),
        start: tokio::time::Instant::now(),
    });
    edit(
        Shardbox::builder()
            .memory()
            .clock(clock)
            .shards(4)
            .lease_duration(Duration::from_secs(3_600))
            .poll_interval(Duration::from_secs(3_000))
            .aggregate::<Journal>(),
    )
    .build()
    .await
    .unwrap()
}

/// A running node (memory backend, paused tokio time, a lingering lease): a failed message is
/// retried within a few milliseconds of each backoff time although the poll interval is 50
/// minutes. The retry time is written by the stage after its page was read, so the node must
/// take it from its own commit to set the shard's timer.
#[tokio::test(start_paused = true)]
async fn a_running_node_retries_at_the_backoff_time_without_a_poll() {
    let sb = running_node(|b| {
        b.lease_linger(Duration::from_secs(1_000))
            .failure_policy(policy(5, ExhaustedOutcome::DeadLetter))
    })
    .await;
    let node = sb.start();
    let target = unique("retried");
    sb.send::<Journal>(
        &target,
        &JournalCommand::Flaky {
            n: 1,
            fail_first: 2,
        },
    )
    .await
    .unwrap();
    // Attempt 1 at once, attempt 2 after 1 s, attempt 3 (which succeeds) 2 s later.
    tokio::time::sleep(Duration::from_millis(2_990)).await;
    assert!(
        applied(&sb, &target).await.is_empty(),
        "not before its retry"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        applied(&sb, &target).await,
        [1],
        "retried within 10 ms of its backoff time"
    );
    node.shutdown().await.unwrap();
}

/// A running node (memory backend, paused tokio time): a delayed message is delivered within
/// a few milliseconds of its due time although the poll interval is 50 minutes (a due-time
/// timer wakes its shard), and a message whose TTL passes before it is due is expired by the
/// periodic sweep.
#[tokio::test(start_paused = true)]
async fn a_running_node_delivers_delayed_messages_promptly_and_sweeps_ttl() {
    let sb = running_node(|b| b.ttl_sweep_interval(Duration::from_secs(20))).await;
    let node = sb.start();
    let (a, b) = (unique("scheduled"), unique("sleeper"));
    sb.send_with::<Journal>(
        &a,
        &JournalCommand::Flaky {
            n: 1,
            fail_first: 0,
        },
        SendOptions::default().delay(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let expiring = SendOptions::default()
        .delay(Duration::from_secs(120))
        .ttl(Duration::from_secs(10));
    sb.send_with::<Journal>(
        &b,
        &JournalCommand::Flaky {
            n: 2,
            fail_first: 0,
        },
        expiring,
    )
    .await
    .unwrap();

    tokio::time::sleep(Duration::from_millis(29_990)).await;
    assert!(applied(&sb, &a).await.is_empty(), "not before it is due");
    assert_eq!(
        sb.metrics().expired,
        1,
        "the sweep at 20 s expired the sleeper"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        applied(&sb, &a).await,
        [1],
        "delivered within 10 ms of its due time"
    );
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert!(
        applied(&sb, &b).await.is_empty(),
        "expired, never delivered"
    );
    let m = sb.metrics();
    assert_eq!((m.delivered, m.expired), (1, 1), "{m:?}");
    node.shutdown().await.unwrap();
}

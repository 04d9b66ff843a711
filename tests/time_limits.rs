//! User-supplied durations and times never panic: a send's delay, due time and TTL, a
//! reactor's `Outgoing::delayed`, and the builder's durations. Out of range is a typed error
//! at the call that took the value, naming the field; nothing is written. Property tests over
//! extreme values on memory and SQLite (every send, post and option), regressions for the
//! values that panicked or were silently ignored before.

mod common;

use chrono::{DateTime, Utc};
use common::{Tally, TallyCommand, TallyEvent};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Backoff, DeliveryError, ExhaustedOutcome, TimeField, MAX_SPAN};
use std::sync::Arc;
use std::time::Duration;

/// 9999-12-31T23:59:59Z: every time given or made must lie before it.
fn latest() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_300_799, 0).unwrap()
}

/// Durations around every edge: zero, small, the limit and one past it, chrono's and std's
/// ends, and anything in between.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(MAX_SPAN),
        Just(MAX_SPAN + Duration::from_nanos(1)),
        Just(Duration::MAX),
        Just(Duration::from_secs(i64::MAX as u64 / 1000)),
        Just(Duration::from_secs(10_000_000_000_000)),
        (0u64..=3_600).prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Times over chrono's whole range and at the limit.
fn time() -> impl Strategy<Value = DateTime<Utc>> {
    let (min, max) = (
        DateTime::<Utc>::MIN_UTC.timestamp(),
        DateTime::<Utc>::MAX_UTC.timestamp(),
    );
    prop_oneof![
        Just(DateTime::<Utc>::MIN_UTC),
        Just(DateTime::<Utc>::MAX_UTC),
        Just(latest()),
        Just(latest() - chrono::Duration::seconds(1)),
        (min..=max).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap()),
        (-86_400i64..=86_400).prop_map(|s| Utc::now() + chrono::Duration::seconds(s)),
    ]
}

#[derive(Debug, Clone)]
struct Times {
    delay: Option<Duration>,
    due_at: Option<DateTime<Utc>>,
    ttl: Option<Duration>,
}

impl Times {
    fn options(&self) -> SendOptions {
        let mut o = SendOptions::default();
        if let Some(d) = self.delay {
            o = o.delay(d);
        }
        if let Some(t) = self.due_at {
            o = o.due_at(t);
        }
        if let Some(d) = self.ttl {
            o = o.ttl(d);
        }
        o
    }

    /// The field a send with these times must be refused for (the first checked), if any.
    fn fault(&self) -> Option<TimeField> {
        if self.delay.is_some_and(|d| d > MAX_SPAN) {
            Some(TimeField::Delay)
        } else if self.due_at.is_some_and(|t| t >= latest()) {
            Some(TimeField::DueAt)
        } else if self.ttl.is_some_and(|d| d > MAX_SPAN) {
            Some(TimeField::Ttl)
        } else {
            None
        }
    }
}

fn times() -> impl Strategy<Value = Times> {
    (
        proptest::option::of(duration()),
        proptest::option::of(time()),
        proptest::option::of(duration()),
    )
        .prop_map(|(delay, due_at, ttl)| Times { delay, due_at, ttl })
}

/// `outcome` is a success when `fault` is none, else the typed error naming that field.
fn check<T: std::fmt::Debug>(
    outcome: Result<T, DeliveryError>,
    fault: Option<TimeField>,
) -> Result<(), TestCaseError> {
    match (outcome, fault) {
        (Ok(_), None) => Ok(()),
        (Err(DeliveryError::InvalidTime(e)), Some(field)) if e.field == field => {
            prop_assert!(e.to_string().contains(field.name()), "{e}");
            Ok(())
        }
        (other, fault) => Err(TestCaseError::fail(format!(
            "expected {fault:?}, got {other:?}"
        ))),
    }
}

/// Every send and post of the facade with arbitrary times: a success or the typed error, never
/// a panic; the rows written are exactly those of the accepted calls; delivering them (and
/// the TTL sweep's reads) does not panic either.
fn sends_and_posts_take_any_time(storage: Arc<dyn Storage>, rt: &tokio::runtime::Runtime) {
    let sb = rt
        .block_on(
            Shardbox::builder()
                .shared_storage(storage.clone())
                .shards(4)
                .aggregate::<Tally>()
                .projection::<common::TallyView>()
                .build(),
        )
        .expect("build");
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let accepted = std::cell::Cell::new(0u64);
    runner
        .run(&times(), |t| {
            rt.block_on(async {
                let fault = t.fault();
                let cmd = TallyCommand::Add(1);
                let sent = sb.send_with::<Tally>("p-1", &cmd, t.options()).await;
                check(sent, fault)?;
                let posted = sb
                    .post_with(
                        EventSource::external("p-2"),
                        &TallyEvent::Added(1),
                        t.options(),
                    )
                    .await;
                check(posted, fault)?;
                let many = sb
                    .inbox()
                    .send_many::<Tally>(&[("p-3", cmd.clone()), ("p-4", cmd)], t.options())
                    .await;
                check(many, fault)?;
                if fault.is_none() {
                    accepted.set(accepted.get() + 4);
                }
                sb.deliver_all().await.expect("delivery does not fail");
                Ok(())
            })
        })
        .unwrap();
    let counts = rt.block_on(storage.counts(None)).expect("counts");
    // The accepted sends' rows (delivered, still delayed or expired) and the events' copies:
    // none of a refused call.
    assert!(
        counts.pending() + counts.delivered <= accepted.get() * 2,
        "{counts:?} for {} accepted",
        accepted.get()
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn memory_sends_and_posts_take_any_time() {
    sends_and_posts_take_any_time(common::memory(), &runtime());
}

#[test]
fn sqlite_sends_and_posts_take_any_time() {
    let rt = runtime();
    let (storage, _dir) = rt.block_on(common::sqlite());
    sends_and_posts_take_any_time(storage, &rt);
}

/// The values that panicked in `Inbox::send` before ("`DateTime + TimeDelta` overflowed"):
/// each is now the typed error naming the field, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_delays_and_ttls_are_refused_not_a_panic() {
    let storage = common::memory();
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .aggregate::<Tally>()
        .build()
        .await
        .expect("build");
    let cmd = TallyCommand::Add(1);
    let cases = [
        (SendOptions::default().delay(Duration::MAX), "`delay`"),
        (SendOptions::default().ttl(Duration::MAX), "`ttl`"),
        (
            SendOptions::default().delay(Duration::from_secs(10_000_000_000_000)),
            "`delay`",
        ),
        (
            SendOptions::default().due_at(DateTime::<Utc>::MAX_UTC),
            "`due_at`",
        ),
    ];
    for (options, field) in cases {
        let err = sb
            .send_with::<Tally>("t", &cmd, options)
            .await
            .expect_err("refused");
        assert!(
            matches!(err, DeliveryError::InvalidTime(_)) && err.to_string().contains(field),
            "{err}"
        );
    }
    let counts = storage.counts(None).await.unwrap();
    assert_eq!(counts.pending() + counts.delivered, 0, "{counts:?}");
}

/// A reactor sending `Add(1)` to tally `late` delayed by `delay_of(x)` for each `Added(x)`:
/// `x < 0` stands for `Duration::MAX`. Only the events of tallies `src-*`.
struct Scheduler;

fn delay_of(x: i64) -> Duration {
    u64::try_from(x).map_or(Duration::MAX, Duration::from_secs)
}

impl Reactor for Scheduler {
    const KIND: &'static str = "scheduler";
    type Event = TallyEvent;
    async fn react(&self, e: &TallyEvent, cx: &Context<'_>) -> Result<Vec<Outgoing>, HandlerError> {
        // Only the sources' events: `late`'s own would loop.
        let (TallyEvent::Added(x), true) = (e, cx.target_id.starts_with("src-")) else {
            return Ok(vec![]);
        };
        Ok(vec![Outgoing::command::<Tally>(
            "late",
            &TallyCommand::Add(1),
        )?
        .delayed(delay_of(*x))])
    }
}

/// `Outgoing::delayed` with a delay past the limit fails its reaction with an error naming it
/// (dead-lettered under a one-attempt policy); before, `Duration::MAX` silently meant "no
/// delay" and 10^13 s panicked inside the worker. A delay within the limit is kept.
async fn reactor_delays_are_checked(storage: Arc<dyn Storage>) {
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(2)
        .aggregate::<Tally>()
        .reactor(Scheduler)
        .failure_policy(FailurePolicy::new(
            1,
            Backoff::Fixed(Duration::from_secs(1)),
            ExhaustedOutcome::DeadLetter,
        ))
        .build()
        .await
        .expect("build");
    let node = sb.start();
    for (n, x) in [-1i64, 10_000_000_000_000, 3_600, 0]
        .into_iter()
        .enumerate()
    {
        sb.send::<Tally>(&format!("src-{n}"), &TallyCommand::Add(x))
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (dead, late) = loop {
        let dead = storage
            .list_dead_letters(&Default::default())
            .await
            .unwrap();
        let late = sb.aggregate_state::<Tally>("late").await.unwrap();
        // Every reaction handled: only the hour's delayed command left (under load the last
        // reactor copy can still be on its way when the others are done).
        let pending = storage.counts(None).await.unwrap().pending();
        if dead.len() >= 2 && late.is_some() && pending == 1 || std::time::Instant::now() > deadline
        {
            break (dead, late);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    node.shutdown().await.expect("the worker survived");
    assert_eq!(dead.len(), 2, "{dead:?}");
    for d in &dead {
        assert!(
            d.letter.reason.contains("`Outgoing::delayed`"),
            "{}",
            d.letter.reason
        );
    }
    // The zero delay delivered once; the hour's delay still waits.
    assert_eq!(late.map(|t| t.sum), Some(1));
    assert_eq!(storage.counts(None).await.unwrap().pending(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_reactor_delays_are_checked() {
    reactor_delays_are_checked(common::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reactor_delays_are_checked() {
    let (storage, _dir) = common::sqlite().await;
    reactor_delays_are_checked(storage).await;
}

/// The builder's durations over extreme values: `build` succeeds or names the method, never
/// panics; the same for a failure policy's back-off.
#[test]
fn builder_durations_take_any_value() {
    let rt = runtime();
    let mut runner = TestRunner::new(Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    });
    let fields = (0usize..8, duration(), duration());
    runner
        .run(&fields, |(which, d, cap)| {
            let b = Shardbox::builder().memory().aggregate::<Tally>();
            let b = match which {
                0 => b.dedup_window(d),
                1 => b.lease_duration(d),
                2 => b.poll_interval(d),
                3 => b.catch_up_retention(d),
                4 => b.ttl_sweep_interval(d),
                5 => b.lease_linger(d),
                6 => b.handler_timeout(d),
                _ => b.failure_policy(FailurePolicy::new(
                    3,
                    Backoff::Exponential { base: d, cap },
                    ExhaustedOutcome::Drop,
                )),
            };
            match rt.block_on(b.build()) {
                Ok(_) | Err(DeliveryError::Config(_)) => Ok(()),
                Err(other) => Err(TestCaseError::fail(format!("{other:?}"))),
            }
        })
        .unwrap();
}

/// The storage options' waits: a huge busy or connection timeout is taken as a day, not a
/// panic (`Instant + Duration` overflowed in the WAL switch's deadline and in r2d2's checkout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_storage_timeouts_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let options = shardbox::SqliteOptions::default()
        .busy_timeout(Duration::MAX)
        .connection_timeout(Duration::MAX);
    let storage = shardbox::SqliteStorage::open_with(dir.path().join("db.sqlite"), options)
        .await
        .expect("opened");
    let storage: Arc<dyn Storage> = Arc::new(storage);
    assert_eq!(storage.last_event_seq().await.unwrap(), 0);
}

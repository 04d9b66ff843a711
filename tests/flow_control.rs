//! Flow control on running nodes, on memory, SQLite and PostgreSQL: a paused kind is not
//! delivered (across a node restart) while other kinds go on, and resumes in per-target
//! order; a concurrency limit is never exceeded and keeps order; a rate limit paces calls;
//! a policy and a pause set through one node are followed by another within a poll interval.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{KindLimits, KindSettings};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the handlers saw, per test (the tests of one binary run at once).
#[derive(Default)]
struct Seen {
    /// (kind, target, n) in call order.
    calls: Mutex<Vec<(&'static str, String, u32)>>,
    running: AtomicU32,
    peak: AtomicU32,
}

impl Seen {
    fn calls_of(&self, kind: &str) -> Vec<(String, u32)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, t, n)| (t.clone(), *n))
            .collect()
    }

    /// Asserts that every target's numbers came in ascending order.
    fn assert_in_order(&self, kind: &str) {
        let mut last: HashMap<String, u32> = HashMap::new();
        for (target, n) in self.calls_of(kind) {
            if let Some(before) = last.insert(target.clone(), n) {
                assert!(n > before, "{kind}/{target}: {n} after {before}");
            }
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum Work {
    /// Handled in about a millisecond.
    Do(u32),
    /// Fails.
    Fail,
}

impl Message for Work {
    const TYPE: &'static str = "flow-test.work";
}

#[derive(Debug, Serialize, Deserialize)]
struct Done(u32);

impl Message for Done {
    const TYPE: &'static str = "flow-test.done";
}

async fn work(kind: &'static str, c: &Work, cx: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
    let seen = cx.service::<Seen>().expect("seen");
    let n = match c {
        Work::Do(n) => *n,
        Work::Fail => return Err(HandlerError::new("it fails")),
    };
    let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
    seen.peak.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1)).await;
    seen.running.fetch_sub(1, Ordering::SeqCst);
    seen.calls
        .lock()
        .unwrap()
        .push((kind, cx.target_id.to_owned(), n));
    Ok(vec![Done(n)])
}

/// The kind paused, limited or steered.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Mailer;

impl Aggregate for Mailer {
    const KIND: &'static str = "flow-mailer";
    type Command = Work;
    type Event = Done;

    async fn handle(&self, c: &Work, cx: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
        work(Self::KIND, c, cx).await
    }

    fn apply(&mut self, _: &Done) {}
}

/// Another kind, which goes on.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Ledger;

impl Aggregate for Ledger {
    const KIND: &'static str = "flow-ledger";
    type Command = Work;
    type Event = Done;

    async fn handle(&self, c: &Work, cx: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
        work(Self::KIND, c, cx).await
    }

    fn apply(&mut self, _: &Done) {}
}

const POLL: Duration = Duration::from_millis(200);

async fn node(
    storage: Arc<dyn Storage>,
    seen: &Arc<Seen>,
    name: &str,
    limits: Option<KindLimits>,
) -> Shardbox {
    let mut builder = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .poll_interval(POLL)
        .node_id(shardbox::NodeId(name.into()))
        .service(seen.clone())
        .aggregate::<Mailer>()
        .aggregate::<Ledger>();
    if let Some(limits) = limits {
        builder = builder.kind_limits_of::<Mailer, _>(limits);
    }
    builder.build().await.expect("build")
}

async fn wait_until(what: &str, timeout: Duration, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok().await {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `Do(1..=per_target)` to each of `targets` targets of kind `E`, in rounds.
async fn send_rounds<E: Aggregate<Command = Work>>(
    sb: &Shardbox,
    prefix: &str,
    targets: u32,
    per_target: u32,
    from: u32,
) {
    for n in from..from + per_target {
        for t in 0..targets {
            sb.send::<E>(&format!("{prefix}-{t}"), &Work::Do(n))
                .await
                .expect("send");
        }
    }
}

/// The first node on `storage`, the restarted one on `reopened` (the same database opened
/// again, as a new process would).
async fn a_paused_kind_waits_across_a_restart_then_resumes_in_order(
    storage: Arc<dyn Storage>,
    reopened: Arc<dyn Storage>,
) {
    let seen = Arc::new(Seen::default());
    let sb = node(storage, &seen, "pause-1", None).await;
    let running = sb.start();
    assert!(
        sb.pause::<Mailer, _>().await.expect("pause"),
        "it was running"
    );
    send_rounds::<Mailer>(&sb, "m", 5, 4, 1).await;
    send_rounds::<Ledger>(&sb, "l", 5, 2, 1).await;
    wait_until(
        "the other kind delivered",
        Duration::from_secs(20),
        async || seen.calls_of(Ledger::KIND).len() == 10,
    )
    .await;
    tokio::time::sleep(POLL * 3).await;
    assert!(
        seen.calls_of(Mailer::KIND).is_empty(),
        "a paused kind is not delivered"
    );
    running.shutdown().await.expect("shutdown");
    drop(sb);

    // A new node over the same database: the pause is stored.
    let sb = node(reopened, &seen, "pause-2", None).await;
    let running = sb.start();
    send_rounds::<Mailer>(&sb, "m", 5, 1, 5).await;
    send_rounds::<Ledger>(&sb, "l", 5, 1, 3).await;
    wait_until(
        "the other kind delivered after the restart",
        Duration::from_secs(20),
        async || seen.calls_of(Ledger::KIND).len() == 15,
    )
    .await;
    tokio::time::sleep(POLL * 3).await;
    assert!(
        seen.calls_of(Mailer::KIND).is_empty(),
        "still paused after a restart: {:?}",
        seen.calls_of(Mailer::KIND)
    );
    let controls = sb.kind_controls().await.expect("controls");
    assert!(controls
        .iter()
        .any(|c| c.kind == Mailer::KIND && c.paused_since.is_some()));

    let resumed = sb.resume::<Mailer, _>().await.expect("resume");
    assert!(resumed.was_paused);
    assert!(resumed.released > 0, "{resumed:?}");
    wait_until(
        "the paused kind delivered after the resume",
        Duration::from_secs(20),
        async || seen.calls_of(Mailer::KIND).len() == 25,
    )
    .await;
    seen.assert_in_order(Mailer::KIND);
    seen.assert_in_order(Ledger::KIND);
    running.shutdown().await.expect("shutdown");
}

async fn a_concurrency_limit_is_never_exceeded_and_keeps_order(storage: Arc<dyn Storage>) {
    let seen = Arc::new(Seen::default());
    let limit = KindLimits {
        max_concurrent: Some(4),
        rate_per_second: None,
    };
    let sb = node(storage, &seen, "limit", Some(limit)).await;
    send_rounds::<Mailer>(&sb, "c", 40, 5, 1).await;
    let running = sb.start();
    wait_until(
        "every message delivered",
        Duration::from_secs(60),
        async || seen.calls_of(Mailer::KIND).len() == 200,
    )
    .await;
    running.shutdown().await.expect("shutdown");
    let peak = seen.peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "{peak} calls ran at once under a limit of 4");
    assert_eq!(
        peak, 4,
        "the limit was reached (the test would see a breach)"
    );
    seen.assert_in_order(Mailer::KIND);
}

async fn a_rate_limit_paces_calls(storage: Arc<dyn Storage>) {
    let seen = Arc::new(Seen::default());
    let limit = KindLimits {
        max_concurrent: None,
        rate_per_second: Some(100.0),
    };
    let sb = node(storage, &seen, "rate", Some(limit)).await;
    send_rounds::<Mailer>(&sb, "r", 50, 20, 1).await;
    let running = sb.start();
    wait_until("the first call", Duration::from_secs(20), async || {
        !seen.calls_of(Mailer::KIND).is_empty()
    })
    .await;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let delivered = seen.calls_of(Mailer::KIND).len();
    let elapsed = started.elapsed();
    running.shutdown().await.expect("shutdown");
    println!("rate limit 100/s: {delivered} calls in {elapsed:?} after the first");
    assert!(
        (450..=550).contains(&delivered),
        "{delivered} calls in 5 s under a limit of 100/s"
    );
    seen.assert_in_order(Mailer::KIND);
}

/// Nodes A and B on two storages over one database (separate connections).
async fn settings_and_pauses_set_on_one_node_are_followed_by_another(
    a_storage: Arc<dyn Storage>,
    b_storage: Arc<dyn Storage>,
) {
    let seen = Arc::new(Seen::default());
    // A only writes (it never starts); B delivers.
    let a = node(a_storage, &seen, "steer-a", None).await;
    let b = node(b_storage, &seen, "steer-b", None).await;
    let running = b.start();
    // B has served a stage (and read the controls) before the change.
    a.send::<Ledger>("steer-0", &Work::Do(0))
        .await
        .expect("send");
    wait_until("B serves", Duration::from_secs(5), async || {
        seen.calls_of(Ledger::KIND).len() == 1
    })
    .await;
    let give_up = FailurePolicy::new(
        1,
        Backoff::Fixed(Duration::from_secs(3600)),
        ExhaustedOutcome::DeadLetter,
    );
    a.set_kind_settings(
        Mailer::KIND,
        KindSettings {
            failure_policy: Some(give_up),
            ..KindSettings::default()
        },
    )
    .await
    .expect("set");
    // Within a poll interval (and a little for the read itself) B follows it.
    tokio::time::sleep(POLL + Duration::from_millis(100)).await;
    a.send::<Mailer>("steer-fail", &Work::Fail)
        .await
        .expect("send");
    // Under the build-time policy (5 attempts, back-off from 1 s) it would wait for a retry.
    wait_until(
        "dead-lettered at its first failure",
        Duration::from_secs(5),
        async || {
            b.dead_letters(DeadLetterFilter::all())
                .await
                .is_ok_and(|d| d.len() == 1)
        },
    )
    .await;

    a.pause_kind(Mailer::KIND).await.expect("pause");
    tokio::time::sleep(POLL + Duration::from_millis(100)).await;
    a.send::<Mailer>("steer-1", &Work::Do(1))
        .await
        .expect("send");
    a.send::<Ledger>("steer-1", &Work::Do(1))
        .await
        .expect("send");
    wait_until(
        "the other kind delivered",
        Duration::from_secs(5),
        async || seen.calls_of(Ledger::KIND).len() == 1,
    )
    .await;
    tokio::time::sleep(POLL * 2).await;
    assert!(
        seen.calls_of(Mailer::KIND).is_empty(),
        "paused through another node"
    );
    a.resume_kind(Mailer::KIND).await.expect("resume");
    wait_until(
        "delivered after the resume",
        Duration::from_secs(5),
        async || seen.calls_of(Mailer::KIND).len() == 1,
    )
    .await;
    running.shutdown().await.expect("shutdown");
}

common::on_every_backend!("flow_control";
    a_concurrency_limit_is_never_exceeded_and_keeps_order,
    a_rate_limit_paces_calls,
);

/// Runs `case` on two storages over one database of `backend` (`common::two_storages`).
macro_rules! on_two_storages {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                async fn on(backend: &str) {
                    let test = concat!("flow_control_", stringify!($case));
                    let Some((a, b, _guard)) = crate::common::two_storages(backend, test, 4).await
                    else {
                        return;
                    };
                    super::$case(a, b).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    on("memory").await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    on("sqlite").await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    on("postgres").await;
                }
            }
        )*
    };
}

on_two_storages!(
    a_paused_kind_waits_across_a_restart_then_resumes_in_order,
    settings_and_pauses_set_on_one_node_are_followed_by_another,
);

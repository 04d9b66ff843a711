//! Handlers that do real work: they `await`, reach the application's services through their
//! `Context`, get an idempotency key that survives redelivery, run concurrently within a
//! stage (per-target order kept), are timed out, and have their panics turned into failed
//! attempts — while the rest of the stage goes on.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Backoff, ExhaustedOutcome, FailurePolicy};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a `Worker` does with a `Job`.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Job {
    /// Await `ms` milliseconds (I/O standing in), then record `n`.
    Wait { n: u64, ms: u64 },
    /// Fail the first attempt, succeed the next; records the idempotency key of each.
    FailOnce,
    /// Sleep for an hour: only the timeout ends it.
    Hang,
    /// Panic with `message`.
    Panic { message: String },
}

impl Message for Job {
    const TYPE: &'static str = "handlers-test.job";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Done(u64);

impl Message for Done {
    const TYPE: &'static str = "handlers-test.done";
}

/// The application's service the handlers reach: what they saw, in the order they saw it.
#[derive(Default)]
struct Journal {
    /// (target, n) as each `Wait` finished.
    finished: Mutex<Vec<(String, u64)>>,
    /// Idempotency keys of the `FailOnce` attempts.
    keys: Mutex<Vec<String>>,
    /// Handler calls in flight now, and the most at once.
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Worker {
    done: Vec<u64>,
}

impl Aggregate for Worker {
    const KIND: &'static str = "worker";
    type Command = Job;
    type Event = Done;

    async fn handle(&self, job: &Job, cx: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
        let journal = cx.service::<Journal>()?;
        match job {
            Job::Wait { n, ms } => {
                let now = journal.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                journal.most_in_flight.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                journal.in_flight.fetch_sub(1, Ordering::SeqCst);
                journal
                    .finished
                    .lock()
                    .unwrap()
                    .push((cx.target_id.to_owned(), *n));
                Ok(vec![Done(*n)])
            }
            Job::FailOnce => {
                journal.keys.lock().unwrap().push(cx.idempotency_key());
                if cx.attempts == 0 {
                    Err(HandlerError::new("the gateway timed out"))
                } else {
                    Ok(vec![Done(0)])
                }
            }
            Job::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(vec![])
            }
            Job::Panic { message } => panic!("{message}"),
        }
    }

    fn apply(&mut self, e: &Done) {
        self.done.push(e.0);
    }
}

/// One shard, so that every target is in the same page.
async fn shardbox(
    storage: Arc<dyn Storage>,
    journal: &Arc<Journal>,
    concurrency: usize,
    policy: FailurePolicy,
) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(1)
        .handler_concurrency(concurrency)
        .failure_policy(policy)
        .kind_handler_timeout(Worker::KIND, Duration::from_millis(300))
        .service(journal.clone())
        .aggregate::<Worker>()
        .build()
        .await
        .expect("build")
}

fn one_attempt() -> FailurePolicy {
    FailurePolicy::new(
        1,
        Backoff::Fixed(Duration::from_millis(10)),
        ExhaustedOutcome::DeadLetter,
    )
}

async fn state(sb: &Shardbox, id: &str) -> Vec<u64> {
    sb.aggregate_state::<Worker>(id)
        .await
        .expect("state")
        .map(|w| w.done)
        .unwrap_or_default()
}

/// 8 targets × 3 jobs of 150 ms: with concurrency 8 the page takes about 3 handler times
/// (each target's jobs one after another), not 24; with concurrency 1 it takes 24.
async fn concurrent_targets_keep_their_order(
    storage: Arc<dyn Storage>,
    concurrency: usize,
) -> Duration {
    let journal = Arc::new(Journal::default());
    let sb = shardbox(storage, &journal, concurrency, one_attempt()).await;
    for n in 0..3 {
        for t in 0..8 {
            sb.send::<Worker>(&format!("t-{t}"), &Job::Wait { n, ms: 150 })
                .await
                .expect("send");
        }
    }
    let started = Instant::now();
    let report = sb.deliver_all().await.expect("deliver");
    let took = started.elapsed();
    assert_eq!(report.totals.delivered, 24, "{report:?}");
    assert_eq!(report.stages, 1, "one page, one commit: {report:?}");
    let finished = journal.finished.lock().unwrap().clone();
    for t in 0..8 {
        let id = format!("t-{t}");
        let order: Vec<u64> = finished
            .iter()
            .filter(|(x, _)| *x == id)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(order, vec![0, 1, 2], "target {id} handled in seq order");
        assert_eq!(state(&sb, &id).await, vec![0, 1, 2]);
    }
    assert!(
        journal.most_in_flight.load(Ordering::SeqCst) <= concurrency,
        "never more than handler_concurrency at once"
    );
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_the_targets_of_a_page_are_handled_at_once_in_order() {
    let took = concurrent_targets_keep_their_order(common::memory(), 8).await;
    assert!(
        took < Duration::from_millis(1_500),
        "took {took:?} (sequential: 3.6 s)"
    );
    let took = concurrent_targets_keep_their_order(common::memory(), 1).await;
    assert!(
        took >= Duration::from_millis(3_600),
        "concurrency 1 is sequential: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_targets_of_a_page_are_handled_at_once_in_order() {
    let (storage, _dir) = common::sqlite().await;
    let took = concurrent_targets_keep_their_order(storage, 8).await;
    assert!(
        took < Duration::from_millis(1_500),
        "took {took:?} (sequential: 3.6 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_key_is_the_same_on_every_redelivery() {
    let journal = Arc::new(Journal::default());
    let policy = FailurePolicy::new(
        3,
        Backoff::Fixed(Duration::from_millis(10)),
        ExhaustedOutcome::DeadLetter,
    );
    let sb = shardbox(common::memory(), &journal, 4, policy).await;
    sb.send::<Worker>("pay-1", &Job::FailOnce)
        .await
        .expect("send");
    sb.send::<Worker>("pay-2", &Job::FailOnce)
        .await
        .expect("send");
    let first = sb.deliver_all().await.expect("deliver");
    assert_eq!(first.totals.retried, 2, "{first:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = sb.deliver_all().await.expect("deliver");
    assert_eq!(second.totals.delivered, 2, "{second:?}");
    let keys = journal.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 4, "{keys:?}");
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert_eq!(
        distinct.len(),
        2,
        "one key per message, the same on its redelivery: {keys:?}"
    );
}

#[tokio::test]
async fn a_handler_without_its_service_fails_with_a_clear_reason() {
    let sb = Shardbox::builder()
        .memory()
        .shards(1)
        .failure_policy(one_attempt())
        .aggregate::<Worker>()
        .build()
        .await
        .expect("build");
    sb.send::<Worker>("w", &Job::Wait { n: 1, ms: 0 })
        .await
        .expect("send");
    sb.deliver_all().await.expect("deliver");
    let dead = sb
        .dead_letters(DeadLetterFilter::all())
        .await
        .expect("dead letters");
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].letter.reason.contains("no service of type")
            && dead[0].letter.reason.contains("Journal"),
        "{}",
        dead[0].letter.reason
    );
}

/// A hung handler and a panicking one fail their messages (the policy dead-letters them),
/// with reasons that say why; the other targets of the stage are delivered, and the worker
/// goes on serving the shard.
async fn hung_and_panicking_handlers_fail_only_their_messages(storage: Arc<dyn Storage>) {
    let journal = Arc::new(Journal::default());
    let sb = shardbox(storage, &journal, 4, one_attempt()).await;
    sb.send::<Worker>("hung", &Job::Hang).await.expect("send");
    sb.send::<Worker>(
        "boom",
        &Job::Panic {
            message: "kaboom: index out of range".into(),
        },
    )
    .await
    .expect("send");
    sb.send::<Worker>("fine", &Job::Wait { n: 1, ms: 0 })
        .await
        .expect("send");
    sb.send::<Worker>("boom", &Job::Wait { n: 2, ms: 0 })
        .await
        .expect("send");

    let started = Instant::now();
    let report = sb
        .deliver_all()
        .await
        .expect("a handler's panic is not the worker's");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the timeout ended the hang"
    );
    assert_eq!(report.totals.dead_lettered, 2, "{report:?}");
    assert_eq!(state(&sb, "fine").await, vec![1]);
    // The message behind the panicking one goes on once the failed one left the way.
    sb.deliver_all().await.expect("deliver");
    assert_eq!(state(&sb, "boom").await, vec![2]);

    let mut reasons: Vec<(String, String)> = sb
        .dead_letters(DeadLetterFilter::all())
        .await
        .expect("dead letters")
        .into_iter()
        .map(|d| (d.letter.original.message.target_id, d.letter.reason))
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        vec![
            (
                "boom".to_owned(),
                "handler of `worker` panicked: kaboom: index out of range".to_owned()
            ),
            (
                "hung".to_owned(),
                "handler of `worker` exceeded handler_timeout of 300ms".to_owned()
            ),
        ]
    );
    // The worker survived: the shard is served as before.
    sb.send::<Worker>("fine", &Job::Wait { n: 3, ms: 0 })
        .await
        .expect("send");
    let after = sb.deliver_all().await.expect("deliver");
    assert_eq!(after.totals.delivered, 1, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hung_and_panicking_handlers_fail_only_their_messages() {
    hung_and_panicking_handlers_fail_only_their_messages(common::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_hung_and_panicking_handlers_fail_only_their_messages() {
    let (storage, _dir) = common::sqlite().await;
    hung_and_panicking_handlers_fail_only_their_messages(storage).await;
}

#[tokio::test]
async fn a_panic_on_a_running_node_leaves_its_workers_serving() {
    let journal = Arc::new(Journal::default());
    let sb = shardbox(common::memory(), &journal, 4, one_attempt()).await;
    let node = sb.start();
    sb.send::<Worker>(
        "boom",
        &Job::Panic {
            message: "bad input".into(),
        },
    )
    .await
    .expect("send");
    node.drain(Duration::from_secs(5)).await.expect("drain");
    for n in 0..3 {
        sb.send::<Worker>("fine", &Job::Wait { n, ms: 0 })
            .await
            .expect("send");
    }
    node.drain(Duration::from_secs(5)).await.expect("drain");
    assert_eq!(state(&sb, "fine").await, vec![0, 1, 2]);
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .expect("count"),
        1
    );
    node.shutdown()
        .await
        .expect("a clean shutdown: no worker died");
}

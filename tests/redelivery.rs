//! Immediate redelivery (`HandlerError::redeliver`): a handler that asks for it is tried
//! again at once — no back-off, no clock moving — each try counted as an attempt, in its
//! place (its target's later message waits behind it), until it succeeds or the policy's
//! attempts are used up. On memory, SQLite and PostgreSQL.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::ManualClock;
use std::sync::Mutex;
use std::time::Duration;

/// Handler calls, in order: (target, command).
static CALLS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

#[derive(Debug, Serialize, Deserialize)]
enum Step {
    /// Fails with a redelivery this many times, then succeeds.
    Flaky(u32),
    /// Always asks for a redelivery.
    Never,
    /// Succeeds.
    Plain,
}

impl Message for Step {
    const TYPE: &'static str = "redelivery-test.step";
}

#[derive(Debug, Serialize, Deserialize)]
struct Done(String);

impl Message for Done {
    const TYPE: &'static str = "redelivery-test.done";
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Racer {
    done: Vec<String>,
}

impl Aggregate for Racer {
    const KIND: &'static str = "racer";
    type Command = Step;
    type Event = Done;

    async fn handle(&self, c: &Step, cx: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
        let id = cx.target_id.to_owned();
        let tries = {
            let mut calls = CALLS.lock().unwrap();
            calls.push((id.clone(), format!("{c:?}")));
            calls
                .iter()
                .filter(|(t, s)| *t == id && *s == format!("{c:?}"))
                .count() as u32
        };
        match c {
            Step::Flaky(n) if tries <= *n => Err(HandlerError::redeliver("version moved")),
            Step::Never => Err(HandlerError::redeliver("always racing")),
            _ => Ok(vec![Done(format!("{c:?}"))]),
        }
    }

    fn apply(&mut self, e: &Done) {
        self.done.push(e.0.clone());
    }
}

fn calls_of(id: &str) -> Vec<String> {
    let calls = CALLS.lock().unwrap();
    calls
        .iter()
        .filter(|(t, _)| t == id)
        .map(|(_, s)| s.clone())
        .collect()
}

async fn redelivered_at_once_until_done_or_exhausted(storage: std::sync::Arc<dyn Storage>) {
    let clock = std::sync::Arc::new(ManualClock::new(chrono::Utc::now()));
    // A back-off of an hour: only a redelivery can try again while the clock stands still.
    let policy = FailurePolicy::new(
        4,
        Backoff::Fixed(Duration::from_secs(3600)),
        ExhaustedOutcome::DeadLetter,
    );
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .clock(clock)
        .shards(2)
        .kind_policy(Racer::KIND, policy)
        .aggregate::<Racer>()
        .build()
        .await
        .expect("build");
    let prefix = format!("{:?}", std::thread::current().id());
    let (flaky, never) = (format!("{prefix}-flaky"), format!("{prefix}-never"));
    sb.send::<Racer>(&flaky, &Step::Flaky(2)).await.unwrap();
    sb.send::<Racer>(&flaky, &Step::Plain).await.unwrap();
    sb.send::<Racer>(&never, &Step::Never).await.unwrap();
    for _ in 0..10 {
        sb.deliver_all().await.expect("deliver");
    }

    // Two redeliveries, then handled; the later message waited behind it, in order.
    assert_eq!(
        calls_of(&flaky),
        ["Flaky(2)", "Flaky(2)", "Flaky(2)", "Plain"],
        "tried at once, in its place"
    );
    let state = sb.aggregate_state::<Racer>(&flaky).await.unwrap().unwrap();
    assert_eq!(state.done, ["Flaky(2)", "Plain"]);
    // Always redelivered: four attempts (the policy's), then the exhausted outcome.
    assert_eq!(calls_of(&never), vec!["Never"; 4]);
    let dead = sb.dead_letters(DeadLetterFilter::all()).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].letter.attempts, 4);
    assert_eq!(dead[0].letter.reason, "always racing");
    let metrics = sb.metrics();
    assert_eq!(metrics.retries, 2 + 3, "each redelivery counted as a retry");
}

common::on_every_backend!("redelivery"; redelivered_at_once_until_done_or_exhausted);

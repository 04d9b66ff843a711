//! A node keeps serving its shards through a PostgreSQL outage of repeatedly terminated
//! connections: a stage or release that fails leaves its shard servable at once (the lease is
//! released again, the shard retried), instead of leased to the node until the lease runs
//! out. Nothing is lost or applied twice, and per-target order holds.
//!
//! Needs `SHARDBOX_PG_URL`; the test names its connections with an `application_name` of its
//! own and terminates only those backends.

mod common;

use diesel::{Connection, PgConnection};
use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::storage::PostgresStorage;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When each `(target, n)` was first handled, by this process's handlers.
static HANDLED: Mutex<Option<HashMap<(String, u64), Instant>>> = Mutex::new(None);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stamped {
    applied: Vec<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Stamp(u64);
impl Message for Stamp {
    const TYPE: &'static str = "stamped.command";
}

#[derive(Debug, Serialize, Deserialize)]
struct StampedEvent(u64);
impl Message for StampedEvent {
    const TYPE: &'static str = "stamped.event";
}

impl Aggregate for Stamped {
    const KIND: &'static str = "stamped";
    type Command = Stamp;
    type Event = StampedEvent;

    async fn handle(&self, c: &Stamp, cx: &Context<'_>) -> Result<Vec<StampedEvent>, HandlerError> {
        let mut handled = HANDLED.lock().unwrap();
        handled
            .get_or_insert_with(HashMap::new)
            .entry((cx.target_id.to_owned(), c.0))
            .or_insert_with(Instant::now);
        Ok(vec![StampedEvent(c.0)])
    }

    fn apply(&mut self, e: &StampedEvent) {
        self.applied.push(e.0);
    }
}

/// Terminates every backend named `application_name`; how many.
fn terminate(admin: &mut PgConnection, application_name: &str) -> usize {
    shardbox_storage::test_schema::terminate_backends(admin, application_name).unwrap_or(0)
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

const TARGETS: u64 = 8;

/// A knob of the run: the environment variable `name` in whole numbers, else `default`. The
/// defaults keep CI's run short; the figure is taken with
/// `SHARDBOX_OUTAGE_SECS=40 SHARDBOX_OUTAGE_AFTER_SECS=60 SHARDBOX_OUTAGE_KILL_MS=500
/// SHARDBOX_OUTAGE_TARGETS=20` (1,000 msgs/s, backends terminated twice a second for 40 s).
fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_stages_leave_their_shards_servable_through_an_outage() {
    let Some(url) = common::pg_url("failed_stages_leave_their_shards_servable_through_an_outage")
    else {
        return;
    };
    let schema = common::PgSchema::new(&url, "outage_leases");
    let sep = if schema.url.contains('?') { '&' } else { '?' };
    let tagged = format!("{}{sep}application_name={}", schema.url, schema.name);
    let storage = PostgresStorage::connect_with(tagged, schema.options(4))
        .await
        .expect("connect");
    let sb = Shardbox::builder()
        .storage(storage)
        .shards(4)
        .workers(2)
        .lease_duration(Duration::from_secs(6))
        .poll_interval(Duration::from_millis(500))
        .aggregate::<Stamped>()
        .build()
        .await
        .expect("build");
    let node = sb.start();

    // Senders: one task per target, a command every 20 ms (400 msgs/s in all), for the outage
    // and six seconds after it.
    let outage = Duration::from_secs(knob("SHARDBOX_OUTAGE_SECS", 4));
    let after = Duration::from_secs(knob("SHARDBOX_OUTAGE_AFTER_SECS", 6));
    let kill_every = Duration::from_millis(knob("SHARDBOX_OUTAGE_KILL_MS", 250));
    let targets = knob("SHARDBOX_OUTAGE_TARGETS", TARGETS);
    let started = Instant::now();
    let outage_end = started + Duration::from_secs(1) + outage;
    let mut senders = Vec::new();
    for t in 0..targets {
        let sb = sb.clone();
        senders.push(tokio::spawn(async move {
            let target = format!("t-{t}");
            let mut sent: Vec<(u64, Instant, bool)> = Vec::new();
            let mut n = 0u64;
            while started.elapsed() < Duration::from_secs(1) + outage + after {
                n += 1;
                let at = Instant::now();
                let ok = sb.send::<Stamped>(&target, &Stamp(n)).await.is_ok();
                sent.push((n, at, ok));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (target, sent)
        }));
    }

    // The outage: the node's backends terminated every `kill_every` for `outage`.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let name = schema.name.clone();
    let admin_url = url.clone();
    let killer = tokio::task::spawn_blocking(move || {
        let mut admin = PgConnection::establish(&admin_url).expect("admin");
        let mut killed = 0;
        while Instant::now() < outage_end {
            killed += terminate(&mut admin, &name);
            std::thread::sleep(kill_every);
        }
        killed
    });
    let killed = killer.await.expect("killer");
    assert!(killed > 0, "the outage terminated backends");

    let mut sent_by_target = Vec::new();
    for s in senders {
        sent_by_target.push(s.await.expect("sender"));
    }
    assert!(
        node.drain(Duration::from_secs(30)).await.expect("drain"),
        "every message delivered after the outage"
    );
    node.shutdown().await.expect("shutdown");

    let handled = HANDLED.lock().unwrap().take().unwrap_or_default();
    let mut latencies = Vec::new();
    for (target, sent) in &sent_by_target {
        let state: Stamped = sb
            .aggregate_state::<Stamped>(target)
            .await
            .expect("state")
            .unwrap_or_default();
        // Per-target order and exactly once: strictly increasing, no repeat.
        assert!(
            state.applied.windows(2).all(|w| w[0] < w[1]),
            "{target}: applied in send order, each once: {:?}",
            state.applied
        );
        for (n, at, ok) in sent {
            let applied = state.applied.contains(n);
            if *ok {
                assert!(applied, "{target}: #{n} was accepted, so it is applied");
            }
            // Claim latency of the messages sent after the outage.
            if *ok && *at > outage_end {
                let handled_at = handled[&(target.clone(), *n)];
                latencies.push(handled_at.saturating_duration_since(*at));
            }
        }
    }
    assert!(!latencies.is_empty(), "messages sent after the outage");
    let p99 = p99(latencies);
    let accepted: usize = sent_by_target
        .iter()
        .map(|(_, sent)| sent.iter().filter(|(_, _, ok)| *ok).count())
        .sum();
    let refused: usize = sent_by_target
        .iter()
        .map(|(_, sent)| sent.iter().filter(|(_, _, ok)| !*ok).count())
        .sum();
    println!(
        "outage {outage:?} (backends terminated every {kill_every:?}), {targets} targets: \
         {accepted} sends accepted and applied once in order, {refused} refused; claim latency \
         p99 after the outage: {p99:?} ({killed} backends terminated)"
    );
    assert!(
        p99 < Duration::from_secs(1),
        "claim latency p99 after the outage is {p99:?}: a shard stayed leased after a failure"
    );
}

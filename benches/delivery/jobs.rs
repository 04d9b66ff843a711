//! The `jobs` workload: handlers that do real work. N commands over T targets (T = N: one job
//! per target), each handler awaiting `--work-ms` of simulated I/O (a tokio sleep), sent by
//! producers while the node delivers, at a total handler concurrency of
//! `--handler-concurrency`: the node's `max_in_flight_handlers`, shared by its `--workers`
//! (default 4), each of which may use all of it (`handler_concurrency` = the total). With
//! `SHARDBOX_BENCH_TIMELINE` the trace points of the run are written as for `latency` (the
//! messages of one `send_many` share their key, their `received_at`).
//!
//! With `--paced` the producers offer `--rate` msgs/s instead, for the claim latency below
//! saturation (`offered_per_s` in the report; 0 when saturated).
//!
//! Reports msgs/s, the claim latency (send → handler start) p50/p99, and
//! `ideal_ratio = msgs_per_s / min(concurrency × 1000 / work_ms, live rate)`, where the live
//! rate is a `live` run (the no-work counter) of the same N and T on the same backend, just
//! before: the best the delivery could do with handlers that cost nothing.

use crate::args::Args;
use crate::backend::Db;
use crate::report::Report;
use crate::workloads::live_run;
use chrono::Utc;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use shardbox::core::sync::lock;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::NodeId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Send → handler-start latencies (µs) of the jobs.
static CLAIMS: Mutex<Option<Histogram<u64>>> = Mutex::new(None);
/// The work of one job, µs.
static WORK_US: AtomicU64 = AtomicU64::new(1_000);

/// A job target: counts the jobs it ran.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Job {
    pub done: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Run;

impl Message for Run {
    const TYPE: &'static str = "bench.job.run";
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Ran;

impl Message for Ran {
    const TYPE: &'static str = "bench.job.ran";
}

impl Aggregate for Job {
    const KIND: &'static str = "job";
    type Command = Run;
    type Event = Ran;

    async fn handle(&self, _: &Run, cx: &Context<'_>) -> Result<Vec<Ran>, HandlerError> {
        let claimed = (Utc::now() - cx.received_at)
            .num_microseconds()
            .unwrap_or(0)
            .max(0);
        if let Some(h) = lock(&CLAIMS).as_mut() {
            let _ = h.record(claimed as u64);
        }
        crate::timeline::mark("handler", cx.received_at.timestamp_micros());
        tokio::time::sleep(Duration::from_micros(WORK_US.load(Ordering::Relaxed))).await;
        Ok(vec![Ran])
    }

    fn apply(&mut self, _: &Ran) {
        self.done += 1;
    }
}

fn target(i: usize, targets: usize) -> String {
    format!("j-{}", i % targets)
}

/// Producers: 4 tasks, round-robin over the targets, `batch` commands per write; with a
/// `rate`, together at most `rate` msgs/s (each write at its time on a schedule that starts
/// at once; a late write goes at once and the schedule does not move).
async fn produce(
    sb: &Shardbox,
    n: usize,
    targets: usize,
    batch: usize,
    rate: Option<u64>,
) -> Result<(), String> {
    let mut tasks = Vec::new();
    let start = tokio::time::Instant::now();
    for t in 0..4 {
        let sb = sb.clone();
        tasks.push(tokio::spawn(async move {
            let mut next = t;
            while next < n {
                if let Some(rate) = rate {
                    // Message `next` is due at next / rate seconds after the start.
                    let due = Duration::from_secs_f64(next as f64 / rate.max(1) as f64);
                    tokio::time::sleep_until(start + due).await;
                }
                let ids: Vec<String> = (next..n)
                    .step_by(4)
                    .take(batch)
                    .map(|i| target(i, targets))
                    .collect();
                next += 4 * ids.len();
                let commands: Vec<(&str, Run)> = ids.iter().map(|id| (id.as_str(), Run)).collect();
                sb.send_many::<Job>(&commands)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// One jobs run on `storage`: msgs/s from the first send to the last commit, and the claim
/// latencies.
async fn jobs_run(
    storage: Arc<dyn Storage>,
    a: &Args,
) -> Result<(f64, Histogram<u64>, u64, u64), String> {
    let workers = a.workers.min(a.handler_concurrency);
    let mut builder = Shardbox::builder();
    if let Some(limit) = a.kind_limit {
        builder = builder.kind_limits(
            Job::KIND,
            shardbox::KindLimits {
                max_concurrent: Some(limit),
                rate_per_second: None,
            },
        );
    }
    let sb = builder
        .shared_storage(storage)
        .node_id(NodeId("bench-jobs".into()))
        .shards(a.shards)
        .page_size(a.page_size)
        .workers(workers)
        // The total is the node-wide cap; each worker may use all of it, so the slots of a
        // worker that is committing or reading its next page serve the others' pages.
        .handler_concurrency(a.handler_concurrency)
        .max_in_flight_handlers(a.handler_concurrency)
        .poll_interval(Duration::from_millis(200))
        .aggregate::<Job>()
        .build()
        .await
        .map_err(|e| e.to_string())?;
    *lock(&CLAIMS) =
        Some(Histogram::new_with_bounds(1, 600_000_000, 3).map_err(|e| e.to_string())?);
    let node = sb.start();
    let started = Instant::now();
    crate::timeline::start();
    produce(&sb, a.n, a.targets, a.batch, a.paced.then_some(a.rate)).await?;
    let deadline = Instant::now() + Duration::from_secs(3600);
    while sb.metrics().delivered < a.n as u64 {
        if Instant::now() > deadline {
            return Err("jobs not delivered within an hour".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    crate::timeline::finish()?;
    let rate = a.n as f64 / started.elapsed().as_secs_f64();
    node.shutdown().await.map_err(|e| e.to_string())?;
    let claims = lock(&CLAIMS).take().ok_or("no claim histogram")?;
    let (mut lost, mut duplicates) = (0u64, 0u64);
    for t in 0..a.targets.min(a.n) {
        let expected = (a.n / a.targets + usize::from(t < a.n % a.targets)) as u64;
        let got = sb
            .aggregate_state::<Job>(&target(t, a.targets))
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |j| j.done);
        lost += expected.saturating_sub(got);
        duplicates += got.saturating_sub(expected);
    }
    Ok((rate, claims, lost, duplicates))
}

pub async fn jobs(a: &Args) -> Result<Report, String> {
    WORK_US.store((a.work_ms * 1000.0) as u64, Ordering::Relaxed);
    let live_db = Db::new(a.backend)?;
    let live = live_run(live_db.storage(16).await?, a).await?.rate;
    drop(live_db);
    eprintln!("live rate of the same N and T: {live:.0} msgs/s; running jobs…");
    let db = Db::new(a.backend)?;
    let (rate, claims, lost, duplicates) = jobs_run(db.storage(16).await?, a).await?;
    let concurrency = a.handler_concurrency as f64;
    let by_work = if a.work_ms > 0.0 {
        concurrency * 1000.0 / a.work_ms
    } else {
        f64::INFINITY
    };
    let ideal = by_work.min(live);
    Ok(Report {
        workload: a.workload.name(),
        backend: db.backend.name(),
        n: a.n,
        msgs_per_s: rate,
        floor_per_s: ideal,
        p50_ms: claims.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: claims.value_at_quantile(0.99) as f64 / 1000.0,
        max_ms: claims.max() as f64 / 1000.0,
        duplicates,
        lost,
        extra: vec![
            ("ideal_ratio", rate / ideal),
            ("concurrency", concurrency),
            ("work_ms", a.work_ms),
            ("targets", a.targets as f64),
            ("live_per_s", live),
            ("by_work_per_s", by_work),
            ("offered_per_s", if a.paced { a.rate as f64 } else { 0.0 }),
        ],
        node_shares: Vec::new(),
    })
}

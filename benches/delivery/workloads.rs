//! The workloads: live, latency, scale, catch-up (cluster: see `cluster`; jobs: see `jobs`;
//! reshard: see `reshard`). Their nodes and traffic are `traffic`'s.

use crate::args::{Args, Backend};
use crate::backend::Db;
use crate::floor;
use crate::model::{Booked, Bump, Counter, Ledger, LATENCY};
use crate::report::Report;
use crate::statements;
use crate::timeline;
use crate::traffic::{check, send_all, shardbox, target};
use hdrhistogram::Histogram;
use shardbox::core::storage::{CatchUpStatus, WriteBatch};
use shardbox::core::sync::lock;
use shardbox::core::Storage;
use shardbox::core::{InboxWrite, MessageKind, NewMessage};
use shardbox::prelude::*;
use shardbox::CatchUp;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits until `count` messages were delivered over `nodes`, at most `limit`.
async fn until_delivered(nodes: &[Shardbox], count: u64, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        let delivered: u64 = nodes.iter().map(|s| s.metrics().delivered).sum();
        if delivered >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {delivered} of {count} delivered in {limit:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What one live run measured.
pub(crate) struct LiveRun {
    /// Messages per second, first send to last commit.
    pub(crate) rate: f64,
    lost: u64,
    duplicates: u64,
    /// Messages delivered per committed stage (how full the pages were).
    per_stage: f64,
    /// Lease pick-ups per 1,000 messages.
    pick_ups_per_1k: f64,
}

/// One live run on `storage`: msgs/s from the first send to the last commit.
pub(crate) async fn live_run(storage: Arc<dyn Storage>, a: &Args) -> Result<LiveRun, String> {
    let sb = shardbox(storage, a, "bench-0").await?;
    let node = sb.start();
    let started = Instant::now();
    send_all(&sb, a.n, a.targets, a.batch).await?;
    until_delivered(
        std::slice::from_ref(&sb),
        a.n as u64,
        Duration::from_secs(3600),
    )
    .await?;
    let rate = a.n as f64 / started.elapsed().as_secs_f64();
    node.shutdown().await.map_err(|e| e.to_string())?;
    let m = sb.metrics();
    let (lost, duplicates) = check(&sb, a.n, a.targets).await?;
    Ok(LiveRun {
        rate,
        lost,
        duplicates,
        per_stage: m.delivered as f64 / m.stages.max(1) as f64,
        pick_ups_per_1k: m.lease_pick_ups as f64 * 1000.0 / m.delivered.max(1) as f64,
    })
}

fn report(a: &Args, db: &Db) -> Report {
    Report {
        workload: a.workload.name(),
        backend: db.backend.name(),
        n: a.n,
        ..Report::default()
    }
}

pub async fn live(a: &Args) -> Result<Report, String> {
    let db = Db::new(a.backend)?;
    let storage = db.storage(8).await?;
    let (floor, floors) = floor::median(&db, a.n, a.shards, a.targets, a.page_size)?;
    let shown: Vec<String> = floors.iter().map(|f| format!("{f:.0}")).collect();
    eprintln!(
        "floor: {floor:.0} msgs/s (median of {}); running live…",
        shown.join(", ")
    );
    let run = live_run(storage, a).await?;
    let mut r = report(a, &db);
    r.msgs_per_s = run.rate;
    r.floor_per_s = floor;
    r.lost = run.lost;
    r.duplicates = run.duplicates;
    r.extra.push(("msgs_per_stage", run.per_stage));
    r.extra.push(("pick_ups_per_1k", run.pick_ups_per_1k));
    r.extra.push((
        "floor_min",
        floors.iter().copied().fold(f64::INFINITY, f64::min),
    ));
    r.extra
        .push(("floor_max", floors.iter().copied().fold(0.0, f64::max)));
    Ok(r)
}

pub async fn latency(a: &Args) -> Result<Report, String> {
    let db = Db::new(a.backend)?;
    let nodes = if a.backend == Backend::Postgres { 2 } else { 1 };
    let mut boxes = Vec::new();
    let mut handles = Vec::new();
    for i in 0..nodes {
        let sb = shardbox(db.storage(4).await?, a, &format!("bench-{i}")).await?;
        handles.push(sb.start());
        boxes.push(sb);
    }
    // Warm-up: the same rate, measured apart. The first sends after the nodes start meet
    // connections that prepare their statements and shards still moving to the second node.
    let warm = (a.rate * a.warmup) as usize;
    let warmup = offer(&boxes, 0, warm, a.rate, a.targets).await?.1;
    let total = (a.rate * a.secs) as usize;
    let statements_before = statements::count();
    timeline::start();
    let started = Instant::now();
    let (offered, h) = offer(&boxes, warm, total, a.rate, a.targets).await?;
    timeline::finish()?;
    let h = h.ok_or("--rate × --secs sends nothing to measure")?;
    let elapsed = started.elapsed().as_secs_f64();
    let statements = statements::count() - statements_before;
    statements::breakdown(total);
    for node in handles {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    let (lost, duplicates) = check(&boxes[0], warm + total, a.targets).await?;
    let mut r = report(a, &db);
    r.n = total;
    r.msgs_per_s = total as f64 / elapsed;
    r.p50_ms = h.value_at_quantile(0.5) as f64 / 1000.0;
    r.p99_ms = h.value_at_quantile(0.99) as f64 / 1000.0;
    r.max_ms = h.max() as f64 / 1000.0;
    r.lost = lost;
    r.duplicates = duplicates;
    r.extra.push(("nodes", nodes as f64));
    r.extra.push(("offered_per_s", offered));
    r.extra.push(("warmup_s", a.warmup as f64));
    if let Some(w) = warmup {
        r.extra
            .push(("warmup_p99_ms", w.value_at_quantile(0.99) as f64 / 1000.0));
        r.extra.push(("warmup_max_ms", w.max() as f64 / 1000.0));
    }
    r.extra.push((
        "statements_per_msg",
        statements as f64 / total.max(1) as f64,
    ));
    Ok(r)
}

/// Sends `count` bumps at `rate` per second (the `from`-th send on) through the first
/// node and waits until all `from + count` sent so far were delivered: the offered rate and
/// the send → handler-start latencies (`None` for no sends).
async fn offer(
    boxes: &[Shardbox],
    from: usize,
    count: usize,
    rate: u64,
    targets: usize,
) -> Result<(f64, Option<Histogram<u64>>), String> {
    if count == 0 {
        return Ok((0.0, None));
    }
    *lock(&LATENCY) =
        Some(Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?);
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    // Open loop: each send is its own task, issued on its tick whether or not the earlier
    // ones have committed, so a slow commit delays its own message, not the offered rate
    // (a sender awaiting each send in turn would fall behind and hide the queueing).
    let mut sends = tokio::task::JoinSet::new();
    for i in from..from + count {
        tick.tick().await;
        // The sender is always the first node; with two nodes, half the shards are served by
        // the other one and woken through the database's notifications.
        let sender = boxes[0].clone();
        let id = target(i, targets);
        sends.spawn(async move { sender.send::<Counter>(&id, &Bump).await.map(|_| ()) });
        while let Some(sent) = sends.try_join_next() {
            sent.map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        }
    }
    let offered = count as f64 / started.elapsed().as_secs_f64();
    while let Some(sent) = sends.join_next().await {
        sent.map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    until_delivered(boxes, (from + count) as u64, Duration::from_secs(120)).await?;
    let h = lock(&LATENCY).take().ok_or("latency histogram missing")?;
    Ok((offered, Some(h)))
}

/// Writes `count` rows that are pending but due tomorrow, spread over every shard.
async fn prefill(storage: &Arc<dyn Storage>, count: usize, shards: u32) -> Result<(), String> {
    let due = chrono::Utc::now() + chrono::Duration::days(1);
    let mut written = 0;
    while written < count {
        let batch: Vec<InboxWrite> = (written..(written + 10_000).min(count))
            .map(|i| InboxWrite {
                shard: shardbox::ShardIndex((i as u64 % u64::from(shards)) as u32),
                message: NewMessage {
                    signal_id: format!("later-{i}").into(),
                    kind: MessageKind::Command,
                    target_kind: Counter::KIND.into(),
                    target_id: format!("later-{i}"),
                    tenant: String::new(),
                    payload: b"null".to_vec(),
                    payload_type: <Bump as Message>::TYPE.into(),
                    payload_version: 1,
                    metadata: Default::default(),
                    received_at: chrono::Utc::now(),
                    deliver_after: Some(due),
                    expires_at: None,
                },
            })
            .collect();
        written += batch.len();
        storage
            .write(WriteBatch {
                events: vec![],
                messages: batch,
            })
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub async fn scale(a: &Args) -> Result<Report, String> {
    let mut rates = Vec::new();
    let mut r = None;
    for pending in [10_000usize, 1_000_000] {
        let db = Db::new(a.backend)?;
        let storage = db.storage(8).await?;
        eprintln!("prefilling {pending} pending rows due later…");
        prefill(&storage, pending, a.shards).await?;
        let run = live_run(storage, a).await?;
        eprintln!("{pending} pending: {:.0} msgs/s", run.rate);
        rates.push(run.rate);
        let rep = r.get_or_insert_with(|| report(a, &db));
        rep.lost += run.lost;
        rep.duplicates += run.duplicates;
        rep.msgs_per_s = run.rate;
    }
    let mut r = r.ok_or("no run")?;
    r.extra.push(("rate_10k_pending", rates[0]));
    r.extra.push(("rate_1m_pending", rates[1]));
    r.extra.push(("scale_ratio", rates[1] / rates[0]));
    Ok(r)
}

pub async fn catch_up(a: &Args) -> Result<Report, String> {
    let db = Db::new(a.backend)?;
    let storage = db.storage(8).await?;
    let run = catch_up_on(storage, a).await?;
    let mut r = report(a, &db);
    r.msgs_per_s = run.events_per_s;
    r.lost = run.lost;
    r.duplicates = run.duplicates;
    r.extra.push(("replayed", run.replayed as f64));
    Ok(r)
}

/// What one catch-up of `--n` events did.
pub struct CatchUpRun {
    /// Events replayed per second, from the start of the job to its completion.
    pub events_per_s: f64,
    /// The job's count of replayed events.
    pub replayed: i64,
    /// Events the ledgers miss, and events they hold twice.
    pub lost: u64,
    pub duplicates: u64,
}

/// `--n` events of history written straight to `storage`'s event store (5,000 per write),
/// then a catch-up of every ledger, timed, and the ledgers audited.
pub async fn catch_up_on(storage: Arc<dyn Storage>, a: &Args) -> Result<CatchUpRun, String> {
    let now = chrono::Utc::now();
    let mut written = 0;
    while written < a.n {
        let events = (written..(written + 5_000).min(a.n))
            .map(|i| shardbox::core::NewEvent {
                id: format!("h-{i}").into(),
                event_type: <Booked as Message>::TYPE.into(),
                source: EventSource::external(target(i, a.targets)),
                tenant: String::new(),
                occurred_at: now,
                payload: serde_json::to_vec(&Booked { amount: 1 }).unwrap_or_default(),
                version: 1,
                metadata: Default::default(),
            })
            .collect::<Vec<_>>();
        written += events.len();
        storage
            .write(WriteBatch {
                events,
                messages: vec![],
            })
            .await
            .map_err(|e| e.to_string())?;
    }
    let sb = shardbox(storage, a, "bench-0").await?;
    let node = sb.start();
    let started = Instant::now();
    let job = sb
        .catch_up::<Ledger>(CatchUp::all())
        .await
        .map_err(|e| e.to_string())?;
    let done = job
        .wait(Duration::from_secs(3600))
        .await
        .map_err(|e| e.to_string())?;
    let elapsed = started.elapsed().as_secs_f64();
    node.shutdown().await.map_err(|e| e.to_string())?;
    if done.status != CatchUpStatus::Completed {
        return Err(format!("catch-up did not complete: {done:?}"));
    }
    let mut events = 0u64;
    for t in 0..a.targets.min(a.n) {
        events += sb
            .projection_state::<Ledger>(&target(t, a.targets))
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |l| l.events);
    }
    Ok(CatchUpRun {
        events_per_s: a.n as f64 / elapsed,
        replayed: done.replayed,
        lost: (a.n as u64).saturating_sub(events),
        duplicates: events.saturating_sub(a.n as u64),
    })
}

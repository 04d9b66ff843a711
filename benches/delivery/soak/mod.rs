//! The `soak` workload: steady mixed traffic for `--minutes` (default 30), to show that
//! nothing grows — memory, connections, tables, dead tuples — and that nothing is lost or
//! applied twice across restarts and a re-sharding.
//!
//! ```text
//!  producer (mix) ──► Inbox ──► K nodes (fleet) ──► tally states, events ──► view
//!      │ counts per target                  │ restart at 25 %, 60 %, 85 % of the run
//!      │                                    │ re-sharding to twice the shards at 45 %
//!      │ catch-ups of ten view ids every tenth of the run; dead letters purged per sample
//!      ▼
//!  every --sample-secs: one row (rates, latency, RSS, fds, connections, table sizes, rows,
//!  dead tuples); at the end: the audit, each quantity's slope per hour after the warm-up
//!  (the first 20 % of the run, at most 5 minutes), dead tuples per delivered row.
//! ```
//!
//! PostgreSQL only: `--vacuum-secs` (see `upkeep`) and `--hold-xmin-minutes` (see `xmin`).

mod fleet;
mod mix;
mod model;
mod probe;
mod series;
mod upkeep;
mod xmin;

use crate::args::{Args, Backend};
use crate::backend::Db;
use crate::report::Report;
use fleet::{Fleet, Source};
use mix::Sent;
use model::{Tally, View, LATENCY};
use probe::Probe;
use series::Row;
use shardbox::core::sync::lock;
use shardbox::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `url` with `application_name` set, so that the run's connections can be counted.
fn with_application(url: &str, application: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={application}")
}

/// The background parts of a run, stopped together at its end.
struct Background {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    vacuums: Arc<upkeep::Vacuums>,
    held: Arc<Mutex<xmin::Held>>,
}

fn background(a: &Args, db: &Db, started: Instant) -> Result<Background, String> {
    let mut b = Background {
        stop: Arc::new(AtomicBool::new(false)),
        threads: Vec::new(),
        vacuums: Arc::default(),
        held: Arc::default(),
    };
    let Some((url, schema)) = db.pg() else {
        if a.hold_xmin_minutes > 0.0 || a.vacuum_secs.is_some_and(|v| v > 0) {
            return Err("--hold-xmin-minutes and --vacuum-secs are for PostgreSQL".into());
        }
        return Ok(b);
    };
    let autovacuum = upkeep::autovacuum_on(url)?;
    let every = a.vacuum_secs.unwrap_or(if autovacuum { 0 } else { 60 });
    eprintln!(
        "soak: server autovacuum {}; the workload's own VACUUM (ANALYZE) {}",
        if autovacuum { "on" } else { "off" },
        if every == 0 {
            "off".to_owned()
        } else {
            format!("every {every} s")
        }
    );
    if every > 0 {
        b.threads.push(upkeep::start(
            url.clone(),
            schema.clone(),
            Duration::from_secs(every),
            b.vacuums.clone(),
            b.stop.clone(),
        ));
    }
    if a.hold_xmin_minutes > 0.0 {
        b.threads.push(xmin::start(
            with_application(url, "sbx_soak_hold_xmin"),
            started,
            Duration::from_secs_f64(a.hold_xmin_after * 60.0),
            Duration::from_secs_f64(a.hold_xmin_minutes * 60.0),
            b.held.clone(),
            b.stop.clone(),
        ));
    }
    Ok(b)
}

/// A catch-up of ten view ids (the `k`-th ten), awaited: whether it completed.
async fn catch_up(sb: Shardbox, k: usize, targets: usize) -> Result<bool, String> {
    let ids: Vec<String> = (0..10)
        .map(|j| mix::target((k * 10 + j) % targets))
        .collect();
    let job = sb
        .catch_up::<View>(CatchUp::ids(ids))
        .await
        .map_err(|e| e.to_string())?;
    let done = job
        .wait(Duration::from_secs(600))
        .await
        .map_err(|e| e.to_string())?;
    Ok(done.status == shardbox::core::storage::CatchUpStatus::Completed)
}

pub async fn soak(a: &Args) -> Result<Report, String> {
    if a.backend == Backend::Memory {
        return Err("the soak measures a database: --backend sqlite or postgres".into());
    }
    let db = Db::new(a.backend)?;
    let application = format!("sbx_soak_{}", std::process::id());
    let (probe, node_url) = match db.pg() {
        Some((url, schema)) => (
            Probe::postgres(url, schema, &application)?,
            Some(with_application(url, &application)),
        ),
        None => (Probe::sqlite(db.sqlite_path())?, None),
    };
    let source = Source::new(&db, node_url).await?;
    let producer = fleet::shardbox(source.storage().await?, a, a.shards, "soak-producer").await?;
    let mut fleet = Fleet::start(source, a, a.shards).await?;
    let run = Duration::from_secs_f64(a.minutes * 60.0);
    let every = Duration::from_secs(a.sample_secs);
    let warm_s = (run.as_secs_f64() * 0.2).min(300.0);
    eprintln!(
        "soak: {} on {}, {} msgs/s offered over {} targets, {} nodes, {} shards, sample every {} s, warm-up {:.0} s",
        humanize(run),
        db.backend.name(),
        a.rate,
        a.targets,
        a.nodes,
        a.shards,
        a.sample_secs,
        warm_s
    );
    *lock(&LATENCY) = Some(model::histogram());
    let started = Instant::now();
    let bg = background(a, &db, started)?;
    let sent = Arc::new(Mutex::new(Sent::new(a.targets)));
    let producing = Arc::new(AtomicBool::new(false));
    let mix_task = tokio::spawn(mix::produce(
        producer.clone(),
        a.rate,
        a.targets,
        sent.clone(),
        producing.clone(),
    ));

    let shards = Arc::new(AtomicU32::new(a.shards));
    let (mut reshard, mut resharded) = (None, 0u64);
    let mut catching_up: Option<tokio::task::JoinHandle<Result<bool, String>>> = None;
    let (mut catch_ups, mut catch_up_failures, mut catch_up_k) = (0u64, 0u64, 0usize);
    let (mut purged, mut restart_k) = (0u64, 0usize);
    let mut total = model::histogram();
    let mut rows: Vec<Row> = Vec::new();
    let (mut last_t, mut last_sent, mut last_delivered) = (0.0, 0u64, 0u64);
    println!("{}", Row::header());
    let mut next = started + every;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let t = started.elapsed().as_secs_f64();
        let frac = t / run.as_secs_f64();
        let mut note = Vec::new();
        // Node restarts at a quarter, 60 % and 85 % of the run.
        if restart_k < 3 && frac >= [0.25, 0.60, 0.85][restart_k] {
            let shards_now = shards.load(Ordering::SeqCst);
            match fleet
                .restart(restart_k, Duration::from_secs(2), shards_now)
                .await
            {
                Ok(()) => note.push(format!("restart node {}", restart_k % a.nodes)),
                Err(e) => note.push(format!("restart failed: {e}")),
            }
            restart_k += 1;
        }
        // One re-sharding to twice the shards at 45 %, in a task of its own.
        if reshard.is_none() && frac >= 0.45 {
            let (sb, shards, to) = (producer.clone(), shards.clone(), a.shards * 2);
            reshard = Some(tokio::spawn(async move {
                let r = sb.reshard(to).await.map_err(|e| e.to_string())?;
                shards.store(to, Ordering::SeqCst);
                Ok::<_, String>(r)
            }));
            note.push(format!("reshard {} -> {} started", a.shards, a.shards * 2));
        }
        if let Some(task) = reshard
            .as_mut()
            .filter(|t| t.is_finished() && resharded == 0)
        {
            match task.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(r) => note.push(format!(
                    "resharded: {} rows moved, switch {:.0} ms",
                    r.moves.inbox_moved,
                    r.switched_in.as_secs_f64() * 1e3
                )),
                Err(e) => note.push(format!("reshard failed: {e}")),
            }
            resharded = 1;
        }
        // A catch-up of ten view ids every tenth of the run, one at a time.
        if catching_up.as_ref().is_some_and(|c| c.is_finished()) {
            if let Some(c) = catching_up.take() {
                match c.await.map_err(|e| e.to_string()).and_then(|r| r) {
                    Ok(true) => catch_ups += 1,
                    Ok(false) => catch_up_failures += 1,
                    Err(e) => {
                        catch_up_failures += 1;
                        note.push(format!("catch-up failed: {e}"));
                    }
                }
            }
        }
        if catching_up.is_none() && frac >= 0.1 * (catch_up_k + 1) as f64 && frac < 0.95 {
            catching_up = Some(tokio::spawn(catch_up(
                producer.clone(),
                catch_up_k,
                a.targets,
            )));
            note.push(format!("catch-up {}", catch_up_k + 1));
            catch_up_k += 1;
        }
        let held = *lock(&bg.held);
        if held.from_s.is_some_and(|f| f <= t) && held.until_s.is_none_or(|u| u > last_t) {
            note.push("xmin held".into());
        }
        // The sample.
        let h = lock(&LATENCY).replace(model::histogram());
        let (p50, p99) = match &h {
            Some(h) if !h.is_empty() => {
                let _ = total.add(h);
                (
                    h.value_at_quantile(0.5) as f64 / 1e3,
                    h.value_at_quantile(0.99) as f64 / 1e3,
                )
            }
            _ => (0.0, 0.0),
        };
        let (rss_mib, fds) = probe::process();
        let sent_now = lock(&sent).messages;
        let delivered = fleet.totals().delivered;
        let dt = (t - last_t).max(1e-9);
        let row = Row {
            t_s: t,
            sent_per_s: (sent_now - last_sent) as f64 / dt,
            delivered_per_s: (delivered - last_delivered) as f64 / dt,
            p50_ms: p50,
            p99_ms: p99,
            rss_mib,
            fds,
            db: probe.sample().await?,
            vacuum_ms: bg.vacuums.longest_ms.swap(0, Ordering::Relaxed),
            note: note.join("; "),
        };
        println!("{}", row.line());
        rows.push(row);
        (last_t, last_sent, last_delivered) = (t, sent_now, delivered);
        // The operator's routine: dead letters are looked at and purged.
        let mut only_ours = DeadLetterFilter::all();
        only_ours.target_kind = Some(Tally::KIND.to_owned());
        purged += producer
            .purge_dead_letters(only_ours)
            .await
            .map_err(|e| e.to_string())?;
        if started.elapsed() >= run {
            break;
        }
        next += every;
    }
    producing.store(true, Ordering::SeqCst);
    mix_task.await.map_err(|e| e.to_string())?;
    eprintln!("soak: producer stopped; draining…");
    if let Some(c) = catching_up.take() {
        match c.await.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(true) => catch_ups += 1,
            _ => catch_up_failures += 1,
        }
    }
    if let Some(task) = reshard.filter(|_| resharded == 0) {
        task.await.map_err(|e| e.to_string())??;
    }
    let final_db = settle(&fleet, &probe).await?;
    fleet.shutdown().await?;
    bg.stop.store(true, Ordering::SeqCst);
    for t in bg.threads {
        let _ = t.join();
    }
    let audit = audit(&producer, a.targets, &sent).await?;
    let totals = fleet.totals();
    // What was sent, read out of the lock (no guard is held across the awaits below).
    let (messages, refused, expiring, send_errors) = {
        let s = lock(&sent);
        (s.messages, s.refused, s.expiring, s.errors)
    };
    let dead_letters = purged
        + producer
            .count_dead_letters(DeadLetterFilter::all())
            .await
            .map_err(|e| e.to_string())?;
    let mut r = Report {
        workload: a.workload.name(),
        backend: db.backend.name(),
        n: messages as usize,
        msgs_per_s: totals.delivered as f64 / started.elapsed().as_secs_f64(),
        p50_ms: total.value_at_quantile(0.5) as f64 / 1e3,
        p99_ms: total.value_at_quantile(0.99) as f64 / 1e3,
        max_ms: total.max() as f64 / 1e3,
        lost: audit.lost + refused.saturating_sub(dead_letters),
        duplicates: audit.doubled + dead_letters.saturating_sub(refused),
        ..Report::default()
    };
    let e = &mut r.extra;
    e.push(("minutes", a.minutes));
    e.push(("samples", rows.len() as f64));
    e.push(("warmup_s", warm_s));
    e.push(("delivered", totals.delivered as f64));
    for (key, slope, mean_key, mean) in series::slopes(&rows, warm_s) {
        e.push((key, slope));
        e.push((mean_key, mean));
    }
    let churn = |i: usize| final_db.churn[i] as f64 / totals.delivered.max(1) as f64;
    e.push(("inbox_dead_tuples_per_delivered", churn(0)));
    e.push((
        "all_dead_tuples_per_delivered",
        (0..5).map(churn).sum::<f64>(),
    ));
    e.push((
        "inbox_hot_share_of_dead_versions",
        final_db.hot_updates[0] as f64 / final_db.churn[0].max(1) as f64,
    ));
    let after_warm = rows.iter().filter(|r| r.t_s >= warm_s);
    e.push((
        "inbox_dead_tuples_peak",
        after_warm
            .map(|r| r.db.dead_tuples[0] as f64)
            .fold(0.0, f64::max),
    ));
    e.push(("dead_letters", dead_letters as f64));
    e.push(("dead_letters_expected", refused as f64));
    e.push(("expired", totals.expired as f64));
    e.push(("expiring_sent", expiring as f64));
    e.push(("late_applied", audit.late as f64));
    e.push(("retries", totals.retries as f64));
    e.push(("send_errors", send_errors as f64));
    e.push(("restarts", fleet.restarts as f64));
    e.push(("reshards", resharded as f64));
    e.push(("catch_ups", catch_ups as f64));
    e.push(("catch_up_failures", catch_up_failures as f64));
    e.push(("lease_takeovers", totals.lease_takeovers as f64));
    e.push(("worker_restarts", totals.worker_restarts as f64));
    e.push((
        "vacuum_passes",
        bg.vacuums.passes.load(Ordering::Relaxed) as f64,
    ));
    let held = *lock(&bg.held);
    if let (Some(from), Some(until)) = (held.from_s, held.until_s) {
        // The phase before the hold starts after half of what precedes it at most, so that
        // a hold taken right after the warm-up still has a "before".
        let h = series::around_hold(&rows, warm_s.min(from / 2.0), from, until);
        e.push(("hold_from_s", from));
        e.push(("hold_until_s", until));
        for (i, phase) in ["before", "during", "after"].iter().enumerate() {
            eprintln!(
                "held xmin, {phase}: {:.0} rows/s, p99 {:.1} ms",
                h.rate[i], h.p99_ms[i]
            );
        }
        e.push(("hold_rate_before", h.rate[0]));
        e.push(("hold_rate_during", h.rate[1]));
        e.push(("hold_rate_after", h.rate[2]));
        e.push(("hold_p99_ms_before", h.p99_ms[0]));
        e.push(("hold_p99_ms_during", h.p99_ms[1]));
        e.push(("hold_p99_ms_after", h.p99_ms[2]));
        e.push(("hold_inbox_mib_at_start", h.inbox_mib[0]));
        e.push(("hold_inbox_mib_at_end", h.inbox_mib[1]));
        e.push(("hold_inbox_mib_run_end", h.inbox_mib[2]));
        e.push(("hold_inbox_dead_before_max", h.inbox_dead[0]));
        e.push(("hold_inbox_dead_at_end", h.inbox_dead[1]));
        e.push(("hold_inbox_dead_run_end", h.inbox_dead[2]));
        e.push(("hold_dead_recovered_s", h.dead_recovered_s));
        e.push(("hold_p99_recovered_s", h.p99_recovered_s));
    }
    Ok(r)
}

fn humanize(d: Duration) -> String {
    format!("{:.1} min", d.as_secs_f64() / 60.0)
}

/// Waits until every message sent was settled (delays, retries and TTLs have run out, the
/// Inbox holds no row that is not delivered), at most three minutes; the last sample.
async fn settle(fleet: &Fleet, probe: &Probe) -> Result<probe::DbSample, String> {
    // The longest delay is 5 s, a retry's back-off 1 s, the TTL sweep runs every 5 s.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        fleet.drain(Duration::from_secs(60)).await?;
        let s = probe.sample().await?;
        if s.pending == 0 {
            return Ok(s);
        }
        if Instant::now() > deadline {
            eprintln!("soak: {} rows still pending after the drain", s.pending);
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What the audit found: messages missing from a target's state, applied twice, applied
/// although they should have expired.
struct Audit {
    lost: u64,
    doubled: u64,
    late: u64,
}

/// Every tally's and every view's counts against what the producer sent to it.
async fn audit(sb: &Shardbox, targets: usize, sent: &Mutex<Sent>) -> Result<Audit, String> {
    let mut a = Audit {
        lost: 0,
        doubled: 0,
        late: 0,
    };
    let (tally, view) = {
        let s = lock(sent);
        (s.tally.clone(), s.view.clone())
    };
    for t in 0..targets {
        let id = mix::target(t);
        let got = sb
            .aggregate_state::<Tally>(&id)
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        let seen = sb
            .projection_state::<View>(&id)
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        for (expected, got) in [(tally[t], got.applied), (view[t], seen.events)] {
            a.lost += expected.saturating_sub(got);
            a.doubled += got.saturating_sub(expected);
        }
        a.late += got.late + seen.late;
    }
    if a.lost + a.doubled > 0 {
        eprintln!("soak: audit: {} lost, {} applied twice", a.lost, a.doubled);
    }
    Ok(a)
}

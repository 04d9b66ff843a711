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

mod audit;
mod background;
mod events;
mod fleet;
mod mix;
mod model;
mod probe;
mod samples;
mod series;
mod summary;
mod upkeep;
mod xmin;

use crate::args::{Args, Backend};
use crate::backend::Db;
use crate::report::Report;
use audit::{audit, settle};
use background::background;
use events::Events;
use fleet::{Fleet, Source};
use mix::Sent;
use model::{Tally, LATENCY};
use probe::Probe;
use samples::Samples;
use series::Row;
use shardbox::core::sync::lock;
use shardbox::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use summary::{Outcome, SentCounts};

/// `url` with `application_name` set, so that the run's connections can be counted.
fn with_application(url: &str, application: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={application}")
}

pub async fn soak(a: &Args) -> Result<Report, String> {
    if a.backend == Backend::Memory {
        return Err("the soak measures a database: --backend sqlite or postgres".into());
    }
    let db = Db::new(a.backend)?;
    let (probe, producer, mut fleet) = start(a, &db).await?;
    let run = Duration::from_secs_f64(a.minutes * 60.0);
    let warm_s = (run.as_secs_f64() * 0.2).min(300.0);
    eprintln!(
        "soak: {} on {}, {} msgs/s offered over {} targets, {} nodes, {} shards, sample every {} s, warm-up {:.0} s, MALLOC_ARENA_MAX={}",
        humanize(run),
        db.backend.name(),
        a.rate,
        a.targets,
        a.nodes,
        a.shards,
        a.sample_secs,
        warm_s,
        // glibc's arenas decide much of the RSS (docs/operations.md, "Soak: what stays flat").
        std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "unset".into())
    );
    *lock(&LATENCY) = Some(model::histogram());
    let started = Instant::now();
    let mut bg = background(a, &db, started)?;
    let sent = Arc::new(Mutex::new(Sent::new(a.targets)));
    let producing = Arc::new(AtomicBool::new(false));
    let mix_task = tokio::spawn(mix::produce(
        producer.clone(),
        a.rate,
        a.targets,
        sent.clone(),
        producing.clone(),
    ));
    let mut events = Events::new(a.shards);
    let mut samples = Samples::new();
    let mut purged = 0u64;
    println!("{}", Row::header());
    let mut next = started + Duration::from_secs(a.sample_secs);
    loop {
        tokio::time::sleep_until(next.into()).await;
        let t = started.elapsed().as_secs_f64();
        let mut note = Vec::new();
        events
            .at(t / run.as_secs_f64(), a, &producer, &mut fleet, &mut note)
            .await;
        let held = *lock(&bg.held);
        if held.from_s.is_some_and(|f| f <= t) && held.until_s.is_none_or(|u| u > samples.last_t())
        {
            note.push("xmin held".into());
        }
        samples
            .take(t, note.join("; "), &sent, &fleet, &probe, &bg)
            .await?;
        purged += purge_dead_letters(&producer).await?;
        if started.elapsed() >= run {
            break;
        }
        next += Duration::from_secs(a.sample_secs);
    }
    producing.store(true, Ordering::SeqCst);
    mix_task.await.map_err(|e| e.to_string())?;
    eprintln!("soak: producer stopped; draining…");
    events.finish().await?;
    let final_db = settle(&fleet, &probe).await?;
    fleet.shutdown().await?;
    bg.stop.store(true, Ordering::SeqCst);
    for t in std::mem::take(&mut bg.threads) {
        let _ = t.join();
    }
    let audit = audit(&producer, a.targets, &sent).await?;
    let sent = sent_counts(&sent);
    let dead_letters = purged
        + producer
            .count_dead_letters(DeadLetterFilter::all())
            .await
            .map_err(|e| e.to_string())?;
    let outcome = Outcome {
        a,
        backend: db.backend.name(),
        elapsed_s: started.elapsed().as_secs_f64(),
        warm_s,
        samples: &samples,
        final_db: &final_db,
        totals: fleet.totals(),
        audit,
        sent,
        dead_letters,
        events: &events,
        restarts: fleet.restarts,
        bg: &bg,
    };
    Ok(outcome.report())
}

/// The database's probe, the producer's node (it sends, and does the operator's calls) and the
/// fleet of `a.nodes` serving nodes, started on `db`.
async fn start(a: &Args, db: &Db) -> Result<(Probe, Shardbox, Fleet), String> {
    let application = format!("sbx_soak_{}", std::process::id());
    let (probe, node_url) = match db.pg() {
        Some((url, schema)) => (
            Probe::postgres(url, schema, &application)?,
            Some(with_application(url, &application)),
        ),
        None => (Probe::sqlite(db.sqlite_path())?, None),
    };
    let source = Source::new(db, node_url).await?;
    let producer = fleet::shardbox(source.storage().await?, a, a.shards, "soak-producer").await?;
    let fleet = Fleet::start(source, a, a.shards).await?;
    Ok((probe, producer, fleet))
}

/// What was sent, read out of the lock (no guard is held across the awaits after it).
fn sent_counts(sent: &Mutex<Sent>) -> SentCounts {
    let s = lock(sent);
    SentCounts {
        messages: s.messages,
        refused: s.refused,
        expiring: s.expiring,
        errors: s.errors,
    }
}

/// The operator's routine, once a sample: the tallies' dead letters are looked at and purged.
async fn purge_dead_letters(producer: &Shardbox) -> Result<u64, String> {
    let mut only_ours = DeadLetterFilter::all();
    only_ours.target_kind = Some(Tally::KIND.to_owned());
    producer
        .purge_dead_letters(only_ours)
        .await
        .map_err(|e| e.to_string())
}

fn humanize(d: Duration) -> String {
    format!("{:.1} min", d.as_secs_f64() / 60.0)
}

//! `shardbox catch-up list|progress [--follow]`.
//!
//! Starting a catch-up needs the projection's code (its kind, event types and handler),
//! which only the application has: it calls `Shardbox::catch_up`. The library has no
//! cancel yet, so neither has the CLI.

use crate::cli::CatchUpCommand;
use crate::error::CliError;
use crate::output::print_json;
use crate::table::Table;
use crate::when::human;
use chrono::Utc;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use shardbox_core::storage::CatchUpStatus;
use shardbox_core::{CatchUpProgress, Storage};
use std::time::Duration;

/// How often `--follow` reads the job.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

fn view(p: &CatchUpProgress, kind: &str) -> Value {
    json!({
        "id": p.id,
        "projection_kind": kind,
        "status": p.status.as_str(),
        "replayed": p.replayed,
        "total_estimate": p.total_estimate,
        "rate": p.rate,
        "eta_s": p.eta.map(|d| d.as_secs_f64()),
    })
}

/// Runs one `catch-up` subcommand.
pub async fn run(
    storage: &dyn Storage,
    command: CatchUpCommand,
    json: bool,
) -> Result<(), CliError> {
    match command {
        CatchUpCommand::List => list(storage, json).await,
        CatchUpCommand::Progress { id, follow } => progress(storage, id, follow, json).await,
    }
}

/// `catch-up list`.
async fn list(storage: &dyn Storage, json: bool) -> Result<(), CliError> {
    let now = Utc::now();
    let jobs = storage.running_catch_ups().await?;
    if json {
        let rows: Vec<Value> = jobs
            .iter()
            .map(|j| view(&CatchUpProgress::of(j, now), &j.spec.projection_kind))
            .collect();
        return print_json(&json!({ "running": rows }));
    }
    if jobs.is_empty() {
        println!("no running catch-ups");
        return Ok(());
    }
    let mut t = Table::new([
        "id",
        "projection",
        "status",
        "replayed",
        "of ~",
        "rate/s",
        "ETA",
    ]);
    for j in &jobs {
        let p = CatchUpProgress::of(j, now);
        t.row(vec![
            j.id.to_string(),
            j.spec.projection_kind.clone(),
            p.status.as_str().into(),
            p.replayed.to_string(),
            p.total_estimate.to_string(),
            format!("{:.0}", p.rate),
            eta(&p),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

fn eta(p: &CatchUpProgress) -> String {
    p.eta
        .and_then(|d| chrono::TimeDelta::from_std(d).ok())
        .map_or("-".into(), human)
}

/// Reads job `id` now, or says it is not there.
async fn progress_of(
    storage: &dyn Storage,
    id: i64,
) -> Result<(CatchUpProgress, String), CliError> {
    let job = storage.catch_up(id).await?.ok_or_else(|| {
        CliError::NotFound(format!(
            "no catch-up job {id} (completed jobs are purged after catch_up_retention)"
        ))
    })?;
    Ok((
        CatchUpProgress::of(&job, Utc::now()),
        job.spec.projection_kind,
    ))
}

/// `catch-up progress ID [--follow]`.
async fn progress(
    storage: &dyn Storage,
    id: i64,
    follow: bool,
    json: bool,
) -> Result<(), CliError> {
    let (mut p, kind) = progress_of(storage, id).await?;
    if follow && !json {
        let bar = ProgressBar::new(p.total_estimate.max(p.replayed).max(0).unsigned_abs());
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} events  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("catch-up {id} of {kind}"));
        loop {
            // Events appended since the start are replayed too: the total may grow.
            bar.set_length(p.total_estimate.max(p.replayed).max(0).unsigned_abs());
            bar.set_position(p.replayed.max(0).unsigned_abs());
            bar.set_message(format!(
                "{} {:.0}/s ETA {}",
                p.status.as_str(),
                p.rate,
                eta(&p)
            ));
            if p.status == CatchUpStatus::Completed {
                break;
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            p = progress_of(storage, id).await?.0;
        }
        bar.finish();
        return Ok(());
    }
    if follow {
        // JSON lines, one per read, the last one completed.
        loop {
            println!("{}", view(&p, &kind));
            if p.status == CatchUpStatus::Completed {
                return Ok(());
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            p = progress_of(storage, id).await?.0;
        }
    }
    if json {
        return print_json(&view(&p, &kind));
    }
    println!(
        "catch-up {id} of {kind}: {} — {} of ~{} replayed, {:.0}/s, ETA {}",
        p.status.as_str(),
        p.replayed,
        p.total_estimate,
        p.rate,
        eta(&p)
    );
    Ok(())
}

//! `shardbox catch-up list|progress [--follow]`: the shared catch-up views
//! (`shardbox_admin::views::catch_ups`) as tables, JSON or a live progress bar.
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
use shardbox_admin::views::catch_ups::{self, CatchUpView};
use shardbox_core::Storage;
use std::time::Duration;

/// How often `--follow` reads the job.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

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
    let list = catch_ups::running(storage, Utc::now()).await?;
    if json {
        return print_json(&list);
    }
    if list.running.is_empty() {
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
    for p in &list.running {
        t.row(vec![
            p.id.to_string(),
            p.projection_kind.clone(),
            p.status.into(),
            p.replayed.to_string(),
            p.total_estimate.to_string(),
            format!("{:.0}", p.rate),
            eta(p),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

fn eta(p: &CatchUpView) -> String {
    p.eta_s
        .and_then(|s| chrono::TimeDelta::from_std(Duration::from_secs_f64(s)).ok())
        .map_or("-".into(), human)
}

/// `catch-up progress ID [--follow]`.
async fn progress(
    storage: &dyn Storage,
    id: i64,
    follow: bool,
    json: bool,
) -> Result<(), CliError> {
    let read = || catch_ups::progress(storage, id, Utc::now());
    let mut p = read().await?;
    if follow && !json {
        let bar = ProgressBar::new(p.total_estimate.max(p.replayed).max(0).unsigned_abs());
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} events  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("catch-up {id} of {}", p.projection_kind));
        loop {
            // Events appended since the start are replayed too: the total may grow.
            bar.set_length(p.total_estimate.max(p.replayed).max(0).unsigned_abs());
            bar.set_position(p.replayed.max(0).unsigned_abs());
            bar.set_message(format!("{} {:.0}/s ETA {}", p.status, p.rate, eta(&p)));
            if p.completed() {
                break;
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            p = read().await?;
        }
        bar.finish();
        return Ok(());
    }
    if follow {
        // JSON lines, one per read, the last one completed.
        loop {
            println!("{}", serde_json::to_string(&p)?);
            if p.completed() {
                return Ok(());
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            p = read().await?;
        }
    }
    if json {
        return print_json(&p);
    }
    println!(
        "catch-up {id} of {}: {} — {} of ~{} replayed, {:.0}/s, ETA {}",
        p.projection_kind,
        p.status,
        p.replayed,
        p.total_estimate,
        p.rate,
        eta(&p)
    );
    Ok(())
}

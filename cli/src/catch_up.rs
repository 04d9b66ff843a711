//! `shardbox catch-up start|list|progress [--follow]|cancel [--wait]`: the shared catch-up
//! views and actions (`shardbox_admin::views::catch_ups`) as tables, JSON, a live progress
//! bar on a terminal, or a line per change when the output is a pipe or a file.
//!
//! `start` and `cancel` are the library's own operator actions; the replay and the cancel
//! are carried out by the application's nodes (the CLI runs no delivery). A start places
//! its shards by the strategy the database records, and is refused for an application's own
//! strategy; what else a start without the application cannot know (event types, which
//! kinds are projections) is said at `views::catch_ups`.

use crate::cli::{CatchUpCommand, Guard};
use crate::confirm::confirm;
use crate::error::CliError;
use crate::output::{out, outln, print_json};
use crate::table::Table;
use crate::when::human;
use chrono::Utc;
use indicatif::{ProgressBar, ProgressStyle};
use shardbox_admin::views::catch_ups::{self, CatchUpView, StartRequest};
use shardbox_core::CatchUpStore;
use std::io::IsTerminal;
use std::time::Duration;

/// How often `--follow` reads the job.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Runs one `catch-up` subcommand.
pub async fn run<S>(storage: &S, command: CatchUpCommand, json: bool) -> Result<(), CliError>
where
    S: shardbox_core::Storage + ?Sized,
{
    match command {
        CatchUpCommand::List => list(storage, json).await,
        CatchUpCommand::Progress { id, follow } => progress(storage, id, follow, json).await,
        CatchUpCommand::Start {
            projection,
            ids,
            tenant,
            since,
            force,
            guard,
        } => {
            let now = Utc::now();
            let request = StartRequest {
                projection_kind: projection,
                tenant,
                ids: (!ids.is_empty()).then_some(ids),
                since: since.map(|s| s.at(now)),
                force,
                dry_run: guard.dry_run,
            };
            if !start_guarded(storage, &request, guard, json).await? {
                return Ok(());
            }
            let job = catch_ups::start(storage, &request, None, now).await?;
            if json {
                return print_json(&job);
            }
            outln!(
                "started catch-up {} of {}: the application's nodes replay it (watch it with `shardbox catch-up progress {} --follow`)",
                job.id, job.projection_kind, job.id
            )?;
            Ok(())
        }
        CatchUpCommand::Cancel { id, wait } => cancel(storage, id, wait, json).await,
    }
}

/// Says what starting `request` touches and whether to go on: a dry run prints it and stops
/// (false); a kind no live node serves as a projection is refused unless forced, before
/// anyone is asked; otherwise the operator confirms (see [`confirm`]).
async fn start_guarded<S>(
    storage: &S,
    request: &StartRequest,
    guard: Guard,
    json: bool,
) -> Result<bool, CliError>
where
    S: shardbox_core::Storage + ?Sized,
{
    let preview = catch_ups::preview(storage, request, None, Utc::now()).await?;
    let shards: Vec<String> = preview.shards.iter().map(u32::to_string).collect();
    let targets = match &preview.ids {
        None => "every instance".to_owned(),
        Some(ids) => format!(
            "{} instance{} ({})",
            ids.len(),
            if ids.len() == 1 { "" } else { "s" },
            ids.join(", ")
        ),
    };
    let what = format!(
        "delete the states of {targets} of `{}` now and rebuild them from the event store (their new messages wait meanwhile, in shards {}; replayed by {})",
        preview.projection_kind,
        shards.join(", "),
        if preview.nodes.is_empty() { "no live node".to_owned() } else { preview.nodes.join(", ") }
    );
    if guard.dry_run {
        if json {
            print_json(&preview)?;
        } else {
            outln!("would {what}; nothing changed (dry run)")?;
            if let Some(refusal) = &preview.refusal {
                outln!("a start would be refused without --force: {refusal}")?;
            }
        }
        return Ok(false);
    }
    if let (Some(refusal), false) = (&preview.refusal, request.force) {
        return Err(CliError::Usage(format!("{refusal} (--force)")));
    }
    confirm(&format!("Start a catch-up: {what}?"), &guard)?;
    Ok(true)
}

/// `catch-up cancel ID [--wait SECONDS]`.
async fn cancel<S: CatchUpStore + ?Sized>(
    storage: &S,
    id: i64,
    wait: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    let mut job = catch_ups::cancel(storage, id, Utc::now()).await?;
    if let Some(seconds) = wait {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        while !job.finished() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(FOLLOW_EVERY.min(Duration::from_millis(200))).await;
            job = catch_ups::progress(storage, id, Utc::now()).await?;
        }
    }
    if json {
        print_json(&job)?;
    } else if job.finished() {
        outln!(
            "catch-up {id} of {}: {} after {} events replayed",
            job.projection_kind,
            job.status,
            job.replayed
        )?;
    } else {
        outln!(
            "catch-up {id} of {}: cancel requested; a node stops it at its next step (is a node of the application running?)",
            job.projection_kind
        )?;
    }
    if wait.is_some() && !job.finished() {
        return Err(CliError::NotFound(format!(
            "catch-up {id} has not ended yet: it is still {}",
            job.status
        )));
    }
    Ok(())
}

/// `catch-up list`.
async fn list<S: CatchUpStore + ?Sized>(storage: &S, json: bool) -> Result<(), CliError> {
    let list = catch_ups::running(storage, Utc::now()).await?;
    if json {
        return print_json(&list);
    }
    if list.running.is_empty() {
        outln!("no running catch-ups")?;
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
            match &p.version_of {
                Some(model) => format!("{} (next version of {model})", p.projection_kind),
                None => p.projection_kind.clone(),
            },
            p.status.into(),
            p.replayed.to_string(),
            p.total_estimate.to_string(),
            format!("{:.0}", p.rate),
            eta(p),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}

fn eta(p: &CatchUpView) -> String {
    p.eta_s
        .and_then(|s| chrono::TimeDelta::from_std(Duration::from_secs_f64(s)).ok())
        .map_or("-".into(), human)
}

/// `catch-up progress ID [--follow]`.
async fn progress<S: CatchUpStore + ?Sized>(
    storage: &S,
    id: i64,
    follow: bool,
    json: bool,
) -> Result<(), CliError> {
    let read = || catch_ups::progress(storage, id, Utc::now());
    let mut p = read().await?;
    if follow && !json && !std::io::stdout().is_terminal() {
        // A pipe or a file gets no bar (indicatif hides it there): a line per change, the
        // first at once, the last when the job has ended.
        let mut shown = None;
        loop {
            let now = (p.status, p.replayed, p.total_estimate);
            if shown != Some(now) {
                outln!("{}", progress_line(id, &p))?;
                shown = Some(now);
            }
            if p.finished() {
                return Ok(());
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            p = read().await?;
        }
    }
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
            if p.finished() {
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
            outln!("{}", serde_json::to_string(&p)?)?;
            if p.finished() {
                return Ok(());
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            p = read().await?;
        }
    }
    if json {
        return print_json(&p);
    }
    outln!("{}", progress_line(id, &p))?;
    Ok(())
}

/// One job's progress on one line.
fn progress_line(id: i64, p: &CatchUpView) -> String {
    format!(
        "catch-up {id} of {}: {} — {} of ~{} replayed, {:.0}/s, ETA {}",
        p.projection_kind,
        p.status,
        p.replayed,
        p.total_estimate,
        p.rate,
        eta(p)
    )
}

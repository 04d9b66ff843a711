//! `shardbox dead-letters list|show|requeue|purge`: the shared dead-letter views and actions
//! (`shardbox_admin::views::dead_letters`) printed as tables or JSON.
//!
//! A requeue puts each dead letter into a shard: the one it died in (its target's, moved by
//! any re-sharding), or with `--shards N` (the shared query's `shards`, as the JSON API's)
//! the one the strategy recorded in the database gives — refused for an application's own
//! strategy, which the CLI cannot rebuild. Requeue and purge refuse to act on every dead
//! letter unless `--all` says so, say first what they touch (`--dry-run` stops there), and
//! go on only with `--yes` or the operator's yes on a terminal (see [`crate::confirm`]).

use crate::cli::{DeadLetterCommand, DeadLetterFilterArgs, Guard};
use crate::confirm::confirm;
use crate::error::CliError;
use crate::output::{capitalized, out, outln, print_json};
use crate::table::Table;
use chrono::{DateTime, Utc};
use shardbox_admin::views::dead_letters::{self, DeadLetterAction, DeadLetterQuery};
use shardbox_core::DeadLetterStore;

impl DeadLetterFilterArgs {
    /// The shared query, with `limit` and (a requeue's) `shards`.
    pub fn to_query(&self, limit: Option<usize>, shards: Option<u32>) -> DeadLetterQuery {
        DeadLetterQuery {
            ids: self.ids.clone(),
            kind: self.kind.clone(),
            target: self.target.clone(),
            tenant: self.tenant.clone(),
            since: self.since,
            until: self.until,
            after: self.after,
            limit,
            all: self.all,
            shards,
            dry_run: false,
        }
    }
}

/// Runs one `dead-letters` subcommand.
pub async fn run<S: shardbox_core::Storage + ?Sized>(
    storage: &S,
    command: DeadLetterCommand,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    match command {
        DeadLetterCommand::List { filter, limit } => {
            list(storage, &filter.to_query(Some(limit), None), json, now).await
        }
        DeadLetterCommand::Show { id } => show(storage, id, json).await,
        DeadLetterCommand::Requeue {
            filter,
            limit,
            shards,
            guard,
        } => {
            let query = filter.to_query(limit, shards);
            if guarded(storage, &query, DeadLetterAction::Requeue, guard, json, now).await? {
                requeue(storage, &query, json, now).await?;
            }
            Ok(())
        }
        DeadLetterCommand::Purge {
            filter,
            limit,
            guard,
        } => {
            let query = filter.to_query(limit, None);
            if !guarded(storage, &query, DeadLetterAction::Purge, guard, json, now).await? {
                return Ok(());
            }
            let purged = dead_letters::purge(storage, &query, now).await?;
            if json {
                print_json(&purged)?;
            } else {
                outln!("purged {} dead letters", purged.purged)?;
            }
            if purged.purged == 0 {
                return Err(CliError::NotFound("no dead letters match".into()));
            }
            Ok(())
        }
    }
}

/// Says what `action` on `query` touches and whether to go on: a dry run prints it and
/// stops (false; nothing matching is [`CliError::NotFound`]); otherwise the operator
/// confirms (see [`confirm`]) unless nothing matches, which the action reports.
async fn guarded<S: shardbox_core::Storage + ?Sized>(
    storage: &S,
    query: &DeadLetterQuery,
    action: DeadLetterAction,
    guard: Guard,
    json: bool,
    now: DateTime<Utc>,
) -> Result<bool, CliError> {
    let preview = dead_letters::preview(storage, query, action, None, now).await?;
    let shards: Vec<String> = preview.shards.iter().map(u32::to_string).collect();
    let (verb, n) = (action.verb(), preview.dead_letters);
    let what = format!(
        "{n} dead letter{} ({}; {} {})",
        if n == 1 { "" } else { "s" },
        preview.kinds_text(),
        match action {
            DeadLetterAction::Requeue => "into shards",
            DeadLetterAction::Purge => "from shards",
        },
        shards.join(", ")
    );
    if guard.dry_run {
        if json {
            print_json(&preview)?;
        } else if n > 0 {
            outln!("would {verb} {what}; nothing changed (dry run)")?;
        }
    }
    if guard.dry_run {
        if n == 0 {
            return Err(CliError::NotFound("no dead letters match".into()));
        }
        return Ok(false);
    }
    // Nothing matches: nothing to confirm; the action says so (exit 1).
    if n > 0 {
        confirm(&format!("{} {what}?", capitalized(verb)), &guard)?;
    }
    Ok(true)
}

/// `dead-letters list`.
async fn list<S: DeadLetterStore + ?Sized>(
    storage: &S,
    query: &DeadLetterQuery,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    let list = dead_letters::list(storage, query, now).await?;
    if json {
        return print_json(&list);
    }
    if list.dead_letters.is_empty() {
        outln!("no dead letters match")?;
        return Ok(());
    }
    let mut t = Table::new([
        "id",
        "target",
        "tenant",
        "attempts",
        "last attempt",
        "reason",
    ]);
    for l in &list.dead_letters {
        t.row(vec![
            l.id.to_string(),
            format!("{}/{}", l.target_kind, l.target_id),
            l.tenant.clone(),
            l.attempts.to_string(),
            l.last_attempt_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            one_line(&l.reason, 60),
        ]);
    }
    out!("{}", t.render())?;
    outln!(
        "{} shown of {} matching",
        list.dead_letters.len(),
        list.matching
    )?;
    Ok(())
}

/// `dead-letters show ID`.
async fn show<S: DeadLetterStore + ?Sized>(
    storage: &S,
    id: i64,
    json: bool,
) -> Result<(), CliError> {
    let d = dead_letters::show(storage, id).await?;
    if json {
        return print_json(&d);
    }
    let l = &d.dead_letter;
    outln!("dead letter {}", l.id)?;
    outln!(
        "  target       {}/{} (tenant {:?}), shard {}",
        l.target_kind,
        l.target_id,
        l.tenant,
        l.shard
    )?;
    outln!("  signal       {} ({})", l.signal_id, l.kind)?;
    outln!("  attempts     {}", l.attempts)?;
    outln!(
        "  first failed {}",
        l.first_attempt_at.map_or("-".into(), |t| t.to_rfc3339())
    )?;
    outln!("  dead since   {}", l.last_attempt_at.to_rfc3339())?;
    outln!("  received at  {}", d.received_at.to_rfc3339())?;
    outln!("  reason       {}", l.reason)?;
    if d.errors.is_empty() {
        outln!("  errors       none kept")?;
    }
    for e in &d.errors {
        outln!(
            "  error        attempt {} at {}: {}",
            e.attempt,
            e.at.to_rfc3339(),
            one_line(&e.error, 200)
        )?;
    }
    outln!("  payload type {}", d.payload_type)?;
    outln!("  payload      {}", d.payload)?;
    for (k, v) in &d.metadata {
        outln!("  metadata     {k} = {v}")?;
    }
    Ok(())
}

/// `dead-letters requeue`.
async fn requeue<S: shardbox_core::Storage + ?Sized>(
    storage: &S,
    query: &DeadLetterQuery,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    // Where it died, unless `--shards` asks for the recorded strategy (the shared requeue).
    let report = dead_letters::requeue(storage, query, None, now, |_| {}).await?;
    if json {
        print_json(&report)?;
    } else {
        outln!(
            "requeued {} (already in the Inbox {}, missing {}, skipped {}); running nodes deliver them at their next poll",
            report.requeued, report.already_in_inbox, report.missing, report.skipped
        )?;
    }
    if report.nothing_matched() {
        return Err(CliError::NotFound("no dead letters match".into()));
    }
    Ok(())
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

//! `shardbox dead-letters list|show|requeue|purge`, over the library's `DeadLetterStore` and
//! `DeadLetterFilter`.
//!
//! A requeue puts each dead letter into a shard: the one it died in, or the stable hash's
//! for `--shards N` (the CLI has no application code, so no custom strategy). Requeue and
//! purge refuse to act on every dead letter unless `--all` says so.

use crate::cli::{DeadLetterCommand, DeadLetterFilterArgs};
use crate::error::CliError;
use crate::output::{print_json, text_or_hex};
use crate::table::Table;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use shardbox_core::storage::{
    DeadLetterFilter, DeadLetterId, Requeue, RequeueReport, StoredDeadLetter,
};
use shardbox_core::{ShardIndex, ShardStrategy, StableHashStrategy, Storage};

/// Dead letters requeued per storage call (as the library does).
const REQUEUE_BATCH: usize = 500;

impl DeadLetterFilterArgs {
    /// The library's filter, with `limit`.
    pub fn to_filter(&self, limit: Option<usize>, now: DateTime<Utc>) -> DeadLetterFilter {
        DeadLetterFilter {
            target_kind: self.kind.clone(),
            target_id: self.target.clone(),
            tenant: self.tenant.clone(),
            since: self.since.map(|s| s.at(now)),
            until: self.until.map(|s| s.at(now)),
            ids: self.ids.iter().copied().map(DeadLetterId).collect(),
            after: self.after.map(DeadLetterId),
            limit,
        }
    }

    /// Whether any condition is set.
    fn narrows(&self) -> bool {
        !self.ids.is_empty()
            || self.kind.is_some()
            || self.tenant.is_some()
            || self.since.is_some()
            || self.until.is_some()
            || self.after.is_some()
    }

    /// Refuses a write over every dead letter without `--all`.
    fn check_scope(&self, verb: &str) -> Result<(), CliError> {
        if self.narrows() || self.all {
            Ok(())
        } else {
            Err(CliError::Usage(format!(
                "{verb} every dead letter? Give a filter (--id, --kind, --tenant, --since, …) or --all"
            )))
        }
    }
}

/// One dead letter as listed.
#[derive(Debug, Serialize)]
struct Listed<'a> {
    id: i64,
    target_kind: &'a str,
    target_id: &'a str,
    tenant: &'a str,
    signal_id: &'a str,
    kind: &'static str,
    shard: u32,
    attempts: u32,
    first_attempt_at: Option<DateTime<Utc>>,
    last_attempt_at: DateTime<Utc>,
    reason: &'a str,
}

impl<'a> Listed<'a> {
    fn of(d: &'a StoredDeadLetter) -> Self {
        let m = &d.letter.original.message;
        Listed {
            id: d.id.0,
            target_kind: &m.target_kind,
            target_id: &m.target_id,
            tenant: &m.tenant,
            signal_id: &m.signal_id.0,
            kind: m.kind.as_str(),
            shard: d.letter.original.shard.0,
            attempts: d.letter.attempts,
            first_attempt_at: d.letter.first_attempt_at,
            last_attempt_at: d.letter.last_attempt_at,
            reason: &d.letter.reason,
        }
    }
}

/// Runs one `dead-letters` subcommand.
pub async fn run(
    storage: &dyn Storage,
    command: DeadLetterCommand,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    match command {
        DeadLetterCommand::List { filter, limit } => list(storage, &filter, limit, json, now).await,
        DeadLetterCommand::Show { id } => show(storage, id, json).await,
        DeadLetterCommand::Requeue {
            filter,
            limit,
            shards,
        } => requeue(storage, &filter, limit, shards, json, now).await,
        DeadLetterCommand::Purge { filter, limit } => {
            purge(storage, &filter, limit, json, now).await
        }
    }
}

/// `dead-letters list`.
async fn list(
    storage: &dyn Storage,
    filter: &DeadLetterFilterArgs,
    limit: usize,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    let filter = filter.to_filter(Some(limit), now);
    let letters = storage.list_dead_letters(&filter).await?;
    let total = storage.count_dead_letters(&filter).await?;
    if json {
        let listed: Vec<Listed<'_>> = letters.iter().map(Listed::of).collect();
        return print_json(&json!({ "matching": total, "dead_letters": listed }));
    }
    if letters.is_empty() {
        println!("no dead letters match");
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
    for d in &letters {
        let l = Listed::of(d);
        t.row(vec![
            l.id.to_string(),
            format!("{}/{}", l.target_kind, l.target_id),
            l.tenant.to_owned(),
            l.attempts.to_string(),
            l.last_attempt_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            one_line(l.reason, 60),
        ]);
    }
    print!("{}", t.render());
    println!("{} shown of {total} matching", letters.len());
    Ok(())
}

/// `dead-letters show ID`.
async fn show(storage: &dyn Storage, id: i64, json: bool) -> Result<(), CliError> {
    let found = storage
        .list_dead_letters(&DeadLetterFilter::ids([DeadLetterId(id)]))
        .await?;
    let Some(d) = found.first() else {
        return Err(CliError::NotFound(format!("no dead letter {id}")));
    };
    let o = &d.letter.original;
    let m = &o.message;
    let view = json!({
        "dead_letter": Listed::of(d),
        "seq": o.seq,
        "payload_type": m.payload_type,
        "payload": text_or_hex(&m.payload),
        "metadata": m.metadata,
        "received_at": m.received_at,
        "expires_at": m.expires_at,
        "last_error": o.last_error,
    });
    if json {
        return print_json(&view);
    }
    let l = Listed::of(d);
    println!("dead letter {}", l.id);
    println!(
        "  target       {}/{} (tenant {:?}), shard {}",
        l.target_kind, l.target_id, l.tenant, l.shard
    );
    println!("  signal       {} ({})", l.signal_id, l.kind);
    println!("  attempts     {}", l.attempts);
    println!(
        "  first failed {}",
        l.first_attempt_at.map_or("-".into(), |t| t.to_rfc3339())
    );
    println!("  dead since   {}", l.last_attempt_at.to_rfc3339());
    println!("  received at  {}", m.received_at.to_rfc3339());
    println!("  reason       {}", l.reason);
    println!("  payload type {}", m.payload_type);
    println!("  payload      {}", text_or_hex(&m.payload));
    for (k, v) in &m.metadata {
        println!("  metadata     {k} = {v}");
    }
    Ok(())
}

/// `dead-letters requeue`.
async fn requeue(
    storage: &dyn Storage,
    args: &DeadLetterFilterArgs,
    limit: Option<usize>,
    shards: Option<u32>,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    args.check_scope("requeue")?;
    if shards == Some(0) {
        return Err(CliError::Usage("--shards must be at least 1".into()));
    }
    let filter = args.to_filter(limit, now);
    let strategy = StableHashStrategy::new();
    let mut report = RequeueReport::default();
    let mut remaining = filter.limit.unwrap_or(usize::MAX);
    let mut after = filter.after;
    while remaining > 0 {
        let page = storage
            .list_dead_letters(&DeadLetterFilter {
                after,
                limit: Some(remaining.min(REQUEUE_BATCH)),
                ..filter.clone()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        remaining = remaining.saturating_sub(page.len());
        let batch = page
            .iter()
            .map(|d| {
                let o = &d.letter.original;
                let shard = shards.map_or(o.shard, |n| {
                    strategy.shard_of(&o.message.target_kind, &o.message.target_id, n)
                });
                Requeue { id: d.id, shard }
            })
            .collect();
        report.merge(storage.requeue_dead_letters(batch, now).await?);
    }
    let touched = report.requeued + report.already_in_inbox + report.missing + report.skipped;
    if json {
        print_json(&json!({
            "requeued": report.requeued,
            "already_in_inbox": report.already_in_inbox,
            "missing": report.missing,
            "skipped": report.skipped,
            "shards": report.shards.iter().map(|s: &ShardIndex| s.0).collect::<Vec<_>>(),
        }))?;
    } else {
        println!(
            "requeued {} (already in the Inbox {}, gone {}, skipped {}); running nodes deliver them at their next poll",
            report.requeued, report.already_in_inbox, report.missing, report.skipped
        );
    }
    if touched == 0 {
        return Err(CliError::NotFound("no dead letters match".into()));
    }
    Ok(())
}

/// `dead-letters purge`.
async fn purge(
    storage: &dyn Storage,
    args: &DeadLetterFilterArgs,
    limit: Option<usize>,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    args.check_scope("purge")?;
    let purged = storage
        .purge_dead_letters(&args.to_filter(limit, now))
        .await?;
    if json {
        print_json(&json!({ "purged": purged }))?;
    } else {
        println!("purged {purged} dead letters");
    }
    if purged == 0 {
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

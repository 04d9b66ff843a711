//! `shardbox blocked list|unblock`, over the library's `DeadLetterStore`.

use crate::cli::{BlockedCommand, UnblockAction};
use crate::error::CliError;
use crate::output::print_json;
use crate::table::Table;
use chrono::{DateTime, Utc};
use serde_json::json;
use shardbox_core::storage::{EntityKey, Unblock};
use shardbox_core::Storage;

/// Runs one `blocked` subcommand.
pub async fn run(
    storage: &dyn Storage,
    command: BlockedCommand,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    match command {
        BlockedCommand::List { limit } => list(storage, limit, json).await,
        BlockedCommand::Unblock {
            kind,
            id,
            tenant,
            action,
        } => unblock(storage, EntityKey { kind, tenant, id }, action, json, now).await,
    }
}

/// `blocked list`.
async fn list(storage: &dyn Storage, limit: usize, json: bool) -> Result<(), CliError> {
    let blocked = storage.blocked_targets(limit).await?;
    if json {
        let rows: Vec<_> = blocked
            .iter()
            .map(|b| {
                json!({
                    "kind": b.target.kind,
                    "tenant": b.target.tenant,
                    "id": b.target.id,
                    "shard": b.shard.0,
                    "seq": b.seq,
                    "signal_id": b.signal_id.0,
                    "attempts": b.attempts,
                    "last_error": b.last_error,
                    "first_failed_at": b.first_failed_at,
                    "blocked_at": b.blocked_at,
                })
            })
            .collect();
        return print_json(&json!({ "blocked": rows }));
    }
    if blocked.is_empty() {
        println!("no blocked targets");
        return Ok(());
    }
    let mut t = Table::new([
        "target",
        "tenant",
        "shard",
        "attempts",
        "blocked at",
        "last error",
    ]);
    for b in &blocked {
        t.row(vec![
            format!("{}/{}", b.target.kind, b.target.id),
            b.target.tenant.clone(),
            b.shard.to_string(),
            b.attempts.to_string(),
            b.blocked_at
                .map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string()),
            b.last_error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

/// `blocked unblock KIND ID`.
async fn unblock(
    storage: &dyn Storage,
    target: EntityKey,
    action: UnblockAction,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError> {
    let action = match action {
        UnblockAction::Requeue => Unblock::Requeue,
        UnblockAction::Drop => Unblock::Drop,
        UnblockAction::DeadLetter => Unblock::DeadLetter,
    };
    let report = storage.unblock_target(&target, action, now).await?;
    if json {
        print_json(&json!({ "unblocked": report.unblocked, "released": report.released }))?;
    } else {
        println!(
            "{}/{}: {} blocked message {:?}, {} parked behind it released; running nodes go on at their next poll",
            target.kind, target.id, report.unblocked, action, report.released
        );
    }
    if report.unblocked == 0 {
        return Err(CliError::NotFound(format!(
            "{}/{} (tenant {:?}) was not blocked",
            target.kind, target.id, target.tenant
        )));
    }
    Ok(())
}

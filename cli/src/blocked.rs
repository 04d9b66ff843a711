//! `shardbox blocked list|unblock`: the shared blocked-target views and action
//! (`shardbox_admin::views::blocked`) printed as tables or JSON.

use crate::cli::{BlockedCommand, UnblockAction};
use crate::error::CliError;
use crate::output::{out, outln, print_json};
use crate::table::Table;
use chrono::{DateTime, Utc};
use shardbox_admin::views::blocked::{self, UnblockRequest};
use shardbox_core::DeadLetterStore;

/// Runs one `blocked` subcommand.
pub async fn run<S: DeadLetterStore + ?Sized>(
    storage: &S,
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
        } => {
            let request = UnblockRequest {
                kind,
                id,
                tenant,
                action: match action {
                    UnblockAction::Requeue => blocked::UnblockAction::Requeue,
                    UnblockAction::Drop => blocked::UnblockAction::Drop,
                    UnblockAction::DeadLetter => blocked::UnblockAction::DeadLetter,
                },
            };
            let report = blocked::unblock(storage, &request, now).await?;
            if json {
                return print_json(&report);
            }
            outln!(
                "{}/{}: {} blocked message {}, {} parked behind it released; running nodes go on at their next poll",
                request.kind, request.id, report.unblocked, done(request.action), report.released
            )?;
            Ok(())
        }
    }
}

/// What became of the blocked message, in the operator's words (not the library's type
/// names).
fn done(action: blocked::UnblockAction) -> &'static str {
    match action {
        blocked::UnblockAction::Requeue => "requeued",
        blocked::UnblockAction::Drop => "dropped",
        blocked::UnblockAction::DeadLetter => "dead-lettered",
    }
}

/// `blocked list`.
async fn list<S: DeadLetterStore + ?Sized>(
    storage: &S,
    limit: usize,
    json: bool,
) -> Result<(), CliError> {
    let list = blocked::list(storage, limit).await?;
    if json {
        return print_json(&list);
    }
    if list.blocked.is_empty() {
        outln!("no blocked targets")?;
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
    for b in &list.blocked {
        t.row(vec![
            format!("{}/{}", b.kind, b.id),
            b.tenant.clone(),
            b.shard.to_string(),
            b.attempts.to_string(),
            b.blocked_at
                .map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string()),
            b.last_error.clone().unwrap_or_default(),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}

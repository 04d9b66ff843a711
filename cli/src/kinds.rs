//! `shardbox kinds list|pause|resume|set`: the shared kinds view and actions
//! (`shardbox_admin::views::kinds`) printed as tables or JSON.

use crate::cli::KindsCommand;
use crate::error::CliError;
use crate::output::{out, outln, print_json};
use crate::table::Table;
use chrono::{DateTime, Utc};
use shardbox_admin::views::kinds::{self, KindView, SettingsView};
use shardbox_core::storage::{KindControlStore, WorkRegistry};

/// Runs one `kinds` subcommand.
pub async fn run<S>(
    storage: &S,
    command: KindsCommand,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    match command {
        KindsCommand::List => list(storage, json, now).await,
        KindsCommand::Pause { kind, force } => pause(storage, &kind, force, json, now).await,
        KindsCommand::Resume { kind, force } => resume(storage, &kind, force, json, now).await,
        KindsCommand::Set {
            kind,
            max_attempts,
            backoff,
            on_exhausted,
            handler_timeout_ms,
            max_concurrent,
            rate,
            clear,
            force,
        } => {
            let given = SettingsView {
                max_attempts,
                backoff,
                on_exhausted,
                handler_timeout_ms,
                max_concurrent,
                rate_per_second: rate,
            };
            set(storage, &kind, given, clear, force, json, now).await
        }
    }
}

/// `kinds list`: every kind, its role, nodes, state and settings.
async fn list<S>(storage: &S, json: bool, now: DateTime<Utc>) -> Result<(), CliError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    let list = kinds::list(storage, now).await?;
    if json {
        return print_json(&list);
    }
    if list.kinds.is_empty() {
        outln!("no kinds: no live node registers one and none has stored controls")?;
        return Ok(());
    }
    let mut t = Table::new(["kind", "role", "nodes", "state", "settings"]);
    for k in &list.kinds {
        t.row(vec![
            k.kind.clone(),
            k.role.clone().unwrap_or_else(|| "-".into()),
            k.nodes.len().to_string(),
            state(k),
            settings_text(&k.settings),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}

/// `kinds pause KIND`.
async fn pause<S>(
    storage: &S,
    kind: &str,
    force: bool,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    let outcome = kinds::pause(storage, kind, force, now).await?;
    if json {
        return print_json(&outcome);
    }
    if outcome.paused {
        outln!("{kind} paused; running nodes stop delivering it within their poll interval")?;
    } else {
        outln!("{kind} was paused already")?;
    }
    Ok(())
}

/// `kinds resume KIND`.
async fn resume<S>(
    storage: &S,
    kind: &str,
    force: bool,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    let outcome = kinds::resume(storage, kind, force, now).await?;
    if json {
        return print_json(&outcome);
    }
    if outcome.was_paused {
        outln!(
            "{kind} resumed: {} waiting messages due now; running nodes go on at their next poll",
            outcome.released
        )?;
    } else {
        outln!("{kind} was not paused")?;
    }
    Ok(())
}

/// `kinds set KIND …`: the `given` settings merged over the stored ones, or (`clear`) none
/// stored.
async fn set<S>(
    storage: &S,
    kind: &str,
    given: SettingsView,
    clear: bool,
    force: bool,
    json: bool,
    now: DateTime<Utc>,
) -> Result<(), CliError>
where
    S: KindControlStore + WorkRegistry + ?Sized,
{
    if !clear && given == SettingsView::default() {
        return Err(CliError::Usage(
            "nothing to set: give a setting (see `shardbox kinds set --help`), or --clear to put the kind back on its nodes' configuration".into(),
        ));
    }
    let stored = if clear {
        SettingsView::default()
    } else {
        kinds::list(storage, now)
            .await?
            .kinds
            .into_iter()
            .find(|k| k.kind == kind)
            .map(|k| k.settings)
            .unwrap_or_default()
    };
    let merged = merge(stored, given);
    let view = kinds::set(storage, kind, &merged, force, now).await?;
    if json {
        return print_json(&view);
    }
    outln!(
        "{kind}: {}; running nodes follow within their poll interval",
        settings_text(&view.settings)
    )?;
    Ok(())
}

/// `stored` with every field `given` sets replaced (a failure policy's three fields together).
fn merge(stored: SettingsView, given: SettingsView) -> SettingsView {
    SettingsView {
        max_attempts: given.max_attempts.or(stored.max_attempts),
        backoff: given.backoff.or(stored.backoff),
        on_exhausted: given.on_exhausted.or(stored.on_exhausted),
        handler_timeout_ms: given.handler_timeout_ms.or(stored.handler_timeout_ms),
        max_concurrent: given.max_concurrent.or(stored.max_concurrent),
        rate_per_second: given.rate_per_second.or(stored.rate_per_second),
    }
}

fn state(k: &KindView) -> String {
    match k.paused_since {
        Some(since) => format!("paused since {}", since.format("%Y-%m-%d %H:%M:%S")),
        None => "running".into(),
    }
}

/// The stored settings in one line, or what applies without them.
fn settings_text(s: &SettingsView) -> String {
    let mut parts = Vec::new();
    if let (Some(n), Some(b), Some(o)) = (&s.max_attempts, &s.backoff, &s.on_exhausted) {
        parts.push(format!("{n} attempts, backoff {b}, then {o}"));
    }
    if let Some(ms) = s.handler_timeout_ms {
        parts.push(format!("timeout {ms} ms"));
    }
    if let Some(n) = s.max_concurrent {
        parts.push(format!("at most {n} at once"));
    }
    if let Some(r) = s.rate_per_second {
        parts.push(format!("at most {r}/s"));
    }
    if parts.is_empty() {
        "the nodes' configuration".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_settings_replace_stored_ones_field_by_field() {
        let stored = SettingsView {
            max_concurrent: Some(4),
            rate_per_second: Some(10.0),
            ..SettingsView::default()
        };
        let given = SettingsView {
            rate_per_second: Some(50.0),
            ..SettingsView::default()
        };
        let merged = merge(stored, given);
        assert_eq!(merged.max_concurrent, Some(4));
        assert_eq!(merged.rate_per_second, Some(50.0));
        assert_eq!(settings_text(&merged), "at most 4 at once, at most 50/s");
        assert_eq!(
            settings_text(&SettingsView::default()),
            "the nodes' configuration"
        );
    }
}

//! A dry run of a dead-letter requeue or purge: how many letters it would touch, of which
//! kinds, into or from which shards — read in pages, nothing written. Shared by the CLI's
//! `--dry-run` and the JSON API's `"dry_run": true`; re-exported at `views::dead_letters`.

use crate::error::AdminError;
use crate::views::dead_letters::DeadLetterQuery;
use chrono::{DateTime, Utc};
use serde::Serialize;
use shardbox_core::operator;
use shardbox_core::storage::DeadLetterFilter;
use shardbox_core::Addressing;
use std::collections::{BTreeMap, BTreeSet};

/// A requeue or a purge: what [`preview`] previews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterAction {
    /// Back into the Inbox.
    Requeue,
    /// Deleted for good.
    Purge,
}

impl DeadLetterAction {
    /// The verb, as the messages say it.
    pub fn verb(self) -> &'static str {
        match self {
            DeadLetterAction::Requeue => "requeue",
            DeadLetterAction::Purge => "purge",
        }
    }
}

/// What a requeue or purge would touch (a dry run: nothing was changed).
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterPreview {
    /// Always true: this is what would happen, not what happened.
    pub dry_run: bool,
    /// The action previewed.
    pub action: DeadLetterAction,
    /// The dead letters it would act on (at most the query's `limit`).
    pub dead_letters: u64,
    /// How many of them per target kind (`-` for a letter without a target).
    pub kinds: BTreeMap<String, u64>,
    /// The shards a requeue would put them in, placed as the requeue would place them; for
    /// a purge, the shards they died in. Sorted, each once.
    pub shards: Vec<u32>,
}

impl DeadLetterPreview {
    /// `payment ×12, vault ×1`.
    pub fn kinds_text(&self) -> String {
        let kinds: Vec<String> = self
            .kinds
            .iter()
            .map(|(kind, n)| format!("{kind} ×{n}"))
            .collect();
        kinds.join(", ")
    }
}

/// Dead letters read per page by [`preview`].
const PREVIEW_PAGE: usize = 500;

/// What `action` on `query` would touch, read and counted without changing anything (the
/// same checks as the action: a scope, `shards` for a requeue only). A requeue's shards are
/// where it would place each letter: by `app`'s addressing in the application, by the
/// recorded strategy with `shards`, else the shard the letter holds.
pub async fn preview<S>(
    storage: &S,
    query: &DeadLetterQuery,
    action: DeadLetterAction,
    app: Option<&Addressing>,
    now: DateTime<Utc>,
) -> Result<DeadLetterPreview, AdminError>
where
    S: shardbox_core::Storage + ?Sized,
{
    if action == DeadLetterAction::Purge {
        query.check_no_shards("a purge")?;
    }
    query.check_scope(action.verb())?;
    let filter = query.to_filter(now)?;
    let recorded;
    let addressing = match (app, query.shards) {
        (Some(addressing), _) => Some(addressing),
        (None, Some(0)) => return Err(AdminError::Refused("shards must be at least 1".into())),
        (None, Some(shards)) if action == DeadLetterAction::Requeue => {
            recorded = operator::placement::recorded_addressing(storage).await?;
            recorded.set_shard_count(shards);
            Some(&recorded)
        }
        _ => None,
    };
    let mut preview = DeadLetterPreview {
        dry_run: true,
        action,
        dead_letters: 0,
        kinds: BTreeMap::new(),
        shards: Vec::new(),
    };
    let mut shards = BTreeSet::new();
    let mut after = filter.after;
    let mut left = filter.limit.unwrap_or(usize::MAX);
    while left > 0 {
        let page = storage
            .list_dead_letters(&DeadLetterFilter {
                after,
                limit: Some(left.min(PREVIEW_PAGE)),
                ..filter.clone()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        left = left.saturating_sub(page.len());
        for d in &page {
            let m = &d.letter.original.message;
            preview.dead_letters += 1;
            let kind = if m.target_kind.is_empty() {
                "-".to_owned()
            } else {
                m.target_kind.clone()
            };
            *preview.kinds.entry(kind).or_default() += 1;
            let shard = match (action, addressing) {
                (DeadLetterAction::Requeue, Some(a)) if !m.target_kind.is_empty() => {
                    a.shard_of(&m.target_kind, &m.target_id)
                }
                _ => d.letter.original.shard,
            };
            shards.insert(shard.0);
        }
        if page.len() < PREVIEW_PAGE {
            break;
        }
    }
    preview.shards = shards.into_iter().collect();
    Ok(preview)
}

//! The dead-letter views and actions (list, show, requeue, purge) over the library's
//! `DeadLetterStore` and `DeadLetterFilter`, shared by the CLI and the HTTP API.
//!
//! ```text
//!  DeadLetterQuery ─► check (scope, target needs kind) ─► DeadLetterFilter
//!    list/show  ─► list_dead_letters + count_dead_letters ─► DeadLetterList / Detail
//!    requeue    ─► operator::requeue_dead_letters (the library's own loop and placement)
//!    purge      ─► operator::purge_dead_letters
//!    dry_run    ─► preview: how many, of which kinds, into which shards — nothing written
//! ```
//!
//! A write over every dead letter is refused unless the query says `all`. Where a requeued
//! letter goes: by the application's strategy when the surface runs in it; else into the
//! shard it holds, or with `shards` by the strategy the database records (refused for an
//! application's own strategy: a tool cannot hash as it does). One query type serves the
//! CLI's flags and the JSON API's bodies and parameters alike, so both offer the same
//! filters.

use crate::error::AdminError;
pub use crate::views::dead_letter_preview::{preview, DeadLetterAction, DeadLetterPreview};
use crate::views::since::Since;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox_core::operator::{self, Placement};
use shardbox_core::storage::{
    DeadLetterFilter, DeadLetterId, DeadLetterStore, RequeueReport, StoredDeadLetter,
};
use shardbox_core::{Addressing, AttemptError, Metadata};

/// Which dead letters: the library's filter, as an operator gives it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadLetterQuery {
    /// Only these ids.
    pub ids: Vec<i64>,
    /// Only of this target kind.
    pub kind: Option<String>,
    /// Only of this target id (needs `kind`).
    pub target: Option<String>,
    /// Only of this tenant.
    pub tenant: Option<String>,
    /// Only dead-lettered at or after this time.
    pub since: Option<Since>,
    /// Only dead-lettered before this time.
    pub until: Option<Since>,
    /// Only ids greater than this one (paging).
    pub after: Option<i64>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Required to requeue or purge every dead letter when no condition is set.
    pub all: bool,
    /// Requeue only: place each letter by the application's strategy (as the database
    /// records it) from this shard count, instead of into the shard it holds; the Inbox's
    /// recorded count wins if it is another. Refused by the other operations, and for an
    /// application's own strategy outside the application.
    pub shards: Option<u32>,
    /// A requeue or purge only says what it would touch ([`preview`]) and changes nothing.
    pub dry_run: bool,
}

impl DeadLetterQuery {
    /// The library's filter at `now`, or why the query is refused.
    pub fn to_filter(&self, now: DateTime<Utc>) -> Result<DeadLetterFilter, AdminError> {
        if self.target.is_some() && self.kind.is_none() {
            return Err(AdminError::Refused(
                "a target id needs its kind: give kind too".into(),
            ));
        }
        Ok(DeadLetterFilter {
            target_kind: self.kind.clone(),
            target_id: self.target.clone(),
            tenant: self.tenant.clone(),
            since: self.since.map(|s| s.at(now)),
            until: self.until.map(|s| s.at(now)),
            ids: self.ids.iter().copied().map(DeadLetterId).collect(),
            after: self.after.map(DeadLetterId),
            limit: self.limit,
        })
    }

    /// Whether any condition narrows the query.
    pub fn narrows(&self) -> bool {
        !self.ids.is_empty()
            || self.kind.is_some()
            || self.tenant.is_some()
            || self.since.is_some()
            || self.until.is_some()
            || self.after.is_some()
    }

    /// Refuses `shards` outside a requeue.
    pub(crate) fn check_no_shards(&self, verb: &str) -> Result<(), AdminError> {
        match self.shards {
            Some(_) => Err(AdminError::Refused(format!(
                "shards applies to a requeue only, not to {verb}"
            ))),
            None => Ok(()),
        }
    }

    /// Refuses a write over every dead letter without `all`.
    pub(crate) fn check_scope(&self, verb: &str) -> Result<(), AdminError> {
        if self.narrows() || self.all {
            Ok(())
        } else {
            Err(AdminError::Refused(format!(
                "{verb} every dead letter? Give a filter (ids, kind, tenant, since, …) or all"
            )))
        }
    }
}

/// One dead letter as listed.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterView {
    /// Its id.
    pub id: i64,
    /// The target's kind.
    pub target_kind: String,
    /// The target's id.
    pub target_id: String,
    /// The target's tenant.
    pub tenant: String,
    /// The message's signal id.
    pub signal_id: String,
    /// `command`, `event` or `catch_up`.
    pub kind: &'static str,
    /// The shard it died in.
    pub shard: u32,
    /// Failed attempts.
    pub attempts: u32,
    /// When the first attempt failed.
    pub first_attempt_at: Option<DateTime<Utc>>,
    /// When it was dead-lettered.
    pub last_attempt_at: DateTime<Utc>,
    /// Why.
    pub reason: String,
}

impl DeadLetterView {
    /// The view of `d`.
    pub fn of(d: &StoredDeadLetter) -> Self {
        let m = &d.letter.original.message;
        DeadLetterView {
            id: d.id.0,
            target_kind: m.target_kind.clone(),
            target_id: m.target_id.clone(),
            tenant: m.tenant.clone(),
            signal_id: m.signal_id.0.clone(),
            kind: m.kind.as_str(),
            shard: d.letter.original.shard.0,
            attempts: d.letter.attempts,
            first_attempt_at: d.letter.first_attempt_at,
            last_attempt_at: d.letter.last_attempt_at,
            reason: d.letter.reason.clone(),
        }
    }
}

/// A page of dead letters and how many match in all.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterList {
    /// How many match the query without its limit.
    pub matching: u64,
    /// The page, oldest first.
    pub dead_letters: Vec<DeadLetterView>,
}

/// One dead letter whole: origin, reason, payload, metadata.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterDetail {
    /// What the list shows.
    pub dead_letter: DeadLetterView,
    /// Its Inbox sequence number.
    pub seq: i64,
    /// The payload's type name.
    pub payload_type: String,
    /// The payload as text when it is UTF-8 (JSON payloads are), else `hex:…`.
    pub payload: String,
    /// The message's metadata.
    pub metadata: Metadata,
    /// When the Inbox received it.
    pub received_at: DateTime<Utc>,
    /// Its TTL, if any.
    pub expires_at: Option<DateTime<Utc>>,
    /// The last error recorded on the row.
    pub last_error: Option<String>,
    /// The errors of its last failed attempts, oldest first, ending with the one that killed
    /// it (at most `ErrorHistory::KEPT`; empty for a message never attempted, or dead before
    /// histories were kept).
    pub errors: Vec<AttemptError>,
}

/// What a requeue did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RequeueOutcome {
    /// Put back into the Inbox.
    pub requeued: usize,
    /// Already in the Inbox (same target and signal): removed from the dead letters.
    pub already_in_inbox: usize,
    /// Gone before the requeue (requeued or purged meanwhile).
    pub missing: usize,
    /// Left alone (see `RequeueReport::skipped`).
    pub skipped: usize,
    /// The shards that got rows.
    pub shards: Vec<u32>,
}

impl RequeueOutcome {
    /// Whether no dead letter matched at all.
    pub fn nothing_matched(&self) -> bool {
        self.requeued + self.already_in_inbox + self.missing + self.skipped == 0
    }

    fn of(report: &RequeueReport) -> Self {
        RequeueOutcome {
            requeued: report.requeued,
            already_in_inbox: report.already_in_inbox,
            missing: report.missing,
            skipped: report.skipped,
            shards: report.shards.iter().map(|s| s.0).collect(),
        }
    }
}

/// What a purge did.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PurgeOutcome {
    /// Dead letters deleted.
    pub purged: u64,
}

/// The dead letters matching `query` (at most `query.limit`), and how many match in all.
pub async fn list<S: DeadLetterStore + ?Sized>(
    storage: &S,
    query: &DeadLetterQuery,
    now: DateTime<Utc>,
) -> Result<DeadLetterList, AdminError> {
    query.check_no_shards("a list")?;
    let filter = query.to_filter(now)?;
    let letters = storage.list_dead_letters(&filter).await?;
    let matching = storage
        .count_dead_letters(&DeadLetterFilter {
            limit: None,
            ..filter
        })
        .await?;
    Ok(DeadLetterList {
        matching,
        dead_letters: letters.iter().map(DeadLetterView::of).collect(),
    })
}

/// Dead letter `id` whole, or [`AdminError::NotFound`].
pub async fn show<S: DeadLetterStore + ?Sized>(
    storage: &S,
    id: i64,
) -> Result<DeadLetterDetail, AdminError> {
    let found = storage
        .list_dead_letters(&DeadLetterFilter::ids([DeadLetterId(id)]))
        .await?;
    let d = found
        .first()
        .ok_or_else(|| AdminError::NotFound(format!("no dead letter {id}")))?;
    let o = &d.letter.original;
    let m = &o.message;
    Ok(DeadLetterDetail {
        dead_letter: DeadLetterView::of(d),
        seq: o.seq,
        payload_type: m.payload_type.clone(),
        payload: text_or_hex(&m.payload),
        metadata: m.metadata.clone(),
        received_at: m.received_at,
        expires_at: m.expires_at,
        last_error: o.last_error.clone(),
        errors: o.errors.entries().to_vec(),
    })
}

/// Puts the dead letters matching `query` back into the Inbox (the library's
/// `operator::requeue_dead_letters`); refused without a condition or `all`. Where each goes:
/// by `app`'s addressing when the surface runs in the application; else into the shard it
/// holds (its target's, a re-sharding moves it), or — with `shards` — by the strategy the
/// database records, which is refused for an application's own strategy. `on_page` hears
/// each page's report as it commits.
pub async fn requeue<S>(
    storage: &S,
    query: &DeadLetterQuery,
    app: Option<&Addressing>,
    now: DateTime<Utc>,
    on_page: impl FnMut(&RequeueReport),
) -> Result<RequeueOutcome, AdminError>
where
    S: shardbox_core::Storage + ?Sized,
{
    query.check_scope("requeue")?;
    let filter = query.to_filter(now)?;
    if query.shards == Some(0) {
        return Err(AdminError::Refused("shards must be at least 1".into()));
    }
    let recorded;
    let placement = match (app, query.shards) {
        (Some(addressing), _) => Placement::Addressed(addressing),
        (None, None) => Placement::AsRecorded,
        (None, Some(shards)) => {
            // Placed by the recorded strategy from the given count: if another count is
            // recorded the storage refuses and the page is placed again by that one.
            recorded = operator::placement::recorded_addressing(storage).await?;
            recorded.set_shard_count(shards);
            Placement::Addressed(&recorded)
        }
    };
    let report = operator::requeue_dead_letters(storage, placement, &filter, now, on_page).await?;
    Ok(RequeueOutcome::of(&report))
}

/// Deletes the dead letters matching `query` for good; refused without a condition or
/// `all`.
pub async fn purge<S>(
    storage: &S,
    query: &DeadLetterQuery,
    now: DateTime<Utc>,
) -> Result<PurgeOutcome, AdminError>
where
    S: DeadLetterStore + ?Sized,
{
    query.check_no_shards("a purge")?;
    query.check_scope("purge")?;
    let purged = operator::purge_dead_letters(storage, &query.to_filter(now)?).await?;
    Ok(PurgeOutcome { purged })
}

/// A payload as text when it is UTF-8 (JSON payloads are), else as `hex:…`.
pub fn text_or_hex(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("hex:{hex}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_print_as_text_or_hex() {
        assert_eq!(text_or_hex(b"{\"a\":1}"), "{\"a\":1}");
        assert_eq!(text_or_hex(&[0xff, 0x01]), "hex:ff01");
    }

    #[test]
    fn writes_over_everything_need_all_and_a_target_needs_its_kind() {
        let everything = DeadLetterQuery::default();
        assert!(matches!(
            everything.check_scope("purge"),
            Err(AdminError::Refused(m)) if m.contains("purge every dead letter")
        ));
        let all = DeadLetterQuery {
            all: true,
            ..Default::default()
        };
        assert!(all.check_scope("purge").is_ok());
        let orphan = DeadLetterQuery {
            target: Some("a-1".into()),
            ..Default::default()
        };
        assert!(matches!(
            orphan.to_filter(Utc::now()),
            Err(AdminError::Refused(m)) if m.contains("needs its kind")
        ));
    }
}

//! The status's breakdown by entity kind: which kind a backlog, a block or the dead letters
//! belong to.
//!
//! ```text
//!  InboxStore::kind_depths(now)        ─► due, waiting, blocked, lag per kind   exact
//!  kinds the live nodes register ∪ of those depths ∪ of the oldest dead letters
//!    each ─► DeadLetterStore::count_dead_letters(kind)                          exact
//!  dead letters of other kinds ─► one `other` line (kind: None)
//! ```
//!
//! Shardbox's own kinds (the catch-ups' tick rows, `shardbox.catch-up`) are left out: they
//! are a catch-up's steps, shown by the catch-up views, not an application's backlog.

use serde::Serialize;
use shardbox_core::storage::{DeadLetterFilter, KindDepth, StorageReads};
use shardbox_core::{is_internal_kind, StorageError};
use std::collections::BTreeMap;

/// The oldest dead letters whose kinds are counted (each kind's count is exact; a kind
/// with none among them and nothing pending falls in the `other` line).
pub const DEAD_LETTER_KINDS_READ: usize = 100;

/// One kind's pending rows and dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// The entity kind; `None` for the dead letters of the kinds not listed.
    pub kind: Option<String>,
    /// Rows due now.
    pub due: u64,
    /// Rows waiting for a delay, a retry, a catch-up, or behind a block.
    pub waiting: u64,
    /// Blocked targets (one blocked message each).
    pub blocked_targets: u64,
    /// Milliseconds since its oldest due row became due (0 when none is due).
    pub lag_ms: i64,
    /// Its dead letters.
    pub dead_letters: u64,
}

impl KindCounts {
    fn of(d: &KindDepth, now: chrono::DateTime<chrono::Utc>) -> Self {
        KindCounts {
            kind: Some(d.kind.clone()),
            due: d.due,
            waiting: d.waiting,
            blocked_targets: d.blocked,
            lag_ms: d.lag(now).num_milliseconds(),
            dead_letters: 0,
        }
    }

    fn empty(kind: &str) -> Self {
        KindCounts {
            kind: Some(kind.to_owned()),
            due: 0,
            waiting: 0,
            blocked_targets: 0,
            lag_ms: 0,
            dead_letters: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.due + self.waiting + self.blocked_targets + self.dead_letters == 0
    }
}

/// Pending rows and dead letters by kind at `now`, for every kind with a pending row,
/// `kinds` (the live nodes' kinds) and the kinds of the oldest dead letters;
/// `total_dead_letters` not counted by kind make an `other` line (`kind: None`). Kinds with
/// nothing to count are left out.
pub async fn read(
    storage: &StorageReads,
    now: chrono::DateTime<chrono::Utc>,
    kinds: Vec<String>,
    total_dead_letters: u64,
) -> Result<Vec<KindCounts>, StorageError> {
    let mut by_kind: BTreeMap<String, KindCounts> = storage
        .kind_depths(now)
        .await?
        .iter()
        .filter(|d| !is_internal_kind(&d.kind))
        .map(|d| (d.kind.clone(), KindCounts::of(d, now)))
        .collect();
    let mut counted_kinds = kinds;
    if total_dead_letters > 0 {
        let oldest = DeadLetterFilter::all().limit(DEAD_LETTER_KINDS_READ);
        for d in storage.list_dead_letters(&oldest).await? {
            counted_kinds.push(d.letter.original.message.target_kind.clone());
        }
    }
    for kind in counted_kinds.into_iter().filter(|k| !is_internal_kind(k)) {
        by_kind
            .entry(kind.clone())
            .or_insert_with(|| KindCounts::empty(&kind));
    }
    let mut counted = 0;
    if total_dead_letters > 0 {
        for (kind, counts) in by_kind.iter_mut() {
            counts.dead_letters = storage
                .count_dead_letters(&DeadLetterFilter::all().kind(kind.clone()))
                .await?;
            counted += counts.dead_letters;
        }
    }
    let mut out: Vec<KindCounts> = by_kind.into_values().filter(|c| !c.is_empty()).collect();
    if total_dead_letters > counted {
        out.push(KindCounts {
            dead_letters: total_dead_letters - counted,
            kind: None,
            ..KindCounts::empty("")
        });
    }
    Ok(out)
}

//! The status's breakdown by entity kind: how many dead letters and blocked targets each
//! kind has, from the reads the stores already offer (no read of the Inbox by kind).
//!
//! ```text
//!  kinds the live nodes register ∪ of the blocked targets ∪ of the oldest dead letters
//!    each ─► DeadLetterStore::count_dead_letters(kind)    exact
//!  DeadLetterStore::blocked_targets(BLOCKED_READ)         grouped by kind; a lower bound
//!                                                         past BLOCKED_READ in all
//!  dead letters of other kinds (no live node registers them) ─► one `other` line
//! ```

use serde::Serialize;
use shardbox_core::storage::{DeadLetterFilter, StorageReads};
use shardbox_core::StorageError;
use std::collections::BTreeMap;

/// The most blocked targets read to count them by kind.
pub const BLOCKED_READ: usize = 1_000;
/// The oldest dead letters whose kinds are counted (each kind's count is exact; a kind
/// with none among them falls in the `other` line).
pub const DEAD_LETTER_KINDS_READ: usize = 100;

/// One kind's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// The entity kind; `None` for the dead letters of the kinds not listed.
    pub kind: Option<String>,
    /// Its dead letters.
    pub dead_letters: u64,
    /// Its blocked targets (of the first [`BLOCKED_READ`] in all).
    pub blocked_targets: u64,
}

/// Dead letters and blocked targets by kind, for `kinds` (the live nodes' kinds), every
/// kind with a blocked target and the kinds of the oldest dead letters;
/// `total_dead_letters` not counted by kind make an `other` line (`kind: None`). Kinds
/// with nothing to count are left out.
pub async fn read(
    storage: &StorageReads,
    kinds: Vec<String>,
    total_dead_letters: u64,
) -> Result<Vec<KindCounts>, StorageError> {
    let mut by_kind: BTreeMap<String, KindCounts> = BTreeMap::new();
    for b in storage.blocked_targets(BLOCKED_READ).await? {
        entry(&mut by_kind, &b.target.kind).blocked_targets += 1;
    }
    for kind in kinds {
        entry(&mut by_kind, &kind);
    }
    if total_dead_letters > 0 {
        let oldest = DeadLetterFilter::all().limit(DEAD_LETTER_KINDS_READ);
        for d in storage.list_dead_letters(&oldest).await? {
            entry(&mut by_kind, &d.letter.original.message.target_kind);
        }
    }
    let mut counted = 0;
    for counts in by_kind.values_mut() {
        let kind = counts.kind.clone().unwrap_or_default();
        counts.dead_letters = storage
            .count_dead_letters(&DeadLetterFilter::all().kind(kind))
            .await?;
        counted += counts.dead_letters;
    }
    let mut out: Vec<KindCounts> = by_kind
        .into_values()
        .filter(|c| c.dead_letters + c.blocked_targets > 0)
        .collect();
    if total_dead_letters > counted {
        out.push(KindCounts {
            kind: None,
            dead_letters: total_dead_letters - counted,
            blocked_targets: 0,
        });
    }
    Ok(out)
}

fn entry<'a>(by_kind: &'a mut BTreeMap<String, KindCounts>, kind: &str) -> &'a mut KindCounts {
    by_kind.entry(kind.to_owned()).or_insert(KindCounts {
        kind: Some(kind.to_owned()),
        dead_letters: 0,
        blocked_targets: 0,
    })
}

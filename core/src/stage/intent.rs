//! What a station decides for one row of the page ([`Intent`]), and the command outcome an
//! intent settles (see [`crate::model::outcome`]).

use crate::model::outcome::CommandOutcome;
use chrono::{DateTime, Utc};

/// What a station decided for one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Intent {
    /// Handled: mark delivered and keep until `keep_until` for deduplication (removed at once
    /// when `None`, i.e. with a zero window).
    Delivered {
        /// End of the deduplication window.
        keep_until: Option<DateTime<Utc>>,
    },
    /// A duplicate of a message already delivered: remove it without handling.
    Duplicate,
    /// Not handled now; due again at `until` with its attempts unchanged.
    Hold {
        /// When it is due again.
        until: DateTime<Utc>,
    },
    /// Failed; try again at `at`.
    RetryAt {
        /// Next attempt.
        at: DateTime<Utc>,
        /// Why it failed.
        error: String,
    },
    /// Failed for the last time: move to the dead letters.
    DeadLetter {
        /// Why.
        reason: String,
    },
    /// Failed for the last time: drop (counted and logged).
    Drop {
        /// Why.
        reason: String,
    },
    /// Failed for the last time under a `block` policy: keep it with status `blocked`; its
    /// target stops until an operator requeues or drops it.
    Block {
        /// Why.
        reason: String,
    },
    /// Not handled: its target is stopped by a blocked message (an earlier one, or one this
    /// stage blocks). Parked until an operator unblocks the target; see
    /// [`RowChange::BehindBlock`](crate::storage::RowChange::BehindBlock).
    BehindBlock,
    /// Not handled: its kind is paused. Parked untouched (no attempt, no error) until the kind
    /// is resumed; see [`RowChange::Paused`](crate::storage::RowChange::Paused).
    Paused,
    /// Its time to live ran out before delivery: removed and counted (and dead-lettered with
    /// reason `expired` when `dead_letter_expired` is set).
    Expired,
}

/// The reason of a dead letter whose time to live ran out.
pub const EXPIRED_REASON: &str = "expired";

impl Intent {
    /// Whether this intent decides a command row's outcome: handled, failed for good or
    /// expired (a retry, a hold or a duplicate decides nothing: the row, or its original, goes
    /// on).
    pub(crate) fn decides_outcome(&self) -> bool {
        !matches!(
            self,
            Intent::Duplicate
                | Intent::Hold { .. }
                | Intent::RetryAt { .. }
                | Intent::BehindBlock
                | Intent::Paused
        )
    }

    /// The outcome a command row's intent records, if it decides one that its row does not
    /// keep: a handled command's outcome is read from its delivered row (see
    /// [`crate::model::outcome`]), so `Delivered` records nothing.
    pub(crate) fn recorded_outcome(&self) -> Option<CommandOutcome> {
        Some(match self {
            Intent::DeadLetter { reason } => CommandOutcome::DeadLettered {
                reason: reason.clone(),
            },
            Intent::Drop { reason } => CommandOutcome::Dropped {
                reason: reason.clone(),
            },
            Intent::Block { reason } => CommandOutcome::Blocked {
                reason: reason.clone(),
            },
            Intent::Expired => CommandOutcome::Expired,
            Intent::Delivered { .. }
            | Intent::Duplicate
            | Intent::Hold { .. }
            | Intent::RetryAt { .. }
            | Intent::BehindBlock
            | Intent::Paused => return None,
        })
    }
}

//! The blocked-target views and the unblock action over the library's `DeadLetterStore`.
//!
//! An unblock requeues (due again at once, fresh attempts), drops or dead-letters the
//! blocked message; the messages parked behind it become due.

use crate::error::AdminError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox_core::operator;
use shardbox_core::storage::{BlockedTarget, DeadLetterStore, EntityKey, Unblock, UnblockReport};

/// One blocked target.
#[derive(Debug, Clone, Serialize)]
pub struct BlockedView {
    /// The target's entity kind.
    pub kind: String,
    /// The target's tenant.
    pub tenant: String,
    /// The target's id.
    pub id: String,
    /// Its shard.
    pub shard: u32,
    /// The blocked message's Inbox sequence number.
    pub seq: i64,
    /// The blocked message's signal id.
    pub signal_id: String,
    /// Failed attempts.
    pub attempts: u32,
    /// The last error.
    pub last_error: Option<String>,
    /// When the first attempt failed.
    pub first_failed_at: Option<DateTime<Utc>>,
    /// When the target was blocked.
    pub blocked_at: Option<DateTime<Utc>>,
}

impl BlockedView {
    /// The view of `b`.
    pub fn of(b: &BlockedTarget) -> Self {
        BlockedView {
            kind: b.target.kind.clone(),
            tenant: b.target.tenant.clone(),
            id: b.target.id.clone(),
            shard: b.shard.0,
            seq: b.seq,
            signal_id: b.signal_id.0.clone(),
            attempts: b.attempts,
            last_error: b.last_error.clone(),
            first_failed_at: b.first_failed_at,
            blocked_at: b.blocked_at,
        }
    }
}

/// The blocked targets, oldest block first.
#[derive(Debug, Clone, Serialize)]
pub struct BlockedList {
    /// Up to the limit asked for.
    pub blocked: Vec<BlockedView>,
}

/// What to do with a blocked message, as an operator names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnblockAction {
    /// Due again now with a fresh attempt count, before the target's later messages.
    #[default]
    Requeue,
    /// Delete it.
    Drop,
    /// Move it to the dead letters.
    DeadLetter,
}

impl UnblockAction {
    /// The library's action.
    pub fn to_library(self) -> Unblock {
        match self {
            UnblockAction::Requeue => Unblock::Requeue,
            UnblockAction::Drop => Unblock::Drop,
            UnblockAction::DeadLetter => Unblock::DeadLetter,
        }
    }
}

/// An unblock request: which target, and what to do with its blocked message.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnblockRequest {
    /// The target's entity kind.
    pub kind: String,
    /// The target's id.
    pub id: String,
    /// The target's tenant (empty by default).
    #[serde(default)]
    pub tenant: String,
    /// What to do with the blocked message (requeue by default).
    #[serde(default)]
    pub action: UnblockAction,
}

impl UnblockRequest {
    /// The target as the library names it.
    pub fn target(&self) -> EntityKey {
        EntityKey {
            kind: self.kind.clone(),
            tenant: self.tenant.clone(),
            id: self.id.clone(),
        }
    }
}

/// What an unblock did.
#[derive(Debug, Clone, Serialize)]
pub struct UnblockOutcome {
    /// Blocked messages requeued, dropped or dead-lettered (0 or 1).
    pub unblocked: usize,
    /// Messages parked behind it that became due.
    pub released: usize,
    /// The shards written.
    #[serde(skip)]
    pub report: UnblockReport,
}

/// Up to `limit` blocked targets.
pub async fn list<S: DeadLetterStore + ?Sized>(
    storage: &S,
    limit: usize,
) -> Result<BlockedList, AdminError> {
    let blocked = storage.blocked_targets(limit).await?;
    Ok(BlockedList {
        blocked: blocked.iter().map(BlockedView::of).collect(),
    })
}

/// Unblocks `request`'s target at `now`, or [`AdminError::NotFound`] if it was not blocked.
pub async fn unblock<S: DeadLetterStore + ?Sized>(
    storage: &S,
    request: &UnblockRequest,
    now: DateTime<Utc>,
) -> Result<UnblockOutcome, AdminError> {
    let target = request.target();
    let report = operator::unblock(storage, &target, request.action.to_library(), now).await?;
    if report.unblocked == 0 {
        return Err(AdminError::NotFound(format!(
            "{}/{} (tenant {:?}) was not blocked",
            target.kind, target.id, target.tenant
        )));
    }
    Ok(UnblockOutcome {
        unblocked: report.unblocked,
        released: report.released,
        report,
    })
}

//! The messages a stage settled otherwise than by delivery — dead-lettered, dropped, blocking
//! their target, expired — and the one log line each gets once the stage has committed.
//!
//! ```text
//!  Conveyor::into_commit ─► StageReport::settled (one Settled per message)
//!  commit_stage ok       ─► log_settled: one line per message, with target and reason
//!  commit_stage failed   ─► nothing logged: the next owner settles (and logs) them again
//! ```
//!
//! Logging after the commit is what makes each line say what happened: a stage whose lease
//! was lost commits nothing, so a line written while the commit was being built would report
//! a dead letter that never was, and a second one when the next owner redoes the stage.
//! Levels: WARN for a dead letter and a block (an operator has something to look at), INFO
//! for a drop and an expiry (what the application's policy asked for).

use crate::model::message::InboxMessage;

/// What became of a settled message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Moved to the dead letters after its attempts.
    DeadLettered,
    /// Dropped by the failure policy.
    Dropped,
    /// Blocked its target until an operator requeues or drops it.
    Blocked,
    /// Expired by its TTL; also written to the dead letters when `dead_lettered`.
    Expired {
        /// Whether `dead_letter_expired` kept it as a dead letter.
        dead_lettered: bool,
    },
}

/// One message a stage settled otherwise than by delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// Its row.
    pub seq: i64,
    /// The target's kind.
    pub kind: String,
    /// The target's id.
    pub target: String,
    /// The target's tenant (empty for single-tenant applications).
    pub tenant: String,
    /// Attempts made, this stage's included.
    pub attempts: u32,
    /// What became of it.
    pub fate: Fate,
    /// Why: the last error, or the expiry.
    pub reason: String,
}

impl Settled {
    /// `message`'s fate after `attempts`, for `reason`.
    pub fn of(message: &InboxMessage, attempts: u32, fate: Fate, reason: &str) -> Self {
        Settled {
            seq: message.seq,
            kind: message.message.target_kind.clone(),
            target: message.message.target_id.clone(),
            tenant: message.message.tenant.clone(),
            attempts,
            fate,
            reason: reason.to_owned(),
        }
    }

    /// Its one log line.
    pub fn log(&self) {
        let Settled {
            seq,
            kind,
            target,
            tenant,
            attempts,
            fate,
            reason,
        } = self;
        match fate {
            Fate::DeadLettered => tracing::warn!(
                seq, %kind, %target, %tenant, attempts, %reason,
                "message dead-lettered; requeue or purge it (shardbox dead-letters)"
            ),
            Fate::Blocked => tracing::warn!(
                seq, %kind, %target, %tenant, attempts, %reason,
                "message blocked its target; an operator must requeue or drop it (shardbox blocked)"
            ),
            Fate::Dropped => tracing::info!(
                seq, %kind, %target, %tenant, attempts, %reason,
                "message dropped by the failure policy"
            ),
            Fate::Expired { dead_lettered } => tracing::info!(
                seq, %kind, %target, %tenant, attempts, dead_lettered,
                "message expired (TTL)"
            ),
        }
    }
}

/// Logs every settled message of a committed stage, one line each.
pub fn log_settled(settled: &[Settled]) {
    for s in settled {
        s.log();
    }
}

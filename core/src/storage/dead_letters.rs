//! The operator's view of failures: dead letters and blocked targets.
//!
//! ```text
//!  dead_letters table ─ list / count (filter: kind, tenant, target, time, ids; limit, after)
//!                     ─ requeue ─► one new Inbox row each (same signal, attempts 0, due now)
//!                     ─ purge
//!  blocked inbox rows ─ list blocked targets
//!                     ─ unblock: requeue (due now, attempts 0) │ drop │ dead-letter,
//!                       and every row parked behind it due at once
//! ```
//!
//! Operator writes may run while workers serve the same shards, and they are safe without a
//! lease: a requeue inserts a new row (never touches one a worker may hold in a page), and an
//! unblock changes rows in status `blocked`, which no page reads and no stage commits, and
//! makes the target's parked rows due, which no page reads either. A stage that read one of
//! the target's rows before the unblock may still park it after: its commit parks a row only
//! if the target is still blocked at that point (see `RowChange::BehindBlock`), and the
//! unblock does not interleave with a commit on the target's shard (the durable backends
//! lock the shard's session row first, as a commit does). Neither removes a row a worker
//! could be delivering.

use super::entities::EntityKey;
use super::row_change::DeadLetter;
use crate::model::error::StorageError;
use crate::model::ids::{ShardIndex, SignalId};
use crate::model::message::{InboxMessage, MessageKind};
use crate::model::outcome::CommandOutcome;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::fmt;

/// The id of a stored dead letter (its row in `dead_letters`; ascending in insertion order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeadLetterId(pub i64);

impl fmt::Display for DeadLetterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A dead letter as stored, with its id.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDeadLetter {
    /// Its id, for requeue and purge.
    pub id: DeadLetterId,
    /// The message, its origin and why it is dead.
    pub letter: DeadLetter,
}

/// Which dead letters an operation applies to: every condition set must hold.
///
/// ```
/// use shardbox_core::storage::DeadLetterFilter;
/// let recent_payments = DeadLetterFilter::all()
///     .kind("payment")
///     .since(chrono::Utc::now() - chrono::Duration::hours(1))
///     .limit(100);
/// assert_eq!(recent_payments.target_kind.as_deref(), Some("payment"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Target entity kind.
    pub target_kind: Option<String>,
    /// Target id (usually with `target_kind`).
    pub target_id: Option<String>,
    /// Tenant.
    pub tenant: Option<String>,
    /// Dead-lettered (last attempt) at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Dead-lettered (last attempt) before this time.
    pub until: Option<DateTime<Utc>>,
    /// Only these ids (any id when empty).
    pub ids: Vec<DeadLetterId>,
    /// Only ids greater than this one (to page through a list).
    pub after: Option<DeadLetterId>,
    /// At most this many, oldest first (all when `None`). Counting ignores it.
    pub limit: Option<usize>,
}

impl DeadLetterFilter {
    /// Every dead letter.
    pub fn all() -> Self {
        Self::default()
    }

    /// The dead letters with these ids.
    pub fn ids(ids: impl IntoIterator<Item = DeadLetterId>) -> Self {
        DeadLetterFilter {
            ids: ids.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Only of target kind `kind`.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.target_kind = Some(kind.into());
        self
    }

    /// Only of target `kind`/`id`.
    pub fn target(mut self, kind: impl Into<String>, id: impl Into<String>) -> Self {
        self.target_kind = Some(kind.into());
        self.target_id = Some(id.into());
        self
    }

    /// Only of `tenant`.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Only dead-lettered at or after `t`.
    pub fn since(mut self, t: DateTime<Utc>) -> Self {
        self.since = Some(t);
        self
    }

    /// Only dead-lettered before `t`.
    pub fn until(mut self, t: DateTime<Utc>) -> Self {
        self.until = Some(t);
        self
    }

    /// Only ids after `id`.
    pub fn after(mut self, id: DeadLetterId) -> Self {
        self.after = Some(id);
        self
    }

    /// At most `n`, oldest first.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Whether `letter` (stored as `id`) matches every condition but the limit.
    pub fn matches(&self, id: DeadLetterId, letter: &DeadLetter) -> bool {
        let m = &letter.original.message;
        self.target_kind
            .as_ref()
            .is_none_or(|k| *k == m.target_kind)
            && self.target_id.as_ref().is_none_or(|t| *t == m.target_id)
            && self.tenant.as_ref().is_none_or(|t| *t == m.tenant)
            && self.since.is_none_or(|t| letter.last_attempt_at >= t)
            && self.until.is_none_or(|t| letter.last_attempt_at < t)
            && (self.ids.is_empty() || self.ids.contains(&id))
            && self.after.is_none_or(|a| id > a)
    }
}

/// One dead letter to put back into the Inbox, in `shard` (the registry's shard of its
/// target, which the caller knows and the storage does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requeue {
    /// The dead letter.
    pub id: DeadLetterId,
    /// The shard its target belongs to now.
    pub shard: ShardIndex,
}

/// What a requeue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequeueReport {
    /// Dead letters put back into the Inbox (and removed from the dead letters).
    pub requeued: usize,
    /// Dead letters whose signal was already in the target's Inbox (pending, or delivered
    /// within the deduplication window): removed from the dead letters without a new row,
    /// since delivering it again would be a duplicate.
    pub already_in_inbox: usize,
    /// Ids that were not (or no longer) dead letters — another operator requeued or purged
    /// them first.
    pub missing: usize,
    /// Dead letters left in place because they cannot be requeued (e.g. an event copy that
    /// never had a target id).
    pub skipped: usize,
    /// The shards that received a row, sorted, each once.
    pub shards: Vec<ShardIndex>,
}

impl RequeueReport {
    /// Adds another report's numbers to this one.
    pub fn merge(&mut self, other: RequeueReport) {
        self.requeued += other.requeued;
        self.already_in_inbox += other.already_in_inbox;
        self.missing += other.missing;
        self.skipped += other.skipped;
        self.shards.extend(other.shards);
        self.shards.sort_unstable();
        self.shards.dedup();
    }
}

/// A target stopped by a blocked message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedTarget {
    /// The target.
    pub target: EntityKey,
    /// Its shard.
    pub shard: ShardIndex,
    /// The blocked message's `seq`.
    pub seq: i64,
    /// The blocked message's signal.
    pub signal_id: SignalId,
    /// Failed attempts.
    pub attempts: u32,
    /// The last error.
    pub last_error: Option<String>,
    /// When the first attempt failed.
    pub first_failed_at: Option<DateTime<Utc>>,
    /// When it was blocked.
    pub blocked_at: Option<DateTime<Utc>>,
}

/// What to do with a target's blocked message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblock {
    /// Due again now, with a fresh attempt count, in its place (`seq`): it is delivered
    /// before the target's later messages.
    Requeue,
    /// Delete it; the target's later messages go on.
    Drop,
    /// Move it to the dead letters (reason `unblocked by operator: <last error>`); the
    /// target's later messages go on.
    DeadLetter,
}

/// What an unblock did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnblockReport {
    /// Blocked messages changed (0 if the target was not blocked).
    pub unblocked: usize,
    /// The target's messages that were parked behind the block, now due at once (they go
    /// on in `seq` order, after a requeued blocked message).
    pub released: usize,
    /// The shards of those messages, sorted, each once.
    pub shards: Vec<ShardIndex>,
}

/// The reason of the dead letter an operator makes of a blocked message
/// ([`Unblock::DeadLetter`]).
pub fn unblocked_reason(last_error: Option<&str>) -> String {
    format!(
        "unblocked by operator: {}",
        last_error.unwrap_or("no error recorded")
    )
}

/// The outcome a blocked command gets when an operator lets its target go on by `action`:
/// dropped or dead-lettered with [`unblocked_reason`], decided anew; `None` for a requeue (its
/// row waits again: pending) and for an event, which has no outcome.
pub fn unblocked_outcome(action: Unblock, row: &InboxMessage) -> Option<CommandOutcome> {
    if row.message.kind != MessageKind::Command {
        return None;
    }
    let reason = unblocked_reason(row.last_error.as_deref());
    match action {
        Unblock::Requeue => None,
        Unblock::Drop => Some(CommandOutcome::Dropped { reason }),
        Unblock::DeadLetter => Some(CommandOutcome::DeadLettered { reason }),
    }
}

/// Dead letters and blocked targets, for operators (and the CLI).
#[async_trait]
pub trait DeadLetterStore: Send + Sync + 'static {
    /// The dead letters matching `filter`, oldest (lowest id) first, at most `filter.limit`.
    async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<StoredDeadLetter>, StorageError>;

    /// How many dead letters match `filter` (its limit ignored).
    async fn count_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError>;

    /// Puts dead letters back into the Inbox, atomically: each becomes a new row in its
    /// given shard with the same signal, payload, metadata, kind and receipt time,
    /// `attempts` 0, due at once and without TTL; and leaves the dead letters. See
    /// [`RequeueReport`] for those that cannot be. `now` is the operation's time.
    ///
    /// `shard_count` is the count the shards of `requeue` were computed by: refused with
    /// [`StorageError::ShardCountChanged`], writing nothing, if another one is recorded (see
    /// `InboxStore::write_all_addressed`).
    async fn requeue_dead_letters(
        &self,
        requeue: Vec<Requeue>,
        shard_count: u32,
        now: DateTime<Utc>,
    ) -> Result<RequeueReport, StorageError>;

    /// Deletes the dead letters matching `filter` (at most `filter.limit`, oldest first);
    /// returns how many.
    async fn purge_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError>;

    /// The blocked targets, in `seq` order of their blocked message, at most `limit`.
    async fn blocked_targets(&self, limit: usize) -> Result<Vec<BlockedTarget>, StorageError>;

    /// Acts on `target`'s blocked message (only rows in status `blocked`, which no worker
    /// touches). A requeued message is due at once, with no TTL. In the same transaction,
    /// every parked row of the target (its messages that waited behind the block) is made
    /// due at once (`deliver_after` cleared, whatever the readers' clocks), so that the next
    /// page reads them in `seq` order; parked rows are released even if nothing was blocked
    /// (nothing holds them any more). `now` stamps a dead letter. A command dropped or
    /// dead-lettered so has its outcome decided anew ([`unblocked_outcome`], at `now`) where
    /// its record is still kept, so that its sender no longer reads `Blocked`.
    async fn unblock_target(
        &self,
        target: &EntityKey,
        action: Unblock,
        now: DateTime<Utc>,
    ) -> Result<UnblockReport, StorageError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::{test_command, InboxMessage, MessageStatus};

    fn letter(kind: &str, id: &str, at: i64) -> DeadLetter {
        let t = DateTime::from_timestamp(at, 0).unwrap_or_default();
        DeadLetter {
            original: InboxMessage {
                seq: 1,
                shard: ShardIndex(0),
                status: MessageStatus::ToDeliver,
                attempts: 0,
                last_error: None,
                first_failed_at: None,
                errors: Default::default(),
                keep_until: None,
                message: test_command("s", kind, id, t),
            },
            reason: "r".into(),
            attempts: 1,
            first_attempt_at: Some(t),
            last_attempt_at: t,
        }
    }

    #[test]
    fn a_filter_matches_when_every_condition_holds() {
        let t = |s| DateTime::from_timestamp(s, 0).unwrap_or_default();
        let l = letter("payment", "p-1", 100);
        let id = DeadLetterId(5);
        assert!(DeadLetterFilter::all().matches(id, &l));
        assert!(DeadLetterFilter::all().kind("payment").matches(id, &l));
        assert!(!DeadLetterFilter::all().kind("order").matches(id, &l));
        assert!(DeadLetterFilter::all()
            .target("payment", "p-1")
            .matches(id, &l));
        assert!(!DeadLetterFilter::all()
            .target("payment", "p-2")
            .matches(id, &l));
        assert!(DeadLetterFilter::all().since(t(100)).matches(id, &l));
        assert!(!DeadLetterFilter::all().since(t(101)).matches(id, &l));
        assert!(!DeadLetterFilter::all().until(t(100)).matches(id, &l));
        assert!(DeadLetterFilter::all().until(t(101)).matches(id, &l));
        assert!(DeadLetterFilter::ids([id]).matches(id, &l));
        assert!(!DeadLetterFilter::ids([DeadLetterId(6)]).matches(id, &l));
        assert!(DeadLetterFilter::all()
            .after(DeadLetterId(4))
            .matches(id, &l));
        assert!(!DeadLetterFilter::all().after(id).matches(id, &l));
        assert!(!DeadLetterFilter::all().tenant("t1").matches(id, &l));
    }

    #[test]
    fn requeue_reports_merge() {
        let mut a = RequeueReport {
            requeued: 1,
            shards: vec![ShardIndex(3)],
            ..RequeueReport::default()
        };
        a.merge(RequeueReport {
            requeued: 2,
            missing: 1,
            shards: vec![ShardIndex(1), ShardIndex(3)],
            ..RequeueReport::default()
        });
        assert_eq!((a.requeued, a.missing), (3, 1));
        assert_eq!(a.shards, vec![ShardIndex(1), ShardIndex(3)]);
    }
}

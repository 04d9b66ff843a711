//! The Inbox's storage: rows per (message, target), sharded, read in `seq` order.

use super::commit::{CommitReport, StageCommit};
use super::entities::EntityKey;
use super::write::{WriteBatch, WriteReport};
use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::model::message::{DedupKey, InboxMessage, MessageStatus};
use crate::model::outcome::OutcomeLookup;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// A page of due rows and the targets of the shard that must wait.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// Due rows (`to_deliver` or `to_catch_up`), in `seq` order.
    pub messages: Vec<InboxMessage>,
    /// Targets of the shard with an earlier failed message waiting for its retry (a row with
    /// `attempts > 0` not yet due): their later messages must wait until the given time, so
    /// that per-target order holds across retries. A retry parked by a catch-up does not
    /// count: it waits for the job, and the target's replayed rows must not wait behind it.
    pub waiting: Vec<(EntityKey, DateTime<Utc>)>,
    /// Targets of the shard with a `blocked` message: their later messages must wait until
    /// an operator requeues or drops it (they are parked, see `RowChange::BehindBlock`, and
    /// the unblock makes them due).
    pub blocked: Vec<EntityKey>,
    /// When the shard next has work without new writes, as of the read: the earliest
    /// `deliver_after` after `now` of a row not yet delivered (parked rows excluded), as
    /// [`InboxStore::next_due`] gives it — read with the page, so that a worker leaving the
    /// shard needs no query of its own.
    pub next_due: Option<DateTime<Utc>>,
    /// Whether the shard held a delivered row whose deduplication window had passed at the
    /// read (one for a purge, see [`StageCommit::purge_delivered`]); read with the page, so
    /// that a stage with nothing to purge issues no purge.
    pub purge_due: bool,
}

/// Rows of the Inbox by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboxCounts {
    /// Waiting for delivery (due or not; rows parked behind a blocked message or by a
    /// catch-up included).
    pub to_deliver: u64,
    /// Delivered and kept for deduplication.
    pub delivered: u64,
    /// Replayed history waiting for a catch-up.
    pub to_catch_up: u64,
    /// Blocked messages waiting for an operator (not counted as pending: no worker will
    /// deliver them until they are requeued).
    pub blocked: u64,
}

impl InboxCounts {
    /// Rows not yet delivered that a worker will deliver (blocked rows excluded).
    pub fn pending(&self) -> u64 {
        self.to_deliver + self.to_catch_up
    }

    /// Every row, whatever its status.
    pub fn total(&self) -> u64 {
        self.to_deliver + self.delivered + self.to_catch_up + self.blocked
    }
}

/// One shard's rows by what they wait for, as of a time: the depth an operator watches.
///
/// ```text
///  to_deliver ─┬─ deliver_after unset or passed          due        (lag: the oldest of them)
///              ├─ parked (catch-up, or behind a block)   parked
///              ├─ later, attempts > 0                    retrying
///              └─ later, never attempted                 delayed
///  to_catch_up                                           replay
///  blocked                                               blocked
///  delivered (kept for deduplication)                    delivered
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardDepth {
    /// The shard.
    pub shard: ShardIndex,
    /// Waiting for delivery and due now.
    pub due: u64,
    /// Waiting for a delay (a scheduled send) that has not passed.
    pub delayed: u64,
    /// Failed before and waiting for their retry.
    pub retrying: u64,
    /// Parked until a catch-up completes or an operator unblocks their target (see
    /// [`crate::catch_up::parked_until`]; one value marks both).
    pub parked: u64,
    /// Replayed history waiting for a catch-up (`to_catch_up`).
    pub replay: u64,
    /// Blocked messages waiting for an operator.
    pub blocked: u64,
    /// Delivered and kept for deduplication.
    pub delivered: u64,
    /// When the oldest due row became due (its `deliver_after`, or its `received_at`
    /// without one): the shard's lag is the time since.
    pub oldest_due_at: Option<DateTime<Utc>>,
}

/// One entity kind's pending rows, as of a time: which kind a backlog belongs to.
///
/// ```text
///  to_deliver, deliver_after unset or passed                due      (lag: the oldest)
///  to_deliver, later (delay, retry, parked) ─┐
///  to_catch_up                               ┴──────────────  waiting
///  blocked                                                  blocked
/// ```
///
/// Delivered rows are not counted: they are kept for deduplication, not pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindDepth {
    /// The target entity kind.
    pub kind: String,
    /// Waiting for delivery and due now.
    pub due: u64,
    /// Waiting for a delay, a retry, a catch-up, or behind a block.
    pub waiting: u64,
    /// Blocked messages waiting for an operator.
    pub blocked: u64,
    /// When the oldest due row became due.
    pub oldest_due_at: Option<DateTime<Utc>>,
}

impl KindDepth {
    /// The pending rows of `kind` that `d` counted (its shard aside).
    pub fn of(kind: impl Into<String>, d: &ShardDepth) -> Self {
        KindDepth {
            kind: kind.into(),
            due: d.due,
            waiting: d.delayed + d.retrying + d.parked + d.replay,
            blocked: d.blocked,
            oldest_due_at: d.oldest_due_at,
        }
    }

    /// How long the oldest due row has waited at `now` (zero when none is due).
    pub fn lag(&self, now: DateTime<Utc>) -> chrono::TimeDelta {
        self.oldest_due_at.map_or(chrono::TimeDelta::zero(), |at| {
            (now - at).max(chrono::TimeDelta::zero())
        })
    }
}

impl ShardDepth {
    /// An empty shard.
    pub fn empty(shard: ShardIndex) -> Self {
        ShardDepth {
            shard,
            due: 0,
            delayed: 0,
            retrying: 0,
            parked: 0,
            replay: 0,
            blocked: 0,
            delivered: 0,
            oldest_due_at: None,
        }
    }

    /// How long the oldest due row has waited at `now` (zero when none is due).
    pub fn lag(&self, now: DateTime<Utc>) -> chrono::TimeDelta {
        self.oldest_due_at.map_or(chrono::TimeDelta::zero(), |at| {
            (now - at).max(chrono::TimeDelta::zero())
        })
    }

    /// Counts one row (of status `status`, `attempts` failed attempts, due at
    /// `deliver_after`, received at `received_at`) as of `now`: the one classification every
    /// backend that counts row by row uses.
    pub fn count(
        &mut self,
        status: MessageStatus,
        attempts: u32,
        received_at: DateTime<Utc>,
        deliver_after: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        match status {
            MessageStatus::Delivered => self.delivered += 1,
            MessageStatus::ToCatchUp => self.replay += 1,
            MessageStatus::Blocked => self.blocked += 1,
            MessageStatus::ToDeliver => match deliver_after {
                Some(at) if crate::model::parked::is_parked(Some(at)) => self.parked += 1,
                Some(at) if at > now && attempts > 0 => self.retrying += 1,
                Some(at) if at > now => self.delayed += 1,
                _ => {
                    self.due += 1;
                    let at = deliver_after.unwrap_or(received_at);
                    self.oldest_due_at = Some(self.oldest_due_at.map_or(at, |o| o.min(at)));
                }
            },
        }
    }

    /// Adds another shard's numbers to these (totals over shards).
    pub fn absorb(&mut self, other: &ShardDepth) {
        self.due += other.due;
        self.delayed += other.delayed;
        self.retrying += other.retrying;
        self.parked += other.parked;
        self.replay += other.replay;
        self.blocked += other.blocked;
        self.delivered += other.delivered;
        self.oldest_due_at = match (self.oldest_due_at, other.oldest_due_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// The Inbox table.
#[async_trait]
pub trait InboxStore: Send + Sync + 'static {
    /// Appends `batch.events` and writes `batch.messages` in one transaction. Duplicates are
    /// ignored and counted, never an error.
    async fn write(&self, batch: WriteBatch) -> Result<WriteReport, StorageError>;

    /// Writes several batches, each as [`InboxStore::write`] would and with its own report, in
    /// order: the group commit of concurrent sends. The durable backends and the memory
    /// backend write them all at once (all or none); the default writes them one after
    /// another, each atomic on its own. Writing a batch again after an error is safe: its rows
    /// and events are then ignored as duplicates.
    async fn write_all(&self, batches: Vec<WriteBatch>) -> Result<Vec<WriteReport>, StorageError> {
        let mut reports = Vec::with_capacity(batches.len());
        for batch in batches {
            reports.push(self.write(batch).await?);
        }
        Ok(reports)
    }

    /// Writes the batches as [`InboxStore::write_all`] does, only if the Inbox's recorded
    /// shard count is `shard_count` — the one the rows were addressed by — or none is
    /// recorded; otherwise writes nothing and returns [`StorageError::ShardCountChanged`].
    /// The check and the writes are one transaction that a re-sharding's switch waits for
    /// (and that waits for it), so no row is written by a count that is no longer the
    /// Inbox's. Every send goes this way.
    async fn write_all_addressed(
        &self,
        batches: Vec<WriteBatch>,
        shard_count: u32,
    ) -> Result<Vec<WriteReport>, StorageError>;

    /// Up to `limit` rows of `shard` that are due at `now` (`deliver_after` unset or passed)
    /// and not delivered (nor blocked), in `seq` order, with the shard's waiting and blocked
    /// targets (see [`Page`]). Costs O(limit + waiting + blocked) whatever the size of the
    /// Inbox. A retrying row whose TTL has passed does not make its target wait.
    async fn read_page(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Page, StorageError>;

    /// Writes everything a stage decided in one transaction, only if `commit.lease` still
    /// holds its epoch; otherwise writes nothing and returns [`StorageError::LeaseLost`].
    /// Renews the lease to `commit.lease_until`.
    async fn commit_stage(&self, commit: StageCommit) -> Result<CommitReport, StorageError>;

    /// What became of the command `key` as of `now`: [`OutcomeLookup::Pending`] while its row
    /// waits for delivery (due, delayed, retrying or held), the outcome a stage committed
    /// (see [`StageCommit::outcomes`]) until its `keep_until`, else
    /// [`OutcomeLookup::Unknown`]. Reads the row before the record, so that a commit between
    /// the two reads is seen as decided, never as unknown. Costs O(1) by the unique key.
    async fn outcome(
        &self,
        key: &DedupKey,
        now: DateTime<Utc>,
    ) -> Result<OutcomeLookup, StorageError>;

    /// The earliest `deliver_after` of a not-yet-due row of `shard` after `now`, if any: when
    /// the shard next has work without new writes.
    async fn next_due(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StorageError>;

    /// Row counts by status, for one shard or all.
    async fn counts(&self, shard: Option<ShardIndex>) -> Result<InboxCounts, StorageError>;

    /// Every shard holding a row, by what its rows wait for at `now` (see [`ShardDepth`]),
    /// sorted by shard; for operators and the depth gauges. Reads every row's status and
    /// times (an index-only scan where the backend has one), so call it every few seconds,
    /// not per stage.
    async fn depths(&self, now: DateTime<Utc>) -> Result<Vec<ShardDepth>, StorageError>;

    /// Every entity kind with a pending row (not delivered), by what its rows wait for at
    /// `now` (see [`KindDepth`]), sorted by kind; for operators. Reads every pending row's
    /// kind, status and times, so call it every few seconds, not per stage.
    async fn kind_depths(&self, now: DateTime<Utc>) -> Result<Vec<KindDepth>, StorageError>;

    /// The shards holding a row that is not delivered nor blocked and whose TTL has passed
    /// at `now` (`expires_at <= now`), due or not: where a TTL sweep has work. Sorted, each
    /// once. Costs O(expired rows), not O(Inbox).
    async fn expired_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError>;

    /// The shards (sorted, each once) holding a delivered row or a command outcome record
    /// whose `keep_until` is at or before `now`: where a purge has work although no message
    /// may arrive to start a stage.
    async fn purge_due_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError>;

    /// Up to `limit` such expired rows of `shard`, due or not, in `seq` order.
    async fn read_expired(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<InboxMessage>, StorageError>;
}

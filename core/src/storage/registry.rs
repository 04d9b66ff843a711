//! The lock table (ShardedWorkRegistry): who serves which shard, until when, under which epoch.

use crate::model::error::StorageError;
use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, WorkerId};
use crate::model::kind_role::RegisteredKind;
use crate::model::strategy::StrategyRecord;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// A worker's right to serve a shard until `lease_until`, fenced by `epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The shard.
    pub shard: ShardIndex,
    /// The node holding it.
    pub node_id: NodeId,
    /// The worker holding it.
    pub worker_id: WorkerId,
    /// Fencing token, +1 at every pick-up.
    pub epoch: LeaseEpoch,
    /// When it was picked up.
    pub picked_at: DateTime<Utc>,
    /// When it expires unless renewed.
    pub lease_until: DateTime<Utc>,
    /// Whether the pick-up took over a lease that had expired without a release (its holder
    /// crashed or stalled), rather than a free shard.
    pub taken_over: bool,
}

/// One row of the lock table, as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSession {
    /// The shard.
    pub shard: ShardIndex,
    /// The last or current owner, if any.
    pub node_id: Option<NodeId>,
    /// The last or current owner's worker.
    pub worker_id: Option<WorkerId>,
    /// The last epoch handed out.
    pub epoch: LeaseEpoch,
    /// When it was last picked up.
    pub picked_at: Option<DateTime<Utc>>,
    /// Held until then; free after (or when unset).
    pub lease_until: Option<DateTime<Utc>>,
}

/// A running node, as the membership sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The node.
    pub node_id: NodeId,
    /// Its first beat since it (re)joined.
    pub started_at: DateTime<Utc>,
    /// Its last beat.
    pub beat_at: DateTime<Utc>,
    /// A member until then, unless it beats again.
    pub alive_until: DateTime<Utc>,
    /// The kinds it has registered, as of its last beat (empty for a node that registers
    /// none, such as a tool).
    pub kinds: Vec<RegisteredKind>,
}

/// The Inbox's shard layout as recorded in the database (see `cluster::reshard`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardLayout {
    /// The recorded shard count, if a node recorded one.
    pub shard_count: Option<u32>,
    /// A re-sharding announced by an operator and not finished: nodes hand their shards back
    /// and pick none up until it ends or this time passes (the operator's process died).
    pub resharding: Option<ReshardAnnouncement>,
}

/// A re-sharding in progress, as [`WorkRegistry::announce_reshard`] recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReshardAnnouncement {
    /// Who runs it (the operator process's holder id in the lock table).
    pub by: NodeId,
    /// The shard count it moves to.
    pub to: u32,
    /// It counts as abandoned after this time unless announced again.
    pub until: DateTime<Utc>,
}

/// Where a database stands in a storage over several (`crate::databases::Databases`):
/// database `index` of `of`, recorded in it when a node first opens the set, and checked at
/// every start after. A database used alone records none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatabasePlace {
    /// Its position in the list of databases (0: the home database).
    pub index: u32,
    /// How many databases the set has.
    pub of: u32,
}

impl DatabasePlace {
    /// The setting's text: `index/of`.
    pub fn to_setting(self) -> String {
        format!("{}/{}", self.index, self.of)
    }

    /// The place a setting's text records; [`StorageError::Corrupt`] if it is not `index/of`
    /// with `index < of`.
    pub fn from_setting(text: &str) -> Result<Self, StorageError> {
        let place = text.split_once('/').and_then(|(i, n)| {
            Some(DatabasePlace {
                index: i.trim().parse().ok()?,
                of: n.trim().parse().ok()?,
            })
        });
        place.filter(|p| p.index < p.of).ok_or_else(|| {
            StorageError::Corrupt(format!(
                "the database_place setting is `{text}`, not `index/of` with index below of"
            ))
        })
    }
}

/// The shard of a target (kind, id) in a layout.
pub type Route = Arc<dyn Fn(&str, &str) -> ShardIndex + Send + Sync>;

/// The switch of a re-sharding: everything [`WorkRegistry::reshard`] does in one transaction.
pub struct ReshardSwitch {
    /// The count the Inbox has now; the switch is refused if another is recorded.
    pub from: u32,
    /// The count it moves to.
    pub to: u32,
    /// The lease of every shard `0..from`, held by the re-sharding operator; the switch is
    /// refused if one of them moved (nothing is written).
    pub leases: Vec<Lease>,
    /// The shard of a target (kind, id) among `to` shards: the registry's strategy.
    pub route: Route,
}

impl std::fmt::Debug for ReshardSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReshardSwitch")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("leases", &self.leases.len())
            .finish()
    }
}

/// What a switch moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReshardMoves {
    /// Inbox rows (every status) that were looked at.
    pub inbox_rows: u64,
    /// Inbox rows whose shard changed.
    pub inbox_moved: u64,
    /// Dead letters and kept command outcomes whose recorded shard changed.
    pub records_moved: u64,
    /// Running catch-up jobs whose affected shards were computed again.
    pub catch_ups: u64,
}

/// The lock table.
#[async_trait]
pub trait WorkRegistry: Send + Sync + 'static {
    /// Takes the lease of `shard` if it is free or expired at `now`, in one atomic
    /// compare-and-set, with a new epoch. `None` if someone else holds it. The lease says
    /// whether it was taken over from an expired holder ([`Lease::taken_over`]).
    async fn pick_up(
        &self,
        shard: ShardIndex,
        node_id: &NodeId,
        worker_id: WorkerId,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<Lease>, StorageError>;

    /// Extends a held lease to `lease_until`; [`StorageError::LeaseLost`] if the epoch moved.
    async fn renew(&self, lease: &Lease, lease_until: DateTime<Utc>)
        -> Result<Lease, StorageError>;

    /// Frees the shard if `lease` still holds it (a no-op otherwise).
    async fn release(&self, lease: &Lease) -> Result<(), StorageError>;

    /// All rows of the lock table.
    async fn sessions(&self) -> Result<Vec<ShardSession>, StorageError>;

    /// Records `shard_count` as the Inbox's shard count if none is recorded yet, atomically,
    /// and returns the recorded count — the one every node must be configured with (a node
    /// with another count would split one target's messages over two shards).
    async fn claim_shard_count(&self, shard_count: u32) -> Result<u32, StorageError>;

    /// The recorded shard count, if a node recorded one ([`Self::claim_shard_count`]);
    /// records nothing. For tools that address shards without a node's configuration (the
    /// `shardbox` command line).
    async fn recorded_shard_count(&self) -> Result<Option<u32>, StorageError>;

    /// Records how the application places targets in shards (its strategy's
    /// [`StrategyRecord`]), replacing any earlier record, and returns the earlier one. Every
    /// node records its strategy when it is built, as it claims the shard count; tools that
    /// place rows without the application read it back ([`Self::recorded_shard_strategy`]).
    async fn record_shard_strategy(
        &self,
        record: &StrategyRecord,
    ) -> Result<Option<StrategyRecord>, StorageError>;

    /// The recorded shard strategy, if a node recorded one; records nothing.
    async fn recorded_shard_strategy(&self) -> Result<Option<StrategyRecord>, StorageError>;

    /// Records that this database is `place` in a storage over several, unless a place is
    /// recorded already; returns the recorded one (a storage over several databases compares
    /// it with its own list, so that every node lists the databases in one order).
    async fn claim_database_place(
        &self,
        place: DatabasePlace,
    ) -> Result<DatabasePlace, StorageError>;

    /// The recorded place of this database in a storage over several, if any: the operator
    /// actions refuse a catch-up on one database of a set (it would replay only its events).
    async fn recorded_database_place(&self) -> Result<Option<DatabasePlace>, StorageError>;

    /// The recorded shard count and the re-sharding in progress, if any: read by every node's
    /// lease watch each poll round.
    async fn layout(&self) -> Result<ShardLayout, StorageError>;

    /// Records that `announcement.by` re-shards the Inbox (nodes then hand their shards back
    /// and pick none up), or renews its announcement. Returns the announcement in force: the
    /// caller's, or another operator's that has not run out (the caller must then not go on).
    async fn announce_reshard(
        &self,
        announcement: &ReshardAnnouncement,
        now: DateTime<Utc>,
    ) -> Result<ReshardAnnouncement, StorageError>;

    /// Withdraws `by`'s announcement (the re-sharding gave up); a no-op if it is not in force.
    async fn withdraw_reshard(&self, by: &NodeId) -> Result<(), StorageError>;

    /// Switches the Inbox from `switch.from` to `switch.to` shards in one transaction that
    /// writes wait for: checks the recorded count and that `switch.leases` still hold every
    /// shard, gives every inbox row, dead letter and kept outcome the shard of its target
    /// among `to`, computes the affected shards of running catch-ups again, frees the leases,
    /// drops the lock-table rows of shards `>= to`, gives every row of the new layout, kept or
    /// new, an epoch above every epoch handed out (so no old lease can match one, and no shard
    /// hands an epoch out twice, also one that a later re-sharding makes again), records `to`
    /// and ends the announcement.
    /// Refused with [`StorageError::ShardCountChanged`] or [`StorageError::LeaseLost`],
    /// writing nothing.
    async fn reshard(&self, switch: ReshardSwitch) -> Result<ReshardMoves, StorageError>;

    /// A membership beat of `node_id` at `now`: it is a member until `alive_until`, with the
    /// registered `kinds`. The first beat after it was gone (or left) sets `started_at`. Also
    /// forgets nodes gone for a day.
    async fn beat(
        &self,
        node_id: &NodeId,
        now: DateTime<Utc>,
        alive_until: DateTime<Utc>,
        kinds: &[RegisteredKind],
    ) -> Result<(), StorageError>;

    /// `node_id` leaves the membership at once (a graceful shutdown).
    async fn leave(&self, node_id: &NodeId) -> Result<(), StorageError>;

    /// The members at `now` (whose `alive_until` is later), sorted by node id.
    async fn members(&self, now: DateTime<Utc>) -> Result<Vec<Member>, StorageError>;

    /// The storage's own clock, which every node's lease and membership times are read off
    /// (see `StorageClock`): the server's `clock_timestamp()` on PostgreSQL, the clock of the
    /// machine that holds the file on SQLite. `None` for a store with no clock of its own (the
    /// memory backend lives in its node's process, whose clock is its clock).
    async fn clock_now(&self) -> Result<Option<DateTime<Utc>>, StorageError> {
        Ok(None)
    }
}

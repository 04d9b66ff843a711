//! The lock table (ShardedWorkRegistry): who serves which shard, until when, under which epoch.

use crate::model::error::StorageError;
use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, WorkerId};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

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

    /// A heartbeat of `node_id` at `now`: it is a member until `alive_until`. The first beat
    /// after it was gone (or left) sets `started_at`. Also forgets nodes gone for a day.
    async fn beat(
        &self,
        node_id: &NodeId,
        now: DateTime<Utc>,
        alive_until: DateTime<Utc>,
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

//! The status view: the one screen an operator reads first (`shardbox status`, the HTTP
//! API's `/api/status`, the dashboard's top half).
//!
//! ```text
//!  WorkRegistry::members    ─► nodes: the membership table (`shardbox_nodes`), last heartbeat
//!  WorkRegistry::sessions   ─► nodes: leases held (also nodes that hold one but no longer beat)
//!                           ─► shards: owner, epoch, lease
//!  InboxStore::depths(now)  ─► depth per shard by wait, lag of the oldest due row
//!  InboxStore::kind_depths  ─► by kind: due, waiting, blocked, lag (by_kind)
//!  DeadLetterStore          ─► dead-letter count (by kind too)
//!  CatchUpStore             ─► running catch-ups with their progress
//!  all of it                ─► live nodes, leases held, what needs attention (attention)
//! ```
//!
//! Reading only: how it is printed (a text table, JSON, HTML) is up to the caller.

use crate::views::attention::{self, Attention};
use crate::views::by_kind::{self, KindCounts};
use crate::views::catch_ups::CatchUpView;
use chrono::{DateTime, Utc};
use serde::Serialize;
use shardbox_core::storage::{DeadLetterFilter, Member, ShardDepth, ShardSession, StorageReads};
use shardbox_core::{ShardIndex, StorageError};
use std::collections::BTreeMap;

/// Where the node list comes from, said in every output.
pub const NODES_SOURCE: &str = "the membership table's live nodes with their last heartbeat, and any other node that holds or last held a shard lease";

/// Everything the status view shows.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The database, as the storage describes it (no secrets).
    pub database: String,
    /// When it was read.
    pub now: DateTime<Utc>,
    /// Where the node list comes from.
    pub nodes_source: &'static str,
    /// The live members, and any other node that holds or held a lease.
    pub nodes: Vec<NodeView>,
    /// How many of them are live members (what `shardbox status` calls live nodes).
    pub live_nodes: usize,
    /// Shards whose lease a node holds now.
    pub leases_held: usize,
    /// Every shard with a lease row or a row in the Inbox, in shard order.
    pub shards: Vec<ShardView>,
    /// The depths of all shards added up (the lag is the largest).
    pub totals: DepthView,
    /// Dead letters stored.
    pub dead_letters: u64,
    /// Targets stopped by a blocked message.
    pub blocked_targets: u64,
    /// Pending rows, lag, blocked targets and dead letters by entity kind (see
    /// [`by_kind`](crate::views::by_kind)).
    pub by_kind: Vec<KindCounts>,
    /// Catch-up jobs not completed.
    pub running_catch_ups: Vec<CatchUpView>,
    /// Read models' versions (blue/green rebuilds): served, being built, previous.
    pub read_models: Vec<shardbox_core::storage::ReadModelVersion>,
    /// The shard count recorded in the database (none before a node first ran).
    pub shard_count: Option<u32>,
    /// A re-sharding in progress: to how many shards, by whom, announced until when.
    pub resharding: Option<ReshardView>,
    /// What needs attention, most urgent first (empty: nothing does); see
    /// [`attention`](crate::views::attention).
    pub attention: Vec<Attention>,
}

/// A re-sharding in progress (see docs/clustering.md).
#[derive(Debug, Clone, Serialize)]
pub struct ReshardView {
    /// The shard count it moves to.
    pub to: u32,
    /// The operator running it (its holder id in the lock table).
    pub by: String,
    /// Its announcement runs out then unless renewed (the operator died).
    pub until: DateTime<Utc>,
}

/// One node: its membership (heartbeats) and its leases.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    /// Its id.
    pub node: String,
    /// In the membership table and alive (it beat within its lease duration).
    pub member: bool,
    /// Its first beat since it (re)joined, if a member.
    pub started_at: Option<DateTime<Utc>>,
    /// Its last beat, if a member.
    pub last_heartbeat: Option<DateTime<Utc>>,
    /// A member until then unless it beats again, if a member.
    pub alive_until: Option<DateTime<Utc>>,
    /// Leases it holds now (not expired).
    pub leases_held: usize,
    /// Its latest pick-up of a shard.
    pub last_picked_at: Option<DateTime<Utc>>,
    /// The latest end of a lease it held.
    pub last_lease_until: Option<DateTime<Utc>>,
}

/// One shard: its lease and its depth.
#[derive(Debug, Clone, Serialize)]
pub struct ShardView {
    /// The shard.
    pub shard: u32,
    /// The node holding or last holding its lease.
    pub owner: Option<String>,
    /// That node's worker.
    pub worker: Option<u32>,
    /// The lease's fencing epoch (0 if never leased).
    pub epoch: i64,
    /// Whether a node holds the lease now.
    pub held: bool,
    /// When the lease was picked up.
    pub picked_at: Option<DateTime<Utc>>,
    /// When the lease ends or ended.
    pub lease_until: Option<DateTime<Utc>>,
    /// Milliseconds since the pick-up.
    pub lease_age_ms: Option<i64>,
    /// Its rows by what they wait for.
    #[serde(flatten)]
    pub depth: DepthView,
}

/// A depth, with its lag in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DepthView {
    /// Due now.
    pub due: u64,
    /// Waiting for a delay.
    pub delayed: u64,
    /// Waiting for a retry.
    pub retrying: u64,
    /// Parked behind a catch-up or a blocked message.
    pub parked: u64,
    /// Replayed history waiting for a catch-up.
    pub replay: u64,
    /// Blocked, waiting for an operator.
    pub blocked: u64,
    /// Delivered, kept for deduplication.
    pub delivered: u64,
    /// When the oldest due row became due.
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// Milliseconds since then (0 when nothing is due).
    pub lag_ms: i64,
}

impl DepthView {
    /// Rows waiting for anything but deduplication (delivered rows are kept, not pending).
    pub fn pending(&self) -> u64 {
        self.due + self.delayed + self.retrying + self.parked + self.replay + self.blocked
    }

    /// The view of `d` at `now`.
    pub fn of(d: &ShardDepth, now: DateTime<Utc>) -> Self {
        DepthView {
            due: d.due,
            delayed: d.delayed,
            retrying: d.retrying,
            parked: d.parked,
            replay: d.replay,
            blocked: d.blocked,
            delivered: d.delivered,
            oldest_due_at: d.oldest_due_at,
            lag_ms: d.lag(now).num_milliseconds(),
        }
    }
}

/// Reads the status of `storage` at `now`.
pub async fn read(storage: &StorageReads, now: DateTime<Utc>) -> Result<Status, StorageError> {
    read_with(storage, now, true).await
}

/// Reads the status as [`read`] does, but without the breakdown by kind (`by_kind` empty,
/// the attention list unchanged): what the Prometheus gauges render, so that a scrape costs
/// one scan of the pending rows, not two.
pub async fn read_for_gauges(
    storage: &StorageReads,
    now: DateTime<Utc>,
) -> Result<Status, StorageError> {
    read_with(storage, now, false).await
}

async fn read_with(
    storage: &StorageReads,
    now: DateTime<Utc>,
    with_kinds: bool,
) -> Result<Status, StorageError> {
    let members = storage.members(now).await?;
    let sessions = storage.sessions().await?;
    let depths = storage.depths(now).await?;
    let dead_letters = storage.count_dead_letters(&DeadLetterFilter::all()).await?;
    let jobs = storage.running_catch_ups().await?;
    let read_models = storage.read_model_versions().await?;
    let layout = storage.layout().await?;
    let member_kinds: Vec<String> = members
        .iter()
        .flat_map(|m| m.kinds.iter().map(|k| k.kind.clone()))
        .collect();
    let by_kind = if with_kinds {
        by_kind::read(storage, now, member_kinds, dead_letters).await?
    } else {
        Vec::new()
    };

    let (shards, totals) = shard_views(&sessions, &depths, now);
    let nodes = node_views(&members, &sessions, now);
    let resharding = layout
        .resharding
        .filter(|a| a.until > now)
        .map(|a| ReshardView {
            to: a.to,
            by: a.by.0,
            until: a.until,
        });
    let totals = DepthView::of(&totals, now);
    let live_nodes = attention::live_nodes(&nodes);
    let leases_held = attention::leases_held(&shards);
    let attention = attention::of(attention::Facts {
        totals: &totals,
        live_nodes,
        leases_held,
        dead_letters,
        blocked_targets: totals.blocked,
        resharding: resharding.as_ref().map(|r| (r.to, r.by.as_str())),
    });
    Ok(Status {
        database: storage.describe(),
        now,
        nodes_source: NODES_SOURCE,
        nodes,
        live_nodes,
        leases_held,
        shards,
        blocked_targets: totals.blocked,
        totals,
        dead_letters,
        by_kind,
        running_catch_ups: jobs.iter().map(|j| CatchUpView::of(j, now)).collect(),
        read_models,
        shard_count: layout.shard_count,
        resharding,
        attention,
    })
}

/// Whether `s` is held at `now`: a node holds it and its lease has not run out.
fn held_at(s: &ShardSession, now: DateTime<Utc>) -> bool {
    s.node_id.is_some() && s.lease_until.is_some_and(|u| u > now)
}

/// One view per shard that has a session or rows, in shard order, and the depths summed over
/// every shard.
fn shard_views(
    sessions: &[ShardSession],
    depths: &[ShardDepth],
    now: DateTime<Utc>,
) -> (Vec<ShardView>, ShardDepth) {
    let mut by_shard: BTreeMap<ShardIndex, (Option<&ShardSession>, ShardDepth)> = BTreeMap::new();
    for s in sessions {
        by_shard.insert(s.shard, (Some(s), ShardDepth::empty(s.shard)));
    }
    let mut totals = ShardDepth::empty(ShardIndex(0));
    for d in depths {
        totals.absorb(d);
        by_shard.entry(d.shard).or_insert((None, *d)).1 = *d;
    }
    let held = |s: &ShardSession| held_at(s, now);
    let shards: Vec<ShardView> = by_shard
        .values()
        .map(|(session, depth)| ShardView {
            shard: depth.shard.0,
            owner: session
                .and_then(|s| s.node_id.as_ref())
                .map(|n| n.0.clone()),
            worker: session.and_then(|s| s.worker_id).map(|w| w.0),
            epoch: session.map_or(0, |s| s.epoch.0),
            held: session.is_some_and(held),
            picked_at: session.and_then(|s| s.picked_at),
            lease_until: session.and_then(|s| s.lease_until),
            lease_age_ms: session
                .and_then(|s| s.picked_at)
                .map(|p| (now - p).num_milliseconds()),
            depth: DepthView::of(depth, now),
        })
        .collect();
    (shards, totals)
}

/// One view per node that is a member or holds a session, in node order: its membership
/// times and the leases it holds at `now`.
fn node_views(members: &[Member], sessions: &[ShardSession], now: DateTime<Utc>) -> Vec<NodeView> {
    let mut nodes: BTreeMap<&str, NodeView> = BTreeMap::new();
    let node_view = |node: &str, member: Option<&Member>| NodeView {
        node: node.to_owned(),
        member: member.is_some(),
        started_at: member.map(|m| m.started_at),
        last_heartbeat: member.map(|m| m.beat_at),
        alive_until: member.map(|m| m.alive_until),
        leases_held: 0,
        last_picked_at: None,
        last_lease_until: None,
    };
    for m in members {
        nodes.insert(&m.node_id.0, node_view(&m.node_id.0, Some(m)));
    }
    for s in sessions {
        let Some(node) = &s.node_id else { continue };
        let view = nodes
            .entry(&node.0)
            .or_insert_with(|| node_view(&node.0, None));
        view.leases_held += usize::from(held_at(s, now));
        view.last_picked_at = view.last_picked_at.max(s.picked_at);
        view.last_lease_until = view.last_lease_until.max(s.lease_until);
    }
    nodes.into_values().collect()
}

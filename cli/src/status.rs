//! `shardbox status`: the one screen an operator reads first.
//!
//! ```text
//!  WorkRegistry::members    ─► nodes: the membership table (`shardbox_nodes`), last heartbeat
//!  WorkRegistry::sessions   ─► nodes: leases held (also nodes that hold one but no longer beat)
//!                           ─► shards: owner, epoch, lease
//!  InboxStore::depths(now)  ─► depth per shard by wait, lag of the oldest due row
//!  DeadLetterStore          ─► dead-letter count
//!  CatchUpStore             ─► running catch-ups with their progress
//! ```

use crate::error::CliError;
use crate::table::Table;
use crate::when::human;
use chrono::{DateTime, Utc};
use serde::Serialize;
use shardbox_core::storage::{DeadLetterFilter, Member, ShardDepth, ShardSession};
use shardbox_core::{CatchUpProgress, ShardIndex, Storage};
use std::collections::BTreeMap;

/// Where the node list comes from, said in both outputs.
const NODES_SOURCE: &str = "the membership table's live nodes with their last heartbeat, and any other node that holds or last held a shard lease";

/// Everything `status` shows.
#[derive(Debug, Serialize)]
pub struct Status {
    database: String,
    now: DateTime<Utc>,
    nodes_source: &'static str,
    nodes: Vec<NodeView>,
    shards: Vec<ShardView>,
    totals: DepthView,
    dead_letters: u64,
    blocked_targets: u64,
    running_catch_ups: Vec<CatchUpView>,
}

/// One node: its membership (heartbeats) and its leases.
#[derive(Debug, Serialize)]
struct NodeView {
    node: String,
    /// In the membership table and alive (it beat within its lease duration).
    member: bool,
    started_at: Option<DateTime<Utc>>,
    last_heartbeat: Option<DateTime<Utc>>,
    alive_until: Option<DateTime<Utc>>,
    leases_held: usize,
    last_picked_at: Option<DateTime<Utc>>,
    last_lease_until: Option<DateTime<Utc>>,
}

/// One shard: its lease and its depth.
#[derive(Debug, Serialize)]
struct ShardView {
    shard: u32,
    owner: Option<String>,
    worker: Option<u32>,
    epoch: i64,
    held: bool,
    picked_at: Option<DateTime<Utc>>,
    lease_until: Option<DateTime<Utc>>,
    lease_age_ms: Option<i64>,
    #[serde(flatten)]
    depth: DepthView,
}

/// A depth, with its lag in milliseconds.
#[derive(Debug, Serialize)]
struct DepthView {
    due: u64,
    delayed: u64,
    retrying: u64,
    parked: u64,
    replay: u64,
    blocked: u64,
    delivered: u64,
    oldest_due_at: Option<DateTime<Utc>>,
    lag_ms: i64,
}

impl DepthView {
    fn of(d: &ShardDepth, now: DateTime<Utc>) -> Self {
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

/// A running catch-up.
#[derive(Debug, Serialize)]
struct CatchUpView {
    id: i64,
    projection_kind: String,
    status: &'static str,
    replayed: i64,
    total_estimate: i64,
    rate: f64,
    eta_s: Option<f64>,
}

/// Reads the status of `storage` at `now`.
pub async fn read(storage: &dyn Storage, now: DateTime<Utc>) -> Result<Status, CliError> {
    let members = storage.members(now).await?;
    let sessions = storage.sessions().await?;
    let depths = storage.depths(now).await?;
    let dead_letters = storage.count_dead_letters(&DeadLetterFilter::all()).await?;
    let jobs = storage.running_catch_ups().await?;

    let mut by_shard: BTreeMap<ShardIndex, (Option<&ShardSession>, ShardDepth)> = BTreeMap::new();
    for s in &sessions {
        by_shard.insert(s.shard, (Some(s), ShardDepth::empty(s.shard)));
    }
    let mut totals = ShardDepth::empty(ShardIndex(0));
    for d in &depths {
        totals.absorb(d);
        by_shard.entry(d.shard).or_insert((None, *d)).1 = *d;
    }
    let held = |s: &ShardSession| s.node_id.is_some() && s.lease_until.is_some_and(|u| u > now);
    let shards = by_shard
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
    for m in &members {
        nodes.insert(&m.node_id.0, node_view(&m.node_id.0, Some(m)));
    }
    for s in &sessions {
        let Some(node) = &s.node_id else { continue };
        let view = nodes
            .entry(&node.0)
            .or_insert_with(|| node_view(&node.0, None));
        view.leases_held += usize::from(held(s));
        view.last_picked_at = view.last_picked_at.max(s.picked_at);
        view.last_lease_until = view.last_lease_until.max(s.lease_until);
    }

    let running_catch_ups = jobs
        .iter()
        .map(|job| {
            let p = CatchUpProgress::of(job, now);
            CatchUpView {
                id: job.id,
                projection_kind: job.spec.projection_kind.clone(),
                status: job.status.as_str(),
                replayed: p.replayed,
                total_estimate: p.total_estimate,
                rate: p.rate,
                eta_s: p.eta.map(|d| d.as_secs_f64()),
            }
        })
        .collect();
    Ok(Status {
        database: storage.describe(),
        now,
        nodes_source: NODES_SOURCE,
        nodes: nodes.into_values().collect(),
        shards,
        blocked_targets: totals.blocked,
        totals: DepthView::of(&totals, now),
        dead_letters,
        running_catch_ups,
    })
}

/// An optional time as an age before `now` ("12.0s ago"), or "-".
fn ago(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    t.map_or_else(|| "-".into(), |t| format!("{} ago", human(now - t)))
}

/// The lag column: "-" when nothing is due.
fn lag(d: &DepthView) -> String {
    if d.due == 0 {
        "-".into()
    } else {
        human(chrono::TimeDelta::milliseconds(d.lag_ms))
    }
}

impl Status {
    /// The text screen.
    pub fn render(&self) -> String {
        let now = self.now;
        let mut out = format!(
            "shardbox status of {} at {}\n\n",
            self.database,
            now.format("%Y-%m-%d %H:%M:%S UTC")
        );
        out.push_str(&format!("nodes ({})\n", self.nodes_source));
        if self.nodes.is_empty() {
            out.push_str("  none: no node is alive and no shard was ever leased\n");
        } else {
            let mut t = Table::new([
                "node",
                "last heartbeat",
                "member since",
                "leases held",
                "last pick-up",
                "last lease end",
            ]);
            for n in &self.nodes {
                let heartbeat = if n.member {
                    ago(n.last_heartbeat, now)
                } else {
                    "- (not a member)".into()
                };
                t.row(vec![
                    n.node.clone(),
                    heartbeat,
                    ago(n.started_at, now),
                    n.leases_held.to_string(),
                    ago(n.last_picked_at, now),
                    lease_end(n.last_lease_until, now),
                ]);
            }
            out.push_str(&t.render());
        }
        out.push_str(
            "\nshards (depth by what the rows wait for; lag = age of the oldest due row)\n",
        );
        let mut t = Table::new([
            "shard",
            "owner",
            "epoch",
            "lease",
            "picked",
            "due",
            "delayed",
            "retrying",
            "parked",
            "replay",
            "blocked",
            "delivered",
            "lag",
        ]);
        let depth_cells = |d: &DepthView| {
            vec![
                d.due.to_string(),
                d.delayed.to_string(),
                d.retrying.to_string(),
                d.parked.to_string(),
                d.replay.to_string(),
                d.blocked.to_string(),
                d.delivered.to_string(),
                lag(d),
            ]
        };
        for s in &self.shards {
            let owner = match (&s.owner, s.worker) {
                (Some(n), Some(w)) => format!("{n}/w{w}"),
                (Some(n), None) => n.clone(),
                _ => "-".into(),
            };
            let lease = if s.held {
                format!("held, {}", lease_end(s.lease_until, now))
            } else {
                "free".into()
            };
            let mut row = vec![
                s.shard.to_string(),
                owner,
                s.epoch.to_string(),
                lease,
                ago(s.picked_at, now),
            ];
            row.extend(depth_cells(&s.depth));
            t.row(row);
        }
        let mut total = vec![
            "all".into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ];
        total.extend(depth_cells(&self.totals));
        t.row(total);
        out.push_str(&t.render());
        out.push_str(&format!(
            "\ndead letters: {}   blocked targets: {}   running catch-ups: {}\n",
            self.dead_letters,
            self.blocked_targets,
            self.running_catch_ups.len()
        ));
        for c in &self.running_catch_ups {
            out.push_str(&format!(
                "  catch-up {} of {}: {} — {} of ~{} replayed, {:.0}/s{}\n",
                c.id,
                c.projection_kind,
                c.status,
                c.replayed,
                c.total_estimate,
                c.rate,
                c.eta_s
                    .map(|s| format!(
                        ", ETA {}",
                        human(chrono::TimeDelta::milliseconds((s * 1000.0) as i64))
                    ))
                    .unwrap_or_default()
            ));
        }
        out
    }
}

/// When a lease ends or ended, relative to `now`.
fn lease_end(until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match until {
        None => "-".into(),
        Some(u) if u > now => format!("ends in {}", human(u - now)),
        Some(u) => format!("ended {} ago", human(now - u)),
    }
}

//! Node clock skew and leases, end to end with node *processes*: three nodes share one
//! PostgreSQL schema (or one SQLite file) under steady traffic; one node's clock runs 30 s
//! ahead, one 30 s behind, one is right. Leases are judged by the database's clock, so:
//!
//! - no lease is ever taken over (`lease_takeovers` is 0 on every node: a take-over here
//!   could only be a live lease judged expired by a wrong clock) and no node loses one
//!   (`lease_losses` is 0: nobody took a lease its holder still used);
//! - no two nodes ever committed under one (shard, epoch) (the commit log every stage writes
//!   inside its own fenced commit);
//! - every command is applied once, in send order.
//!
//! Before leases were judged by the database's clock, the node 30 s ahead took every lease
//! the others held (they looked expired to it), and the node 30 s behind wrote leases that
//! had ended 28 s before they were written.
//!
//! The nodes are this test binary run again with `SHARDBOX_SKEW_NODE` set (see
//! `skew_node_entry`); `SHARDBOX_SKEW_OFFSET_MS` sets the node's clock offset — the knob
//! exists in this test binary only, as a [`Clock`] that reads the system clock plus the
//! offset.

mod common;

use chrono::{DateTime, Utc};
use common::cluster::{field, shared_epochs, CommitLog, NodeProcess, Store};
use common::Tally;
use shardbox::core::storage::EntityKey;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Clock, NodeId, ShardboxBuilder};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: u32 = 12;
/// Targets per shard: every shard has traffic.
const PER_SHARD: usize = 2;
const TARGETS: usize = SHARDS as usize * PER_SHARD;
const LEASE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(250);
/// A round of one command per target every this often.
const ROUND_EVERY: Duration = Duration::from_millis(150);
/// How long the traffic runs with all three nodes up.
const TRAFFIC: Duration = Duration::from_secs(10);
/// The nodes and their clock offsets (ms).
const NODES: [(&str, i64); 3] = [
    ("node-ahead", 30_000),
    ("node-behind", -30_000),
    ("node-right", 0),
];
const ENTRY: &str = "skew_node_entry";

/// The system clock plus a fixed offset: a node whose clock is wrong.
struct SkewedClock {
    offset: chrono::Duration,
}

impl Clock for SkewedClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }
}

fn builder(storage: Arc<dyn Storage>) -> ShardboxBuilder {
    common::cluster::tally_node(storage, SHARDS, LEASE, POLL, 4)
}

/// A node process's main: serves the store until stdin closes, with its clock off by
/// `SHARDBOX_SKEW_OFFSET_MS`. Does nothing in a normal test run.
#[test]
fn skew_node_entry() {
    let Ok(node) = std::env::var("SHARDBOX_SKEW_NODE") else {
        return;
    };
    let store =
        Store::from_spec(&std::env::var("SHARDBOX_SKEW_STORE").expect("SHARDBOX_SKEW_STORE"));
    let offset: i64 = std::env::var("SHARDBOX_SKEW_OFFSET_MS")
        .expect("SHARDBOX_SKEW_OFFSET_MS")
        .parse()
        .expect("SHARDBOX_SKEW_OFFSET_MS: milliseconds");
    common::cluster::init_node_log();
    common::cluster::runtime().block_on(async {
        let clock = Arc::new(SkewedClock {
            offset: chrono::Duration::milliseconds(offset),
        });
        let sb_storage = store.open(6).await;
        let sb = builder(sb_storage.clone())
            .node_id(NodeId(node.clone()))
            .clock(clock.clone())
            .stations(|p| {
                p.push(CommitLog);
            })
            .build()
            .await
            .expect("build the node");
        // The skew is real: this node's clock against the store's.
        let store_now = sb_storage
            .clock_now()
            .await
            .expect("clock_now")
            .expect("SQL stores have a clock");
        let skew = (clock.now() - store_now).num_milliseconds();
        common::cluster::serve_until_stopped(&sb, &node, &format!(" skew_ms={skew}")).await;
    });
}

/// [`PER_SHARD`] target ids in every shard.
fn target_ids(sb: &Shardbox) -> Vec<String> {
    common::cluster::ids_per_shard(sb, "tally", "skew", SHARDS, PER_SHARD)
}

async fn skewed_nodes_share_leases(store: Store) {
    let storage = store.open(6).await;
    let sender = builder(storage.clone())
        .node_id(NodeId("sender".into()))
        .build()
        .await
        .expect("build the sender");

    let mut nodes: Vec<NodeProcess> = NODES
        .iter()
        .map(|(name, offset)| {
            let env = [
                ("SHARDBOX_SKEW_NODE", (*name).to_owned()),
                ("SHARDBOX_SKEW_STORE", store.spec()),
                ("SHARDBOX_SKEW_OFFSET_MS", offset.to_string()),
            ];
            NodeProcess::spawn(name, ENTRY, &env)
        })
        .collect();
    for (n, (_, offset)) in nodes.iter().zip(NODES) {
        let line = n.ready();
        let skew = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("skew_ms="))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or_else(|| panic!("no skew_ms= in {line:?}"));
        assert!(
            (skew - offset).abs() < 1_000,
            "{line}: the clock is not off by {offset} ms"
        );
    }
    // Every node beats on the store's clock, whatever its own clock says.
    tokio::time::sleep(2 * POLL).await;
    let store_now = storage
        .clock_now()
        .await
        .expect("clock_now")
        .expect("SQL stores have a clock");
    let members = storage.members(store_now).await.expect("members");
    for (name, _) in NODES {
        let member = members.iter().find(|m| m.node_id.0 == name);
        let member = member.unwrap_or_else(|| panic!("{name} is not a member: {members:?}"));
        let off = (member.beat_at - store_now).num_milliseconds().abs();
        assert!(
            off < 1_000,
            "{name} beat {off} ms off the store's clock: {member:?}"
        );
    }

    // Steady traffic: round n sends Record(n) to every target.
    let rounds = common::Rounds::start(vec![sender.clone()], target_ids(&sender), ROUND_EVERY);
    tokio::time::sleep(TRAFFIC).await;
    let sent = rounds.stop().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while storage.counts(None).await.expect("counts").pending() > 0 {
        assert!(Instant::now() < deadline, "the cluster did not drain");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut stopped = Vec::new();
    for n in &mut nodes {
        n.tell("stop");
        let line = n.wait_for("SBX-STOPPED", Duration::from_secs(30));
        let line = line.unwrap_or_else(|| panic!("{} did not stop", n.name));
        eprintln!("{line}");
        assert!(n.stop(Duration::from_secs(30)).is_some_and(|s| s.success()));
        stopped.push(line);
    }

    // Every command applied once, in send order.
    let keys: Vec<EntityKey> = target_ids(&sender)
        .into_iter()
        .map(|id| EntityKey {
            kind: "tally".into(),
            tenant: String::new(),
            id,
        })
        .collect();
    let want: Vec<u64> = (0..sent).collect();
    let states = storage.load_states(&keys).await.expect("states");
    assert_eq!(states.len(), TARGETS);
    for s in &states {
        let tally: Tally = serde_json::from_slice(&s.state).expect("a tally");
        assert_eq!(tally.applied, want, "{}: once each, in order", s.key.id);
    }

    let log = store.commit_log();
    assert_eq!(shared_epochs(&log), vec![], "two owners of one epoch");
    let served: Vec<&str> = NODES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| log.iter().any(|e| e.node == *n))
        .collect();
    eprintln!(
        "cluster_skew: {sent} rounds, {} stages committed; nodes that committed: {served:?}",
        log.len()
    );
    assert_eq!(
        served.len(),
        NODES.len(),
        "every node, skewed or not, served shards: {served:?}"
    );
    for line in &stopped {
        assert_eq!(
            (field(line, "takeovers"), field(line, "losses")),
            (0, 0),
            "a live lease was taken over or lost: {line}"
        );
    }
}

#[test]
fn postgres_nodes_with_skewed_clocks_take_no_live_lease() {
    let Some(url) = common::pg_url("postgres_nodes_with_skewed_clocks_take_no_live_lease") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "skew");
    common::cluster::runtime().block_on(async {
        skewed_nodes_share_leases(Store::Postgres {
            url: url.clone(),
            schema: schema.name.clone(),
        })
        .await;
    });
}

#[test]
fn sqlite_processes_with_skewed_clocks_take_no_live_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shardbox.db");
    common::cluster::runtime().block_on(skewed_nodes_share_leases(Store::Sqlite(path)));
}

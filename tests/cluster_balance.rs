//! Balanced assignment with hand-over, end to end on PostgreSQL with node *processes*: three
//! nodes under steady traffic share 24 shards 8 / 8 / 8 (± 1) within lease + 3 polls of the
//! last one starting, and keep that; a fourth joins and gets its 6 (± 1) the same way; one is
//! killed with SIGKILL and the shards it served are served by the others within lease + poll;
//! the three left share the shards evenly again. Every command is applied once, in order, and
//! no two nodes ever committed under one (shard, epoch).
//!
//! "Holds" is read from the lock table: a shard counts for the node its session names (the
//! holder of a live lease, or the last one — with `lease_linger`, a node's own shard is
//! released between writes and picked up again by the same node). The nodes run with the
//! default `lease_linger`: before the hand-over, a node holding its shards under steady
//! traffic kept a joining node from getting any.
//!
//! The nodes are this test binary run again with `SHARDBOX_BALANCE_NODE` set (see
//! `balance_node_entry`).

mod common;

use common::cluster::{pg_commit_log, shared_epochs, CommitLog, NodeProcess};
use common::Tally;
use shardbox::core::storage::EntityKey;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{NodeId, ShardboxBuilder};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: u32 = 24;
/// Targets per shard: every shard has traffic (ids are picked by their shard).
const PER_SHARD: usize = 2;
const TARGETS: usize = SHARDS as usize * PER_SHARD;
const LEASE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(250);
/// A round of one command per target every this often: each shard is written to every round.
const ROUND_EVERY: Duration = Duration::from_millis(200);
/// How long a balance must hold once reached.
const HOLD: Duration = Duration::from_secs(4);
const ENTRY: &str = "balance_node_entry";

fn builder(storage: Arc<dyn Storage>) -> ShardboxBuilder {
    common::cluster::tally_node(storage, SHARDS, LEASE, POLL, 4)
}

/// A node process's main: serves the schema until stdin closes. Does nothing in a normal
/// test run.
#[test]
fn balance_node_entry() {
    let Ok(node) = std::env::var("SHARDBOX_BALANCE_NODE") else {
        return;
    };
    let url = std::env::var("SHARDBOX_PG_URL").expect("SHARDBOX_PG_URL in a node process");
    let schema = std::env::var("SHARDBOX_BALANCE_SCHEMA").expect("SHARDBOX_BALANCE_SCHEMA");
    common::cluster::init_node_log();
    common::cluster::runtime().block_on(async {
        let options = shardbox::storage::PostgresOptions::default()
            .schema(schema)
            .pool_size(6);
        let storage = shardbox::storage::PostgresStorage::connect_with(url, options)
            .await
            .expect("connect");
        let sb = builder(Arc::new(storage))
            .node_id(NodeId(node.clone()))
            .stations(|p| {
                p.push(CommitLog);
            })
            .build()
            .await
            .expect("build the node");
        common::cluster::serve_until_stopped(&sb, &node, "").await;
    });
}

/// [`PER_SHARD`] target ids in every shard.
fn target_ids(sb: &Shardbox) -> Vec<String> {
    common::cluster::ids_per_shard(sb, "tally", "bal", SHARDS, PER_SHARD)
}

fn spawn_node(name: &str, schema: &str) -> NodeProcess {
    let env = [
        ("SHARDBOX_BALANCE_NODE", name.to_owned()),
        ("SHARDBOX_BALANCE_SCHEMA", schema.to_owned()),
    ];
    let node = NodeProcess::spawn(name, ENTRY, &env);
    node.ready();
    node
}

/// Shards per node, by the node the lock table names for each shard.
async fn holders(storage: &dyn Storage) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for s in storage.sessions().await.expect("sessions") {
        if let Some(node) = s.node_id {
            *count.entry(node.0).or_default() += 1;
        }
    }
    count
}

/// Whether each of `nodes` holds the fair share of the shards ± 1, and nobody else holds any.
fn balanced(count: &BTreeMap<String, usize>, nodes: &[&str]) -> bool {
    let fair = SHARDS as f64 / nodes.len() as f64;
    count.keys().all(|n| nodes.contains(&n.as_str()))
        && nodes.iter().all(|n| {
            let c = count.get(*n).copied().unwrap_or(0) as f64;
            (c - fair).abs() <= 1.0
        })
}

/// Waits until `nodes` share the shards evenly and keep doing so for [`HOLD`]; the time from
/// `from` to the start of that stretch must be at most `bound`. Returns it.
async fn settles(
    storage: &dyn Storage,
    nodes: &[&str],
    from: Instant,
    bound: Duration,
) -> Duration {
    let mut since: Option<Duration> = None;
    loop {
        let count = holders(storage).await;
        let at = from.elapsed();
        if balanced(&count, nodes) {
            let start = *since.get_or_insert(at);
            if at - start >= HOLD {
                eprintln!(
                    "{nodes:?}: balanced {start:?} after the change, held {HOLD:?}: {count:?}"
                );
                return start;
            }
        } else {
            since = None;
            assert!(
                at <= bound,
                "{nodes:?} not balanced (or not for good) {bound:?} after the change: {count:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn nodes_share_the_shards_evenly_and_hand_them_over() {
    let Some(url) = common::pg_url("nodes_share_the_shards_evenly_and_hand_them_over") else {
        return;
    };
    common::cluster::runtime().block_on(balance(url));
}

async fn balance(url: String) {
    let schema = common::PgSchema::new(&url, "balance");
    let storage: Arc<dyn Storage> = Arc::new(schema.connect(4).await);
    let sender = builder(storage.clone())
        .node_id(NodeId("sender".into()))
        .build()
        .await
        .expect("build the sender");

    // Steady traffic: round n sends Record(n) to every target, every ROUND_EVERY.
    let rounds = common::Rounds::start(vec![sender.clone()], target_ids(&sender), ROUND_EVERY);

    let settle = LEASE + 3 * POLL;
    let mut nodes: Vec<NodeProcess> = ["node-a", "node-b", "node-c"]
        .iter()
        .map(|n| spawn_node(n, &schema.name))
        .collect();
    let three = settles(
        storage.as_ref(),
        &["node-a", "node-b", "node-c"],
        Instant::now(),
        settle,
    )
    .await;

    nodes.push(spawn_node("node-d", &schema.name));
    let four = settles(
        storage.as_ref(),
        &["node-a", "node-b", "node-c", "node-d"],
        Instant::now(),
        settle,
    )
    .await;

    // SIGKILL node-b: the shards the lock table names it for are served by the others
    // within lease + poll (read from the commit log).
    let before: Vec<u32> = storage
        .sessions()
        .await
        .expect("sessions")
        .into_iter()
        .filter(|s| s.node_id.as_ref().is_some_and(|n| n.0 == "node-b"))
        .map(|s| s.shard.0)
        .collect();
    assert!(!before.is_empty(), "node-b holds shards before the kill");
    nodes[1].kill();
    let killed = Instant::now();
    let killed_at = chrono::Utc::now().timestamp_micros();
    // Balanced again once node-b has left the membership (a lease after its last beat, which
    // was at most a beat interval before the kill) and the survivors have then rebalanced as
    // after any leave (`settle`). Served again is a tighter bound, checked from the commit
    // log below.
    let after = settles(
        storage.as_ref(),
        &["node-a", "node-c", "node-d"],
        killed,
        LEASE + POLL + settle,
    )
    .await;

    let sent = rounds.stop().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while storage.counts(None).await.expect("counts").pending() > 0 {
        assert!(Instant::now() < deadline, "the cluster did not drain");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for n in nodes.iter_mut().filter(|n| n.name != "node-b") {
        n.tell("stop");
        let line = n.wait_for("SBX-STOPPED", Duration::from_secs(30));
        assert!(line.is_some(), "{} did not stop", n.name);
        eprintln!("{}", line.unwrap_or_default());
        assert!(n.stop(Duration::from_secs(30)).is_some_and(|s| s.success()));
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

    // One committer per (shard, epoch); the dead node's shards served again in time.
    let log = pg_commit_log(&url, &schema.name);
    assert_eq!(shared_epochs(&log), vec![], "two owners of one epoch");
    let bound = LEASE + POLL;
    let mut served_again = Vec::new();
    for shard in before {
        let first = log
            .iter()
            .filter(|e| e.shard == shard && e.node != "node-b" && e.at_micros >= killed_at)
            .map(|e| e.at_micros)
            .min()
            .unwrap_or_else(|| panic!("shard {shard} of node-b never served again"));
        let took = Duration::from_micros((first - killed_at) as u64);
        served_again.push((shard, took));
    }
    let mut rows: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &log {
        *rows.entry(e.node.as_str()).or_default() += e.rows;
    }
    eprintln!(
        "cluster_balance: {sent} rounds; balanced after {three:?} (3 nodes), {four:?} (a 4th \
         joined), {after:?} (one killed); node-b's shards served again after {served_again:?} \
         (bound {bound:?}); rows per node {rows:?}"
    );
    for (shard, took) in served_again {
        assert!(
            took <= bound,
            "shard {shard} served again {took:?} after the kill"
        );
    }
}

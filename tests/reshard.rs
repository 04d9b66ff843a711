//! Online re-sharding while two nodes serve and traffic flows, on memory, SQLite (two
//! storages on one file) and PostgreSQL: 8 → 16 → 4 shards, then every command applied once,
//! in order; delayed rows keep their delay and are applied after the change; a sender built
//! with the old count goes on sending without an error; the lock table holds the new layout's
//! shards only; and a node configured with the old count is refused.
//!
//! The node-process version under load (three processes, a commit log) is
//! `tests/cluster_reshard.rs`.

mod common;

use common::{Tally, TallyCommand};
use shardbox::core::storage::EntityKey;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{ConfigError, NodeId, ReshardOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TARGETS: usize = 120;
/// Targets that get a delayed `Add(1)` before each re-sharding.
const DELAYED: usize = 20;
const LEASE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(100);

async fn build(
    storage: Arc<dyn Storage>,
    id: &str,
    shards: u32,
) -> Result<Shardbox, DeliveryError> {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(shards)
        .workers(2)
        .lease_duration(LEASE)
        .poll_interval(POLL)
        .node_id(NodeId(id.into()))
        .aggregate::<Tally>()
        .build()
        .await
}

async fn reshard_under_traffic(a_storage: Arc<dyn Storage>, b_storage: Arc<dyn Storage>) {
    let a = build(a_storage.clone(), "reshard-a", 8)
        .await
        .expect("build A");
    let b = build(b_storage.clone(), "reshard-b", 8)
        .await
        .expect("build B");
    // An operator's handle and a client that only sends, both built with the old count.
    let operator = build(a_storage.clone(), "operator", 8)
        .await
        .expect("build operator");
    let client = build(b_storage.clone(), "client", 8)
        .await
        .expect("build client");

    // Round n sends Record(n) to every target in one write, every 20 ms, through A, B and
    // the client in turn.
    let ids: Vec<String> = (0..TARGETS).map(|t| format!("r-{t}")).collect();
    let rounds = common::Rounds::start(
        vec![a.clone(), b.clone(), client.clone()],
        ids,
        Duration::from_millis(20),
    );
    let (node_a, node_b) = (a.start(), b.start());
    let delayed = |round: usize| {
        let client = client.clone();
        async move {
            for t in 0..DELAYED {
                client
                    .send_with::<Tally>(
                        &format!("d-{t}"),
                        &TallyCommand::Add(1),
                        SendOptions::default()
                            .signal_id(format!("delayed-{round}-{t}"))
                            .delay(Duration::from_millis(1500)),
                    )
                    .await
                    .expect("a delayed send");
            }
        }
    };

    let mut reports = Vec::new();
    for (round, to) in [16u32, 4].into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(600)).await;
        delayed(round).await;
        let before = rounds.sent();
        let report = operator
            .reshard_with(
                to,
                &ReshardOptions {
                    timeout: Duration::from_secs(30),
                },
            )
            .await
            .expect("re-sharding");
        assert_eq!(
            (report.from, report.to),
            (if to == 16 { 8 } else { 16 }, to)
        );
        assert!(
            report.moves.inbox_rows > 0,
            "rows were there to move: {report:?}"
        );
        assert!(
            report.moves.inbox_moved > 0,
            "some rows changed shard: {report:?}"
        );
        eprintln!(
            "8->16->4: to {to}: {} rows, {} moved, gathered in {:?}, switched in {:?} (round {before})",
            report.moves.inbox_rows, report.moves.inbox_moved, report.gathered_in, report.switched_in
        );
        reports.push(report);
        assert_eq!(
            a_storage.recorded_shard_count().await.expect("count"),
            Some(to)
        );
    }
    // Traffic goes on after the last change, through every sender.
    let after = rounds.sent();
    let deadline = Instant::now() + Duration::from_secs(20);
    while rounds.sent() < after + 6 {
        assert!(
            Instant::now() < deadline,
            "traffic goes on after the re-sharding"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = rounds.stop().await;
    // The delayed rows become due 1.5 s after they were sent: wait for them, then drain.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(
        node_a.drain(Duration::from_secs(30)).await.expect("drain"),
        "the nodes serve every shard of the new layout"
    );
    node_a.shutdown().await.expect("shutdown A");
    node_b.shutdown().await.expect("shutdown B");

    let keys: Vec<EntityKey> = (0..TARGETS)
        .map(|t| EntityKey::new("tally", "", format!("r-{t}")))
        .collect();
    let want: Vec<u64> = (0..sent).collect();
    let states = b_storage.load_states(&keys).await.expect("states");
    assert_eq!(states.len(), TARGETS);
    for s in states {
        let tally: Tally = serde_json::from_slice(&s.state).expect("a tally");
        assert_eq!(tally.applied, want, "{}: once each, in order", s.key.id);
    }
    let delayed_keys: Vec<EntityKey> = (0..DELAYED)
        .map(|t| EntityKey::new("tally", "", format!("d-{t}")))
        .collect();
    let states = b_storage.load_states(&delayed_keys).await.expect("states");
    assert_eq!(states.len(), DELAYED, "every delayed command was applied");
    for s in states {
        let tally: Tally = serde_json::from_slice(&s.state).expect("a tally");
        assert_eq!(tally.sum, 2, "{}: both delayed adds, once each", s.key.id);
    }
    let (ma, mb) = (a.metrics(), b.metrics());
    assert_eq!(
        ma.delivered + mb.delivered,
        sent * TARGETS as u64 + 2 * DELAYED as u64,
        "every message delivered once"
    );
    // The lock table is the new layout's: shards 0..4 only.
    let sessions = a_storage.sessions().await.expect("sessions");
    assert!(
        sessions.iter().all(|s| s.shard.0 < 4),
        "no lock-table row outside the layout: {:?}",
        sessions.iter().map(|s| s.shard.0).collect::<Vec<_>>()
    );
    // A node configured with an old count is refused, naming both counts.
    match build(a_storage, "late", 8).await {
        Err(DeliveryError::Config(ConfigError::ShardCountMismatch {
            recorded: 4,
            configured: 8,
        })) => {}
        Err(e) => panic!("expected ShardCountMismatch 4/8, got {e}"),
        Ok(_) => panic!("a node with the old count was built"),
    }
    eprintln!(
        "{sent} rounds; A delivered {}, B delivered {}",
        ma.delivered, mb.delivered
    );
}

/// The case on `backend`, two storages over one database (see `common::two_storages`).
async fn on(backend: &str) {
    let Some((a, b, _guard)) = common::two_storages(backend, "reshard", 6).await else {
        return;
    };
    reshard_under_traffic(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_reshards_under_traffic() {
    on("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reshards_under_traffic() {
    on("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reshards_under_traffic() {
    on("postgres").await;
}

/// A node built before a re-sharding it never saw announced (it was not running) starts
/// with the old count: its first pick-up finds another count recorded, and it serves the new
/// layout from then on; a client built with the old count sends on. Every command once, in
/// order, and the node's lease watch re-lays its own cycle (it drains all 16 shards).
async fn a_node_that_missed_the_change_follows_it(storage: Arc<dyn Storage>) {
    let node = build(storage.clone(), "late-node", 4).await.expect("build");
    let client = build(storage.clone(), "late-client", 4)
        .await
        .expect("build");
    let ids: Vec<String> = (0..40).map(|t| format!("l-{t}")).collect();
    let round = |n: u64| {
        let (client, ids) = (client.clone(), ids.clone());
        async move {
            let commands: Vec<(&str, TallyCommand)> = ids
                .iter()
                .map(|id| (id.as_str(), TallyCommand::Record(n)))
                .collect();
            client.send_many::<Tally>(&commands).await.expect("send");
        }
    };
    round(0).await;
    let operator = build(storage.clone(), "late-operator", 4)
        .await
        .expect("build");
    let report = operator
        .reshard(16)
        .await
        .expect("re-sharding with no node running");
    assert_eq!((report.from, report.to), (4, 16));
    // The client still addresses by 4: its write is refused and addressed anew, unseen.
    round(1).await;
    let running = node.start();
    round(2).await;
    assert!(
        running.drain(Duration::from_secs(20)).await.expect("drain"),
        "the node that started with 4 serves all 16 shards"
    );
    running.shutdown().await.expect("shutdown");
    let keys: Vec<EntityKey> = ids
        .iter()
        .map(|id| EntityKey::new("tally", "", id))
        .collect();
    for s in storage.load_states(&keys).await.expect("states") {
        let tally: Tally = serde_json::from_slice(&s.state).expect("a tally");
        assert_eq!(
            tally.applied,
            vec![0, 1, 2],
            "{}: once each, in order",
            s.key.id
        );
    }
    assert_eq!(node.metrics().delivered, 3 * ids.len() as u64);
}

common::on_every_backend!("reshard"; a_node_that_missed_the_change_follows_it);

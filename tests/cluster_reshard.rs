//! Online re-sharding under load, end to end with node *processes*: three nodes share one
//! PostgreSQL schema (or one SQLite file), started with 16 shards; the test process sends
//! steady traffic while an operator re-shards 16 → 32, then 32 → 8. One node also sends, from
//! the Shardbox it built with 16 shards, so its sends cross both changes (as do the test
//! process's: its sender is built with 16 too and never rebuilt).
//!
//! ```text
//!  parent ─ rounds of Record(n) to 96 targets ──────────────────────────────────► stop
//!  node-a ─ rounds of Record(n) to 16 targets ──────────────────────────────────► quiet
//!             warm-up │ reshard(32) │ traffic │ reshard(8) │ traffic │ drain, checks
//! ```
//!
//! Checks (every failure is collected, then all are reported at once):
//!
//! - per target, applied == sent, each `n` once and in send order: in the framework-kept
//!   state ([`Tally::applied`]) and in the target's events read in event-store `seq` order;
//! - no Inbox row left to deliver (or blocked), and no sender saw an error;
//! - the commit log (written inside every fenced stage commit): no (shard, epoch) committed
//!   by two nodes, its stages' rows add up to the commands sent (none on two pages), no
//!   stage on a shard outside the layout in force (≥ 16 before the first change, ≥ 32
//!   between them, ≥ 8 after the second), and every shard of the new layouts served after
//!   each change (the nodes resumed with the new count);
//! - the reports say 16 → 32 and 32 → 8, the recorded count is 8 at the end, a Shardbox can
//!   be built with 8, and a node process started with `.shards(16)` afterwards is refused
//!   with `ShardCountMismatch`.
//!
//! The nodes are this test binary run again with `SHARDBOX_RESHARD_NODE` set (see
//! `reshard_node_entry`).

mod common;

use common::cluster::{field, shared_epochs, CommitEntry, CommitLog, NodeProcess, Store};
use common::{Tally, TallyCommand, TallyEvent};
use shardbox::core::storage::EntityKey;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{ConfigError, NodeId, ShardboxBuilder};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The count the nodes start with, and the two changes.
const START: u32 = 16;
const GROW_TO: u32 = 32;
const SHRINK_TO: u32 = 8;
/// The test process's targets per shard of the 32-shard layout: every shard of every layout
/// has traffic.
const PER_SHARD: usize = 3;
const LEASE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(250);
/// A round of one command per target every this often (test process and node-a alike).
const ROUND_EVERY: Duration = Duration::from_millis(250);
/// Traffic before the first change, between the two, and after the second.
const WARM_UP: Duration = Duration::from_secs(3);
const BETWEEN: Duration = Duration::from_secs(5);
const AFTER: Duration = Duration::from_secs(4);
/// How long the targets may take to reach their sent counts once the traffic stopped.
const APPLY_BOUND: Duration = Duration::from_secs(45);
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
/// The node that also sends.
const SENDING_NODE: &str = "node-a";
const ENTRY: &str = "reshard_node_entry";

fn builder(storage: Arc<dyn Storage>, shards: u32) -> ShardboxBuilder {
    common::cluster::tally_node(storage, shards, LEASE, POLL, 4)
}

/// A node process's main: builds a node with `SHARDBOX_RESHARD_SHARDS` shards and serves the
/// store until stdin closes; with `SHARDBOX_RESHARD_SENDS=1` it also sends rounds to
/// [`node_targets`] until told `quiet`, then says `SBX-SENT`. Refused at build for its shard
/// count, it says `SBX-REFUSED` and returns. Does nothing in a normal test run.
#[test]
fn reshard_node_entry() {
    let Ok(node) = std::env::var("SHARDBOX_RESHARD_NODE") else {
        return;
    };
    let store =
        Store::from_spec(&std::env::var("SHARDBOX_RESHARD_STORE").expect("SHARDBOX_RESHARD_STORE"));
    let shards: u32 = std::env::var("SHARDBOX_RESHARD_SHARDS")
        .expect("SHARDBOX_RESHARD_SHARDS")
        .parse()
        .expect("SHARDBOX_RESHARD_SHARDS: a count");
    let sends = std::env::var("SHARDBOX_RESHARD_SENDS").is_ok_and(|v| v == "1");
    common::cluster::init_node_log();
    common::cluster::runtime().block_on(async {
        let built = builder(store.open(6).await, shards)
            .node_id(NodeId(node.clone()))
            .stations(|p| {
                p.push(CommitLog);
            })
            .build()
            .await;
        let sb = match built {
            Ok(sb) => sb,
            Err(DeliveryError::Config(ConfigError::ShardCountMismatch {
                recorded,
                configured,
            })) => {
                println!("SBX-REFUSED {node} recorded={recorded} configured={configured}");
                return;
            }
            Err(e) => panic!("build the node: {e}"),
        };
        let quiet = Arc::new(AtomicBool::new(false));
        let sending = sends.then(|| {
            let (sb, node, quiet) = (sb.clone(), node.clone(), quiet.clone());
            tokio::spawn(async move {
                let sent = send_rounds(&sb, &node_targets(&sb), &quiet).await;
                println!(
                    "SBX-SENT {node} rounds={} slowest_ms={} error={}",
                    sent.rounds,
                    sent.slowest.as_millis(),
                    sent.error.as_deref().unwrap_or("none")
                );
            })
        });
        let told = quiet.clone();
        let on_line = move |line: &str| {
            if line == "quiet" {
                told.store(true, Ordering::SeqCst);
            }
        };
        common::cluster::serve_until_stopped_with(&sb, &node, "", on_line).await;
        quiet.store(true, Ordering::SeqCst);
        if let Some(sending) = sending {
            sending.await.expect("the sends");
        }
    });
}

/// What a sender did: rounds written whole, the slowest write, the first failure (which
/// ends the sending: that round's outcome is unknown).
struct Sent {
    rounds: u64,
    slowest: Duration,
    error: Option<String>,
}

/// Round `n` = `Record(n)` to every target of `ids` in one write, every [`ROUND_EVERY`],
/// until `stop`. One write at a time, so each target's commands are written in `n` order.
async fn send_rounds(sb: &Shardbox, ids: &[String], stop: &AtomicBool) -> Sent {
    let mut pace = tokio::time::interval(ROUND_EVERY);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = Sent {
        rounds: 0,
        slowest: Duration::ZERO,
        error: None,
    };
    while !stop.load(Ordering::SeqCst) {
        pace.tick().await;
        let n = sent.rounds;
        let commands: Vec<(&str, TallyCommand)> = ids
            .iter()
            .map(|id| (id.as_str(), TallyCommand::Record(n)))
            .collect();
        let began = Instant::now();
        let written = sb.send_many::<Tally>(&commands).await;
        sent.slowest = sent.slowest.max(began.elapsed());
        match written {
            Ok(report) if report.written == ids.len() => sent.rounds += 1,
            Ok(report) => {
                sent.error = Some(format!(
                    "round {n}: {} of {} rows written ({} duplicates)",
                    report.written,
                    ids.len(),
                    report.duplicates
                ));
                break;
            }
            Err(e) => {
                sent.error = Some(format!("round {n}: {e}"));
                break;
            }
        }
    }
    sent
}

/// The sending node's targets: one per shard of the starting layout (`sb` built with
/// [`START`] shards).
fn node_targets(sb: &Shardbox) -> Vec<String> {
    common::cluster::ids_per_shard(sb, "tally", "stale", START, 1)
}

/// The test process's targets: [`PER_SHARD`] in every shard of the 32-shard layout (so in
/// every shard of the 16 and 8 ones too), found with a throwaway in-memory Shardbox.
async fn parent_targets() -> Vec<String> {
    let layout = Shardbox::builder()
        .memory()
        .shards(GROW_TO)
        .aggregate::<Tally>()
        .build()
        .await
        .expect("an in-memory Shardbox");
    common::cluster::ids_per_shard(&layout, "tally", "grid", GROW_TO, PER_SHARD)
}

/// One change as the test process saw it.
struct Switch {
    from: u32,
    to: u32,
    /// Wall-clock times just before and just after the call, µs since the epoch: comparable
    /// with the commit log's stage times, as the nodes run on this machine's clock.
    began_us: i64,
    ended_us: i64,
    took: Duration,
    /// The report's pause and move figures.
    report: String,
}

/// Re-shards from `from` to `to` as an operator would: its own connection and a Shardbox
/// built with the count in force (never started).
async fn reshard(store: &Store, from: u32, to: u32) -> Switch {
    let operator = builder(store.open(2).await, from)
        .node_id(NodeId("operator".into()))
        .build()
        .await
        .unwrap_or_else(|e| panic!("build the operator with {from} shards: {e}"));
    let began_us = chrono::Utc::now().timestamp_micros();
    let began = Instant::now();
    let report = operator
        .reshard(to)
        .await
        .unwrap_or_else(|e| panic!("reshard {from} → {to}: {e}"));
    let took = began.elapsed();
    Switch {
        from: report.from,
        to: report.to,
        began_us,
        ended_us: chrono::Utc::now().timestamp_micros(),
        took,
        report: format!(
            "gathered every lease in {:?}, switched in {:?}, moved {} of {} inbox rows and {} \
             records",
            report.gathered_in,
            report.switched_in,
            report.moves.inbox_moved,
            report.moves.inbox_rows,
            report.moves.records_moved
        ),
    }
}

fn key(id: &str) -> EntityKey {
    EntityKey {
        kind: "tally".into(),
        tenant: String::new(),
        id: id.to_owned(),
    }
}

/// Each target's applied numbers (state), in handling order.
async fn applied(storage: &dyn Storage, expected: &[(String, u64)]) -> BTreeMap<String, Vec<u64>> {
    let keys: Vec<EntityKey> = expected.iter().map(|(id, _)| key(id)).collect();
    let mut applied = BTreeMap::new();
    for chunk in keys.chunks(200) {
        for s in storage.load_states(chunk).await.expect("states") {
            let tally: Tally = serde_json::from_slice(&s.state).expect("a tally");
            applied.insert(s.key.id, tally.applied);
        }
    }
    applied
}

/// Waits until every target has applied at least its sent count; `Err` names the ones that
/// did not within `bound`.
async fn all_applied(
    storage: &dyn Storage,
    expected: &[(String, u64)],
    bound: Duration,
) -> Result<Duration, String> {
    let began = Instant::now();
    loop {
        let now = applied(storage, expected).await;
        let lagging: Vec<String> = expected
            .iter()
            .filter_map(|(id, sent)| {
                let got = now.get(id).map_or(&[][..], |a| a.as_slice());
                (got.len() < *sent as usize)
                    .then(|| format!("{id}: {} of {sent} (last {:?})", got.len(), got.last()))
            })
            .collect();
        if lagging.is_empty() {
            return Ok(began.elapsed());
        }
        if began.elapsed() > bound {
            let counts = storage.counts(None).await.expect("counts");
            return Err(format!(
                "{} of {} targets short of their sent count {bound:?} after the traffic \
                 stopped (inbox {counts:?}): {:?}",
                lagging.len(),
                expected.len(),
                &lagging[..lagging.len().min(12)]
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What is wrong with `got` (`(where, n)`: index in the state or event `seq`) against
/// `0..sent` once each in order: `None` if nothing.
fn sequence_faults(got: &[(i64, u64)], sent: u64) -> Option<String> {
    if got.iter().map(|g| g.1).eq(0..sent) {
        return None;
    }
    let mut at: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for &(place, n) in got {
        at.entry(n).or_default().push(place);
    }
    let missing: Vec<u64> = (0..sent).filter(|n| !at.contains_key(n)).take(10).collect();
    let repeated: Vec<(u64, &Vec<i64>)> = at
        .iter()
        .filter(|(_, places)| places.len() > 1)
        .take(10)
        .map(|(n, places)| (*n, places))
        .collect();
    let reordered: Vec<(i64, u64, u64)> = got
        .windows(2)
        .filter(|w| w[1].1 < w[0].1)
        .take(10)
        .map(|w| (w[1].0, w[0].1, w[1].1))
        .collect();
    let unsent: Vec<u64> = at.keys().copied().filter(|n| *n >= sent).take(10).collect();
    Some(format!(
        "{} applied of {sent} sent; missing {missing:?}; repeated (n, at) {repeated:?}; \
         out of order (at, after n, n) {reordered:?}; never sent {unsent:?}",
        got.len()
    ))
}

/// The shard count in force at `at_us`, by the switches' windows (during a switch: the
/// larger of the two).
fn layout_at(at_us: i64, grow: &Switch, shrink: &Switch) -> u32 {
    if at_us < grow.began_us {
        START
    } else if at_us <= grow.ended_us {
        START.max(GROW_TO)
    } else if at_us < shrink.began_us {
        GROW_TO
    } else if at_us <= shrink.ended_us {
        GROW_TO.max(SHRINK_TO)
    } else {
        SHRINK_TO
    }
}

/// The stages (commit-log entries) on a shard outside the layout in force when they ran:
/// `None` if there are none, else how many per shard and the first ones, each timed from the
/// start of the layout it broke.
fn outside_layout(log: &[CommitEntry], grow: &Switch, shrink: &Switch) -> Option<String> {
    let mut wrong: Vec<&CommitEntry> = log
        .iter()
        .filter(|e| e.shard >= layout_at(e.at_micros, grow, shrink))
        .collect();
    if wrong.is_empty() {
        return None;
    }
    wrong.sort_by_key(|e| e.at_micros);
    let mut per_shard: BTreeMap<u32, usize> = BTreeMap::new();
    for e in &wrong {
        *per_shard.entry(e.shard).or_default() += 1;
    }
    let first: Vec<String> = wrong
        .iter()
        .take(12)
        .map(|e| {
            let (layout, since) = match layout_at(e.at_micros, grow, shrink) {
                START => (START, "before the first reshard".to_owned()),
                GROW_TO => (
                    GROW_TO,
                    format!(
                        "{} ms after reshard({GROW_TO}) returned",
                        (e.at_micros - grow.ended_us) / 1000
                    ),
                ),
                SHRINK_TO => (
                    SHRINK_TO,
                    format!(
                        "{} ms after reshard({SHRINK_TO}) returned",
                        (e.at_micros - shrink.ended_us) / 1000
                    ),
                ),
                other => (other, "during a reshard".to_owned()),
            };
            format!(
                "shard {} epoch {} by {} (first seq {}, {} rows) {since}, with {layout} shards",
                e.shard, e.epoch, e.node, e.first_seq, e.rows
            )
        })
        .collect();
    Some(format!(
        "{} stages on a shard outside the layout (per shard {per_shard:?}); the first:\n  {}",
        wrong.len(),
        first.join("\n  ")
    ))
}

/// The shards with a stage that ran in `[from_us, to_us)`.
fn served(log: &[CommitEntry], from_us: i64, to_us: i64) -> BTreeSet<u32> {
    log.iter()
        .filter(|e| e.at_micros >= from_us && e.at_micros < to_us)
        .map(|e| e.shard)
        .collect()
}

/// The longest stretch with no stage starting anywhere that overlaps `switch`'s call: how
/// long delivery paused around it, as the commit log shows.
fn longest_pause(log: &[CommitEntry], switch: &Switch) -> Duration {
    let mut at: Vec<i64> = log.iter().map(|e| e.at_micros).collect();
    at.sort_unstable();
    let longest = at
        .windows(2)
        .filter(|w| w[0] < switch.ended_us && w[1] > switch.began_us)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0);
    Duration::from_micros(longest as u64)
}

fn spawn_node(name: &str, store: &Store, shards: u32, sends: bool) -> NodeProcess {
    let env = [
        ("SHARDBOX_RESHARD_NODE", name.to_owned()),
        ("SHARDBOX_RESHARD_STORE", store.spec()),
        ("SHARDBOX_RESHARD_SHARDS", shards.to_string()),
        (
            "SHARDBOX_RESHARD_SENDS",
            if sends { "1" } else { "0" }.to_owned(),
        ),
    ];
    NodeProcess::spawn(name, ENTRY, &env)
}

async fn reshard_under_load(store: Store, label: &str) {
    let started = Instant::now();
    let storage = store.open(6).await;
    // Built with the starting count and never rebuilt: a stale sender after each change.
    let sender = builder(storage.clone(), START)
        .node_id(NodeId("sender".into()))
        .build()
        .await
        .expect("build the sender");
    let targets = parent_targets().await;
    let stale = node_targets(&sender);

    let mut nodes: Vec<NodeProcess> = NODES
        .iter()
        .map(|name| spawn_node(name, &store, START, *name == SENDING_NODE))
        .collect();
    for n in &nodes {
        n.ready();
    }
    let ready = started.elapsed();

    let stop = Arc::new(AtomicBool::new(false));
    let traffic_began = Instant::now();
    let traffic = {
        let (sender, targets, stop) = (sender.clone(), targets.clone(), stop.clone());
        tokio::spawn(async move { send_rounds(&sender, &targets, &stop).await })
    };
    tokio::time::sleep(WARM_UP).await;
    let grow = reshard(&store, START, GROW_TO).await;
    tokio::time::sleep(BETWEEN).await;
    let shrink = reshard(&store, GROW_TO, SHRINK_TO).await;
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::SeqCst);
    let sent = traffic.await.expect("the traffic");
    let node_sent = {
        let a = &mut nodes[0];
        a.tell("quiet");
        a.wait_for("SBX-SENT", Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{} did not report its sends", a.name))
    };
    let traffic_took = traffic_began.elapsed();
    let node_rounds = field(&node_sent, "rounds");

    let mut faults: Vec<String> = Vec::new();
    if let Some(e) = &sent.error {
        faults.push(format!("the test process's stale sender failed: {e}"));
    }
    let node_error = node_sent
        .split_once("error=")
        .map_or("?", |(_, e)| e)
        .to_owned();
    if node_error != "none" {
        faults.push(format!("{SENDING_NODE}'s sends failed: {node_error}"));
    }

    // Every target reaches its sent count; then no row is left to deliver.
    let expected: Vec<(String, u64)> = targets
        .iter()
        .map(|id| (id.clone(), sent.rounds))
        .chain(stale.iter().map(|id| (id.clone(), node_rounds)))
        .collect();
    let applied_after = match all_applied(storage.as_ref(), &expected, APPLY_BOUND).await {
        Ok(took) => Some(took),
        Err(lag) => {
            faults.push(lag);
            None
        }
    };
    let deadline = Instant::now() + LEASE + 4 * POLL;
    let counts = loop {
        let counts = storage.counts(None).await.expect("counts");
        if counts.pending() + counts.blocked == 0 || Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if counts.pending() + counts.blocked != 0 {
        faults.push(format!("Inbox rows left undelivered: {counts:?}"));
    }

    let mut stopped = Vec::new();
    for n in &mut nodes {
        n.tell("stop");
        let line = n.wait_for("SBX-STOPPED", Duration::from_secs(30));
        let line = line.unwrap_or_else(|| panic!("{} did not stop", n.name));
        let status = n.stop(Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "{}: {status:?}",
            n.name
        );
        stopped.push(line);
    }

    // Per target: each n once, in order — in the state and in the events' seq order.
    let states = applied(storage.as_ref(), &expected).await;
    for (id, sent) in &expected {
        let got: Vec<(i64, u64)> = states
            .get(id)
            .map(|a| a.iter().enumerate().map(|(i, n)| (i as i64, *n)).collect())
            .unwrap_or_default();
        if let Some(fault) = sequence_faults(&got, *sent) {
            faults.push(format!("{id} state: {fault}"));
        }
        let events: Vec<(i64, u64)> = sender
            .aggregate_events::<Tally>(id)
            .await
            .expect("events")
            .into_iter()
            .filter_map(|(seq, e)| match e {
                TallyEvent::Recorded(n) => Some((seq, n)),
                TallyEvent::Added(_) => None,
            })
            .collect();
        if let Some(fault) = sequence_faults(&events, *sent) {
            faults.push(format!("{id} events (at = seq): {fault}"));
        }
    }

    // The commit log: one committer per (shard, epoch), no stage outside the layout, every
    // shard of each new layout served.
    let log = store.commit_log();
    for ((shard, epoch), by) in shared_epochs(&log) {
        let at: Vec<(String, i64)> = log
            .iter()
            .filter(|e| (e.shard, e.epoch) == (shard, epoch))
            .map(|e| (e.node.clone(), e.at_micros))
            .collect();
        faults.push(format!(
            "shard {shard} epoch {epoch} committed by {by:?}: (node, at µs) {at:?}; switches \
             {}..{} and {}..{}",
            grow.began_us, grow.ended_us, shrink.began_us, shrink.ended_us
        ));
    }
    faults.extend(outside_layout(&log, &grow, &shrink));
    // Every command is on exactly one committed page: more rows than commands means a row
    // delivered twice (or copied rather than moved), fewer one never delivered.
    let committed_rows: usize = log.iter().map(|e| e.rows).sum();
    let commands = expected
        .iter()
        .map(|(_, sent)| *sent as usize)
        .sum::<usize>();
    if committed_rows != commands {
        faults.push(format!(
            "the commit log's stages hold {committed_rows} rows, {commands} commands were sent"
        ));
    }
    let before = served(&log, 0, grow.began_us);
    let between = served(&log, grow.ended_us, shrink.began_us);
    let after = served(&log, shrink.ended_us, i64::MAX);
    for (layout, shards) in [(GROW_TO, &between), (SHRINK_TO, &after)] {
        let unserved: Vec<u32> = (0..layout).filter(|s| !shards.contains(s)).collect();
        if !unserved.is_empty() {
            faults.push(format!(
                "with {layout} shards, shards {unserved:?} had traffic but no stage"
            ));
        }
    }

    // The reports and the recorded count.
    for (switch, want) in [(&grow, (START, GROW_TO)), (&shrink, (GROW_TO, SHRINK_TO))] {
        if (switch.from, switch.to) != want {
            faults.push(format!(
                "a reshard reported {} → {}, not {} → {}: {}",
                switch.from, switch.to, want.0, want.1, switch.report
            ));
        }
    }
    let recorded = storage
        .recorded_shard_count()
        .await
        .expect("recorded shard count");
    if recorded != Some(SHRINK_TO) {
        faults.push(format!(
            "recorded shard count {recorded:?}, not {SHRINK_TO}"
        ));
    }
    if let Err(e) = builder(storage.clone(), SHRINK_TO).build().await {
        faults.push(format!(
            "a Shardbox with {SHRINK_TO} shards is refused: {e}"
        ));
    }
    // A node configured with the old count, started now, is refused.
    let late = spawn_node("node-late", &store, START, false);
    let said = late.wait_for("SBX-", Duration::from_secs(60));
    let want = format!("SBX-REFUSED node-late recorded={SHRINK_TO} configured={START}");
    if said.as_deref() != Some(want.as_str()) {
        faults.push(format!(
            "a node started with .shards({START}) after the changes said {said:?}, not {want:?}"
        ));
    }
    drop(late);

    let mut rows: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &log {
        *rows.entry(e.node.as_str()).or_default() += e.rows;
    }
    let secs = traffic_took.as_secs_f64();
    let parent_commands = sent.rounds * targets.len() as u64;
    let node_commands = node_rounds * stale.len() as u64;
    eprintln!(
        "cluster_reshard[{label}]: nodes ready {ready:?}; traffic {traffic_took:.1?}: test \
         process {} rounds × {} targets = {parent_commands} ({:.0}/s, slowest write {:?}), \
         {SENDING_NODE} {node_rounds} rounds × {} targets = {node_commands} ({:.0}/s, \
         slowest write {} ms); all applied {applied_after:?} after the traffic stopped",
        sent.rounds,
        targets.len(),
        parent_commands as f64 / secs,
        sent.slowest,
        stale.len(),
        node_commands as f64 / secs,
        field(&node_sent, "slowest_ms"),
    );
    for switch in [&grow, &shrink] {
        eprintln!(
            "  reshard {} → {}: call {:?}, no stage for {:?} around it (commit log); {}",
            switch.from,
            switch.to,
            switch.took,
            longest_pause(&log, switch),
            switch.report
        );
    }
    eprintln!(
        "  {} stages, rows per node {rows:?}; shards served before/between/after the changes: \
         {}/{}/{}; total {:?}",
        log.len(),
        before.len(),
        between.len(),
        after.len(),
        started.elapsed(),
    );
    for line in &stopped {
        eprintln!("  {line}");
    }
    assert!(
        faults.is_empty(),
        "{} faults:\n{}",
        faults.len(),
        faults.join("\n")
    );
}

#[test]
fn postgres_reshards_16_to_32_to_8_under_load_from_three_node_processes() {
    let Some(url) =
        common::pg_url("postgres_reshards_16_to_32_to_8_under_load_from_three_node_processes")
    else {
        return;
    };
    let schema = common::PgSchema::new(&url, "reshard");
    common::cluster::runtime().block_on(reshard_under_load(
        Store::Postgres {
            url: url.clone(),
            schema: schema.name.clone(),
        },
        "postgres",
    ));
}

#[test]
fn sqlite_reshards_16_to_32_to_8_under_load_from_three_node_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shardbox.db");
    common::cluster::runtime().block_on(reshard_under_load(Store::Sqlite(path), "sqlite"));
}

/// The sequence check flags what it must: a gap, a repeat, a reorder, a number never sent.
#[test]
fn sequence_faults_name_gaps_repeats_and_reorders() {
    let at = |ns: &[u64]| -> Vec<(i64, u64)> {
        ns.iter()
            .enumerate()
            .map(|(i, n)| (i as i64 * 10, *n))
            .collect()
    };
    assert_eq!(sequence_faults(&at(&[0, 1, 2]), 3), None);
    assert_eq!(sequence_faults(&at(&[]), 0), None);
    let gap = sequence_faults(&at(&[0, 2]), 3).expect("a gap");
    assert!(gap.contains("missing [1]"), "{gap}");
    let repeat = sequence_faults(&at(&[0, 1, 1, 2]), 3).expect("a repeat");
    assert!(
        repeat.contains("repeated (n, at) [(1, [10, 20])]"),
        "{repeat}"
    );
    let reorder = sequence_faults(&at(&[0, 2, 1]), 3).expect("a reorder");
    assert!(
        reorder.contains("out of order (at, after n, n) [(20, 2, 1)]"),
        "{reorder}"
    );
    let unsent = sequence_faults(&at(&[0, 1, 2, 3]), 3).expect("one too many");
    assert!(unsent.contains("never sent [3]"), "{unsent}");
}

//! Fencing with real time and real processes, on SQLite and PostgreSQL.
//!
//! - A worker whose thread stalls past its lease (a GC-like pause: its heartbeat cannot beat
//!   either) loses the shard to another node; its commit is refused with `LeaseLost`, the new
//!   owner's commit wins, and the state changes once.
//! - Several processes share one SQLite file and race for the same few shards' leases, hold
//!   them sometimes past their end, commit and release: every epoch is handed out once, no
//!   commit lands under an epoch that was already superseded, no pick-up takes a lease that
//!   was still live, and only the commits that succeeded left a trace.
//!
//! The processes are this test binary run again with `SHARDBOX_REGISTRY_CHILD` set, which makes
//! `registry_process_entry` race for leases (in a normal run it returns at once).

mod common;

use chrono::{DateTime, Utc};
use common::cluster::{shared_epochs, sqlite_commit_log, CommitEntry, CommitLog, NodeProcess};
use serde::{Deserialize, Serialize};
use shardbox::core::storage::Page;
use shardbox::core::Conveyor;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{NodeId, ShardIndex, StorageError};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A state that records the numbers it applied; its handler blocks its thread once for the
/// stall armed under its target id.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
struct Sleeper {
    applied: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Apply(u64);

impl Message for Apply {
    const TYPE: &'static str = "sleeper.apply";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Applied(u64);

impl Message for Applied {
    const TYPE: &'static str = "sleeper.applied";
}

/// Target id → (stall, told when the stall starts).
static ARMED: Mutex<Vec<(String, Duration, mpsc::Sender<()>)>> = Mutex::new(Vec::new());

impl Aggregate for Sleeper {
    const KIND: &'static str = "sleeper";
    type Command = Apply;
    type Event = Applied;

    async fn handle(&self, c: &Apply, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
        let armed = {
            let mut armed = ARMED.lock().unwrap();
            let at = armed.iter().position(|(id, _, _)| id == cx.target_id);
            at.map(|i| armed.remove(i))
        };
        if let Some((_, stall, started)) = armed {
            started.send(()).unwrap();
            // Blocks the thread, as a GC pause or a stuck syscall would: on a current-thread
            // runtime the heartbeat cannot run either.
            std::thread::sleep(stall);
        }
        Ok(vec![Applied(c.0)])
    }

    fn apply(&mut self, e: &Applied) {
        self.applied.push(e.0);
    }
}

const LEASE: Duration = Duration::from_secs(1);

async fn node(storage: Arc<dyn Storage>, id: &str) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .lease_duration(LEASE)
        .poll_interval(Duration::from_millis(200))
        .node_id(NodeId(id.into()))
        .aggregate::<Sleeper>()
        .stations(|p| {
            p.push(CommitLog);
        })
        .build()
        .await
        .expect("build")
}

/// Node A (on a current-thread runtime of its own thread) stalls in the handler for 2.5
/// leases; node B, on its own storage connections, takes the shard over and delivers. Returns
/// the commit log after both are done.
async fn stalled_worker_is_fenced(
    a: Arc<dyn Storage>,
    b: Arc<dyn Storage>,
    commit_log: impl Fn() -> Vec<CommitEntry>,
) {
    let node_a = node(a, "stall-a").await;
    let node_b = node(b, "stall-b").await;
    node_a
        .send::<Sleeper>("s-1", &Apply(7))
        .await
        .expect("send");
    let shard = node_a.shard_of(Sleeper::KIND, "s-1");
    let (started_tx, started) = mpsc::channel();
    ARMED
        .lock()
        .unwrap()
        .push(("s-1".into(), LEASE * 5 / 2, started_tx));

    let stalled = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let report = rt.block_on(node_a.deliver(shard));
        (report, node_a.metrics())
    });
    started
        .recv_timeout(Duration::from_secs(20))
        .expect("node A started the stage");
    // A picked the lease up before its handler started: by now the lease has run out.
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let taken = node_b.deliver(shard).await.expect("node B delivers");
    assert!(taken.picked_up && !taken.lease_lost, "{taken:?}");
    assert_eq!(taken.totals.delivered, 1, "{taken:?}");

    let (report, metrics_a) = stalled.join().expect("node A's thread");
    let report = report.expect("a lost lease is not an error");
    assert!(report.picked_up && report.lease_lost, "{report:?}");
    assert_eq!(report.stages, 0, "the stalled stage committed nothing");
    assert_eq!(metrics_a.lease_losses, 1, "{metrics_a:?}");
    assert_eq!(metrics_a.delivered, 0, "{metrics_a:?}");

    let state = node_b
        .aggregate_state::<Sleeper>("s-1")
        .await
        .expect("state")
        .expect("applied");
    assert_eq!(state.applied, vec![7], "applied once, by the new owner");
    let counts = node_b.storage().counts(None).await.expect("counts");
    assert_eq!(counts.pending(), 0, "{counts:?}");

    let log = commit_log();
    assert_eq!(shared_epochs(&log), vec![]);
    let committed: Vec<(&str, i64)> = log.iter().map(|e| (e.node.as_str(), e.epoch)).collect();
    assert_eq!(
        committed,
        vec![("stall-b", 2)],
        "only the new owner committed, under the second epoch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_worker_stalled_past_its_lease_cannot_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shardbox.db");
    let open = || shardbox::storage::SqliteStorage::open(&path);
    let a: Arc<dyn Storage> = Arc::new(open().await.expect("open A"));
    let b: Arc<dyn Storage> = Arc::new(open().await.expect("open B"));
    stalled_worker_is_fenced(a, b, || sqlite_commit_log(&path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_stalled_past_its_lease_cannot_commit() {
    let Some(url) = common::pg_url("postgres_a_worker_stalled_past_its_lease_cannot_commit") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "stall");
    let a: std::sync::Arc<dyn shardbox::core::Storage> =
        std::sync::Arc::new(schema.connect(2).await);
    let b: std::sync::Arc<dyn shardbox::core::Storage> =
        std::sync::Arc::new(schema.connect(2).await);
    let name = schema.name.clone();
    stalled_worker_is_fenced(a, b, || common::cluster::pg_commit_log(&url, &name)).await;
}

const PROCESSES: usize = 4;
const RACED_SHARDS: u32 = 3;
const ROUNDS: u64 = 80;

fn micros() -> i64 {
    Utc::now().timestamp_micros()
}

fn at(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).expect("a time")
}

/// A child process: races for the leases of a few shards of the SQLite file in
/// `SHARDBOX_REGISTRY_CHILD` (`<path>|<node>|<seed>`), printing what it did with the time
/// before and after each call (µs). Does nothing in a normal test run.
#[test]
fn registry_process_entry() {
    let Ok(spec) = std::env::var("SHARDBOX_REGISTRY_CHILD") else {
        return;
    };
    let mut parts = spec.split('|');
    let (path, node, seed) = (
        parts.next().expect("path").to_owned(),
        NodeId(parts.next().expect("node").into()),
        parts.next().expect("seed").parse::<u64>().expect("seed"),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let storage: Arc<dyn Storage> = Arc::new(
            shardbox::storage::SqliteStorage::open(&path)
                .await
                .expect("open the shared file"),
        );
        // Stage commits are built the way stations build them, on a Conveyor.
        let sb = Shardbox::builder()
            .shared_storage(storage.clone())
            .node_id(node.clone())
            .build()
            .await
            .expect("build");
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for _ in 0..ROUNDS {
            let shard = ShardIndex(next(u64::from(RACED_SHARDS)) as u32);
            let lease_ms = 20 + next(40) as i64;
            let before = micros();
            let picked = storage
                .pick_up(
                    shard,
                    &node,
                    shardbox::core::WorkerId(0),
                    at(before),
                    at(before + lease_ms * 1000),
                )
                .await
                .expect("pick_up");
            let after = micros();
            let Some(lease) = picked else {
                tokio::time::sleep(Duration::from_millis(next(5))).await;
                continue;
            };
            println!(
                "SBX-PICK {shard} {} {before} {} {before} {after}",
                lease.epoch,
                lease.lease_until.timestamp_micros()
            );
            // Hold it for up to twice the lease: about half the time past its end.
            tokio::time::sleep(Duration::from_millis(next(2 * lease_ms as u64))).await;
            let entry = CommitEntry {
                shard: shard.0,
                epoch: lease.epoch.0,
                node: node.0.clone(),
                first_seq: 0,
                rows: 0,
                at_micros: micros(),
                picked_micros: lease.picked_at.timestamp_micros(),
            };
            let before = micros();
            let until = before + lease_ms * 1000;
            let mut conveyor = Conveyor::new(
                sb.station_context().clone(),
                lease.clone(),
                at(before),
                Page::default(),
            );
            conveyor.set_state(entry.state_write());
            let (commit, _) = conveyor.into_commit(at(until));
            let outcome = match storage.commit_stage(commit).await {
                Ok(_) => "ok",
                Err(StorageError::LeaseLost { .. }) => "lost",
                Err(e) => panic!("commit failed: {e}"),
            };
            let after = micros();
            println!(
                "SBX-COMMIT {shard} {} {until} {before} {after} {outcome}",
                lease.epoch
            );
            if next(2) == 0 {
                let before = micros();
                storage.release(&lease).await.expect("release");
                println!("SBX-RELEASE {shard} {} {before} {}", lease.epoch, micros());
            }
        }
        println!("SBX-DONE {node}");
    });
}

/// One reported call: (shard, epoch) → times.
#[derive(Debug, Clone, Copy)]
struct Pick {
    now: i64,
    until: i64,
    before: i64,
    after: i64,
}

#[derive(Debug, Clone, Copy)]
struct Commit {
    until: i64,
    before: i64,
    after: i64,
    ok: bool,
}

fn num(part: Option<&str>) -> i64 {
    part.expect("a field").parse().expect("a number")
}

#[test]
fn sqlite_processes_sharing_a_file_respect_leases_and_fences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shared.db");
    // Create and migrate the file before the processes race.
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(shardbox::storage::SqliteStorage::open(&path))
        .expect("create the file");
    let mut children: Vec<NodeProcess> = (0..PROCESSES)
        .map(|i| {
            let spec = format!("{}|proc-{i}|{}", path.display(), i + 1);
            NodeProcess::spawn(
                &format!("proc-{i}"),
                "registry_process_entry",
                &[("SHARDBOX_REGISTRY_CHILD", spec)],
            )
        })
        .collect();

    let mut picks: HashMap<(u32, i64), (String, Pick)> = HashMap::new();
    let mut commits: Vec<((u32, i64), String, Commit)> = Vec::new();
    let mut releases: HashMap<(u32, i64), i64> = HashMap::new();
    for child in &children {
        let lines = child
            .lines_until("SBX-DONE", Duration::from_secs(120))
            .unwrap_or_else(|| panic!("{} did not finish", child.name));
        for line in lines {
            let mut f = line.split_whitespace();
            let tag = f.next().unwrap_or_default();
            if !tag.starts_with("SBX-") || tag == "SBX-DONE" {
                continue;
            }
            let key = (num(f.next()) as u32, num(f.next()));
            match tag {
                "SBX-PICK" => {
                    let pick = Pick {
                        now: num(f.next()),
                        until: num(f.next()),
                        before: num(f.next()),
                        after: num(f.next()),
                    };
                    let earlier = picks.insert(key, (child.name.clone(), pick));
                    assert!(earlier.is_none(), "epoch {key:?} handed out twice");
                }
                "SBX-COMMIT" => commits.push((
                    key,
                    child.name.clone(),
                    Commit {
                        until: num(f.next()),
                        before: num(f.next()),
                        after: num(f.next()),
                        ok: f.next() == Some("ok"),
                    },
                )),
                "SBX-RELEASE" => {
                    releases.insert(key, num(f.next()));
                }
                other => panic!("unexpected line {other}"),
            }
        }
    }

    for child in &mut children {
        let status = child.stop(Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "{}: {status:?}",
            child.name
        );
    }

    // Every pick-up handed out the next epoch, exactly once. (A shard's row starts at the
    // highest epoch of any shard when it is made — so that a row a re-sharding dropped never
    // hands out an old epoch again — so its epochs run on from there, not from 1.)
    let mut epochs: BTreeMap<u32, BTreeSet<i64>> = BTreeMap::new();
    for &(shard, epoch) in picks.keys() {
        epochs.entry(shard).or_default().insert(epoch);
    }
    for (shard, e) in &epochs {
        let first = *e.iter().min().unwrap_or(&1);
        let want: BTreeSet<i64> = (first..=*e.iter().max().unwrap_or(&0)).collect();
        assert_eq!(e, &want, "shard {shard}: epochs without gaps");
    }

    // No commit succeeded after a newer epoch had certainly been handed out; count the
    // commits that were tried in that window (all refused), so the check is seen to bite.
    let mut stale_tries = 0;
    for (key, node, c) in &commits {
        let superseded = picks.iter().find(|(&(shard, epoch), (_, p))| {
            shard == key.0 && epoch > key.1 && p.after < c.before
        });
        if let Some((newer, (other, _))) = superseded {
            stale_tries += 1;
            assert!(
                !c.ok,
                "{node} committed {key:?} after {other} had picked up {newer:?}"
            );
        }
    }

    // No pick-up took a lease that was certainly still live: the previous epoch's last
    // renewal known to be done before the pick-up began must have ended by its `now` (unless
    // a release may have come first).
    for (&(shard, epoch), (node, p)) in &picks {
        let prev = (shard, epoch - 1);
        let Some((_, prev_pick)) = picks.get(&prev) else {
            continue;
        };
        if releases.get(&prev).is_some_and(|r| *r < p.after) {
            continue;
        }
        let mut live_until = i64::MIN;
        if prev_pick.after < p.before {
            live_until = prev_pick.until;
        }
        for (k, _, c) in &commits {
            if *k == prev && c.ok && c.after < p.before {
                live_until = live_until.max(c.until);
            }
        }
        assert!(
            p.now >= live_until,
            "{node} picked up epoch {epoch} of shard {shard} at {} while the previous lease ran until {live_until}",
            p.now
        );
    }

    // Exactly the commits that succeeded left their entry (written in the fenced commit).
    let log = sqlite_commit_log(&path);
    assert_eq!(shared_epochs(&log), vec![]);
    let logged: BTreeSet<(u32, i64, String)> = log
        .iter()
        .map(|e| (e.shard, e.epoch, e.node.clone()))
        .collect();
    let succeeded: BTreeSet<(u32, i64, String)> = commits
        .iter()
        .filter(|(_, _, c)| c.ok)
        .map(|(k, n, _)| (k.0, k.1, n.clone()))
        .collect();
    assert_eq!(logged, succeeded);
    let lost = commits.iter().filter(|(_, _, c)| !c.ok).count();
    eprintln!(
        "{} pick-ups, {} commits, {lost} refused by the fence ({stale_tries} certainly stale), \
         {} releases",
        picks.len(),
        succeeded.len(),
        releases.len()
    );
    assert!(
        stale_tries > 0,
        "some commits came after their lease was taken over, and were refused"
    );
    assert!(succeeded.len() > lost, "most commits succeed");
    let nodes: BTreeSet<&str> = log.iter().map(|e| e.node.as_str()).collect();
    assert_eq!(nodes.len(), PROCESSES, "every process committed: {nodes:?}");
}

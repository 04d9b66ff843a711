//! Pieces of the multi-node tests: a commit log written inside every fenced stage commit, and
//! node processes (the test binary itself, re-run with an environment variable that selects
//! a node entry test).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use shardbox::core::storage::{EntityKey, EntityStateWrite};
use shardbox::core::Conveyor;
use shardbox::{DeliveryError, Station};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The entity kind under which [`CommitLog`] writes its entries.
pub const COMMIT_LOG_KIND: &str = "commit-log";

/// One committed stage, as recorded by [`CommitLog`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitEntry {
    pub shard: u32,
    pub epoch: i64,
    pub node: String,
    /// `seq` of the first row of the stage's page.
    pub first_seq: i64,
    pub rows: usize,
    /// The stage's time, µs since the epoch.
    pub at_micros: i64,
    /// When the lease the stage ran under was picked up, µs since the epoch.
    pub picked_micros: i64,
}

/// A station that records every stage in the stage's own commit: an entity state of kind
/// [`COMMIT_LOG_KIND`] keyed `<shard>/<epoch>/<node>/<first seq>`. State writes commit in the
/// fenced transaction, so an entry exists exactly when its stage committed — which is what
/// lets a test check that no two nodes ever committed under the same (shard, epoch).
pub struct CommitLog;

#[async_trait]
impl Station for CommitLog {
    fn name(&self) -> &str {
        "commit-log"
    }

    async fn process(&self, conveyor: &mut Conveyor) -> Result<(), DeliveryError> {
        let lease = conveyor.lease();
        let entry = CommitEntry {
            shard: lease.shard.0,
            epoch: lease.epoch.0,
            node: lease.node_id.0.clone(),
            first_seq: conveyor.page().first().map_or(0, |m| m.seq),
            rows: conveyor.page().len(),
            at_micros: conveyor.now().timestamp_micros(),
            picked_micros: lease.picked_at.timestamp_micros(),
        };
        conveyor.set_state(entry.state_write());
        Ok(())
    }
}

impl CommitEntry {
    /// The entity state that records this entry.
    pub fn state_write(&self) -> EntityStateWrite {
        EntityStateWrite {
            key: EntityKey {
                kind: COMMIT_LOG_KIND.into(),
                tenant: String::new(),
                id: format!(
                    "{}/{}/{}/{}",
                    self.shard, self.epoch, self.node, self.first_seq
                ),
            },
            state: Some(serde_json::to_vec(self).expect("a commit-log entry serializes")),
            state_version: 1,
        }
    }
}

#[derive(diesel::QueryableByName)]
struct StateRow {
    #[diesel(sql_type = diesel::sql_types::Binary)]
    state: Vec<u8>,
}

const COMMIT_LOG_SQL: &str = "SELECT state FROM entity_states WHERE kind = 'commit-log'";

/// Every commit-log entry of a PostgreSQL schema.
pub fn pg_commit_log(url: &str, schema: &str) -> Vec<CommitEntry> {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, RunQueryDsl};
    let mut conn = diesel::PgConnection::establish(url).expect("connect");
    conn.batch_execute(&format!("SET search_path TO \"{schema}\""))
        .expect("search_path");
    let rows: Vec<StateRow> = diesel::sql_query(COMMIT_LOG_SQL)
        .load(&mut conn)
        .expect("read the commit log");
    parse_entries(rows)
}

/// Every commit-log entry of an SQLite file.
pub fn sqlite_commit_log(path: &std::path::Path) -> Vec<CommitEntry> {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, RunQueryDsl};
    let mut conn =
        diesel::SqliteConnection::establish(&path.display().to_string()).expect("open SQLite");
    conn.batch_execute("PRAGMA busy_timeout = 10000")
        .expect("busy_timeout");
    let rows: Vec<StateRow> = diesel::sql_query(COMMIT_LOG_SQL)
        .load(&mut conn)
        .expect("read the commit log");
    parse_entries(rows)
}

fn parse_entries(rows: Vec<StateRow>) -> Vec<CommitEntry> {
    rows.into_iter()
        .map(|r| serde_json::from_slice(&r.state).expect("a commit-log entry"))
        .collect()
}

/// The (shard, epoch) pairs under which more than one node committed: must be empty.
pub fn shared_epochs(log: &[CommitEntry]) -> Vec<((u32, i64), BTreeSet<String>)> {
    let mut nodes: BTreeMap<(u32, i64), BTreeSet<String>> = BTreeMap::new();
    for e in log {
        nodes
            .entry((e.shard, e.epoch))
            .or_default()
            .insert(e.node.clone());
    }
    nodes.into_iter().filter(|(_, n)| n.len() > 1).collect()
}

/// A child process running one entry test of this test binary, talking over stdin/stdout;
/// the lines that matter start with `SBX-`.
pub struct NodeProcess {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl NodeProcess {
    /// Re-runs this test binary's test `entry` with `env` set (the entry checks for it).
    pub fn spawn(name: &str, entry: &str, env: &[(&str, String)]) -> Self {
        let exe = std::env::current_exe().expect("current test binary");
        let mut cmd = Command::new(exe);
        cmd.args([entry, "--exact", "--nocapture", "--test-threads=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn a node process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(mut line) = line else { break };
                // libtest's "test <name> ... " has no newline: it prefixes the first line.
                if let Some(at) = line.find("SBX-") {
                    line.drain(..at);
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        NodeProcess {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// Waits for a line starting with `prefix`; returns it.
    pub fn wait_for(&self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Waits (a minute at most) for the node's `SBX-READY` line and returns it; panics, naming
    /// the node, if it does not come.
    pub fn ready(&self) -> String {
        self.wait_for("SBX-READY", Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{} did not start", self.name))
    }

    /// Every line up to and including the first one starting with `prefix`.
    pub fn lines_until(&self, prefix: &str, timeout: Duration) -> Option<Vec<String>> {
        let deadline = Instant::now() + timeout;
        let mut lines = Vec::new();
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let line = self.lines.recv_timeout(left).ok()?;
            let last = line.starts_with(prefix);
            lines.push(line);
            if last {
                return Some(lines);
            }
        }
    }

    /// Every line the process printed that no wait has read yet, without waiting.
    pub fn drain(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// Sends one line to the process.
    pub fn tell(&mut self, line: &str) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    /// SIGKILL: no shutdown, no release, no flush.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the node");
        let _ = self.child.wait();
    }

    /// Closes stdin (the node's signal to stop gracefully) and waits for the exit.
    pub fn stop(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.stdin = None;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// In a node process: blocks until the parent closes stdin (or says `stop`).
pub fn wait_for_stop_signal() {
    wait_for_stop_signal_with(|_| {});
}

/// [`wait_for_stop_signal`], handing every other line (trimmed) to `on_line`: the parent's
/// way to tell a running node something else than `stop`.
pub fn wait_for_stop_signal_with(mut on_line: impl FnMut(&str)) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        match line {
            Ok(l) if l.trim() == "stop" => return,
            Ok(l) => on_line(l.trim()),
            Err(_) => return,
        }
    }
}

/// `per_shard` ids of `kind` (`{prefix}-{n}`, the first that land there) in each of the
/// `shards` shards, in the order found.
pub fn ids_per_shard(
    sb: &shardbox::Shardbox,
    kind: &str,
    prefix: &str,
    shards: u32,
    per_shard: usize,
) -> Vec<String> {
    let mut counts = vec![0; shards as usize];
    let total = shards as usize * per_shard;
    let mut ids = Vec::with_capacity(total);
    for t in 0.. {
        if ids.len() == total {
            break;
        }
        let id = format!("{prefix}-{t}");
        let shard = sb.shard_of(kind, &id).0 as usize;
        if counts[shard] < per_shard {
            counts[shard] += 1;
            ids.push(id);
        }
    }
    ids
}

/// The number after `key=` in an `SBX-` line (`SBX-STOPPED node-a delivered=12 …`).
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// Logs of a node process on stderr when `SHARDBOX_TEST_LOG` holds a filter (for example
/// `shardbox_core=debug`).
pub fn init_node_log() {
    if let Ok(filter) = std::env::var("SHARDBOX_TEST_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
}

/// A node process's life once built: starts `sb`, says `SBX-READY {node}{ready}`, serves
/// until stdin closes, shuts down and says `SBX-STOPPED {node} delivered=… stages=…
/// pick_ups=… refusals=… takeovers=… losses=…` (its counters, for the test to read).
pub async fn serve_until_stopped(sb: &shardbox::Shardbox, node: &str, ready: &str) {
    serve_until_stopped_with(sb, node, ready, |_| {}).await;
}

/// [`serve_until_stopped`], handing every line the parent sends other than `stop` to
/// `on_line` (see [`wait_for_stop_signal_with`]).
pub async fn serve_until_stopped_with(
    sb: &shardbox::Shardbox,
    node: &str,
    ready: &str,
    on_line: impl FnMut(&str) + Send + 'static,
) {
    let running = sb.start();
    println!("SBX-READY {node}{ready}");
    tokio::task::spawn_blocking(move || wait_for_stop_signal_with(on_line))
        .await
        .expect("stdin");
    running.shutdown().await.expect("shutdown");
    let m = sb.metrics();
    println!(
        "SBX-STOPPED {node} delivered={} stages={} pick_ups={} refusals={} takeovers={} losses={}",
        m.delivered,
        m.stages,
        m.lease_pick_ups,
        m.lease_refusals,
        m.lease_takeovers,
        m.lease_losses
    );
}

/// Where the node processes of a test keep their data: one PostgreSQL schema or one SQLite
/// file, shared by every process.
#[derive(Clone, Debug)]
pub enum Store {
    Postgres { url: String, schema: String },
    Sqlite(std::path::PathBuf),
}

impl Store {
    /// `pg:<schema>` or `sqlite:<path>`, for a node process's environment (see
    /// [`Store::from_spec`]).
    pub fn spec(&self) -> String {
        match self {
            Store::Postgres { schema, .. } => format!("pg:{schema}"),
            Store::Sqlite(path) => format!("sqlite:{}", path.display()),
        }
    }

    /// The store [`Store::spec`] names; the PostgreSQL URL comes from `SHARDBOX_PG_URL`.
    pub fn from_spec(spec: &str) -> Store {
        match spec.split_once(':') {
            Some(("pg", schema)) => Store::Postgres {
                url: std::env::var("SHARDBOX_PG_URL").expect("SHARDBOX_PG_URL in a node process"),
                schema: schema.to_owned(),
            },
            Some(("sqlite", path)) => Store::Sqlite(path.into()),
            _ => panic!("a store is pg:<schema> or sqlite:<path>, not {spec}"),
        }
    }

    /// Opens the store (`pool_size` PostgreSQL connections; SQLite keeps its default).
    pub async fn open(&self, pool_size: u32) -> std::sync::Arc<dyn shardbox::core::Storage> {
        match self {
            Store::Postgres { url, schema } => {
                let options = shardbox::storage::PostgresOptions::default()
                    .schema(schema.clone())
                    .pool_size(pool_size);
                std::sync::Arc::new(
                    shardbox::storage::PostgresStorage::connect_with(url.clone(), options)
                        .await
                        .expect("connect"),
                )
            }
            Store::Sqlite(path) => std::sync::Arc::new(
                shardbox::storage::SqliteStorage::open(path)
                    .await
                    .expect("open SQLite"),
            ),
        }
    }

    /// Every commit-log entry of the store.
    pub fn commit_log(&self) -> Vec<CommitEntry> {
        match self {
            Store::Postgres { url, schema } => pg_commit_log(url, schema),
            Store::Sqlite(path) => sqlite_commit_log(path),
        }
    }
}

/// The node every multi-node test runs: `shards` shards, `lease` and `poll`, `workers`
/// workers, the [`Tally`](super::Tally) aggregate, over `storage`.
pub fn tally_node(
    storage: std::sync::Arc<dyn shardbox::core::Storage>,
    shards: u32,
    lease: Duration,
    poll: Duration,
    workers: usize,
) -> shardbox::ShardboxBuilder {
    shardbox::Shardbox::builder()
        .shared_storage(storage)
        .shards(shards)
        .lease_duration(lease)
        .poll_interval(poll)
        .workers(workers)
        .aggregate::<super::Tally>()
}

/// The runtime of a node process or a multi-node test: multi-threaded, every driver on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Asserts that each of `targets` tally targets (`tally-0`, …) applied `Record(0)` to
/// `Record(rounds - 1)` once each, in that order, in the framework-kept state of `storage`.
pub async fn assert_tallies_applied_once_in_order(
    storage: &dyn shardbox::core::Storage,
    targets: usize,
    rounds: u64,
) {
    let keys: Vec<shardbox::core::storage::EntityKey> = (0..targets)
        .map(|t| shardbox::core::storage::EntityKey {
            kind: "tally".into(),
            tenant: String::new(),
            id: format!("tally-{t}"),
        })
        .collect();
    let states = storage.load_states(&keys).await.expect("states");
    assert_eq!(states.len(), targets, "every target has a state");
    let want: Vec<u64> = (0..rounds).collect();
    for s in &states {
        let tally: super::Tally = serde_json::from_slice(&s.state).expect("a tally");
        assert_eq!(
            tally.applied, want,
            "{}: each command once, in order",
            s.key.id
        );
    }
}

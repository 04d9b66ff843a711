//! Cluster: several node processes share one PostgreSQL database; traffic flows while the
//! example prints who serves which shards and how fast, kills one node with SIGKILL halfway,
//! shows the other nodes taking its shards over, and checks at the end that every command was
//! applied exactly once.
//!
//! ```sh
//! SHARDBOX_PG_URL=postgres://postgres@127.0.0.1:5432/test cargo run --release --example cluster
//! ```
//!
//! Options: `--nodes N` (default 3), `--seconds S` of traffic (default 6), `--rate R` commands
//! per second (default 2000), `--no-kill`. It works in a schema of its own
//! (`shardbox_cluster_<pid>`), dropped at the end. The node processes are this program run
//! as `cluster --node <i> --schema <schema>`; set `RUST_LOG=info` to see their logs.

use serde::{Deserialize, Serialize};
use shardbox::core::storage::ShardSession;
use shardbox::prelude::*;
use shardbox::storage::{PostgresOptions, PostgresStorage};
use shardbox::NodeId;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: u32 = 32;
const ACCOUNTS: usize = 500;
const LEASE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(250);

/// A counter per account: the framework keeps its state.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Counter {
    value: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Increment;

impl Message for Increment {
    const TYPE: &'static str = "cluster.increment";
}

#[derive(Debug, Serialize, Deserialize)]
struct Incremented;

impl Message for Incremented {
    const TYPE: &'static str = "cluster.incremented";
}

impl Aggregate for Counter {
    const KIND: &'static str = "counter";
    type Command = Increment;
    type Event = Incremented;

    async fn handle(
        &self,
        _: &Increment,
        _: &Context<'_>,
    ) -> Result<Vec<Incremented>, HandlerError> {
        Ok(vec![Incremented])
    }

    fn apply(&mut self, _: &Incremented) {
        self.value += 1;
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    nodes: usize,
    seconds: u64,
    rate: u64,
    kill: bool,
    node: Option<usize>,
    schema: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        nodes: 3,
        seconds: 6,
        rate: 2000,
        kill: true,
        node: None,
        schema: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let number = |v: String, name: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{name} takes a number, not {v:?}"))
        };
        match arg.as_str() {
            "--nodes" => args.nodes = number(value("--nodes")?, "--nodes")?.max(1) as usize,
            "--seconds" => args.seconds = number(value("--seconds")?, "--seconds")?.max(1),
            "--rate" => args.rate = number(value("--rate")?, "--rate")?.max(1),
            "--no-kill" => args.kill = false,
            "--node" => args.node = Some(number(value("--node")?, "--node")? as usize),
            "--schema" => args.schema = Some(value("--schema")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!(
                "cluster: {e}\nusage: cluster [--nodes N] [--seconds S] [--rate R] [--no-kill]"
            );
            return ExitCode::from(2);
        }
    };
    let Ok(url) = std::env::var("SHARDBOX_PG_URL") else {
        eprintln!(
            "cluster: SHARDBOX_PG_URL is not set. This example needs a PostgreSQL database, e.g.\n  \
             SHARDBOX_PG_URL=postgres://postgres@127.0.0.1:5432/test cargo run --release --example cluster"
        );
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cluster: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match (args.node, args.schema.clone()) {
        (Some(i), Some(schema)) => runtime.block_on(run_node(url, schema, i)),
        _ => runtime.block_on(run_cluster(url, args)),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn shardbox(url: String, schema: &str, node: &str) -> Result<Shardbox, Error> {
    let options = PostgresOptions::default()
        .schema(schema.to_owned())
        .pool_size(8);
    let storage = PostgresStorage::connect_with(url, options).await?;
    Ok(Shardbox::builder()
        .storage(storage)
        .shards(SHARDS)
        .lease_duration(LEASE)
        .poll_interval(POLL)
        .node_id(NodeId(node.into()))
        .aggregate::<Counter>()
        .build()
        .await?)
}

/// A node process: serves until stdin closes, printing its delivered count four times a
/// second.
async fn run_node(url: String, schema: String, i: usize) -> Result<bool, Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let name = format!("node-{i}");
    let sb = shardbox(url, &schema, &name).await?;
    let node = sb.start();
    println!("ready");
    let reporter = {
        let sb = sb.clone();
        tokio::spawn(async move {
            loop {
                println!("delivered {}", sb.metrics().delivered);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    tokio::task::spawn_blocking(|| {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            if line.is_err() {
                break;
            }
        }
    })
    .await?;
    reporter.abort();
    node.shutdown().await?;
    println!("delivered {}", sb.metrics().delivered);
    Ok(true)
}

/// A node process seen from the parent: its latest delivered count.
struct NodeProcess {
    name: String,
    child: Child,
    delivered: Arc<Mutex<u64>>,
    ready: std::sync::mpsc::Receiver<()>,
}

fn spawn_node(i: usize, schema: &str) -> Result<NodeProcess, Error> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--node", &i.to_string(), "--schema", schema])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let delivered = Arc::new(Mutex::new(0));
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let count = delivered.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "ready" {
                let _ = ready_tx.send(());
            } else if let Some(n) = line.strip_prefix("delivered ") {
                if let (Ok(n), Ok(mut c)) = (n.parse(), count.lock()) {
                    *c = n;
                }
            }
        }
    });
    Ok(NodeProcess {
        name: format!("node-{i}"),
        child,
        delivered,
        ready,
    })
}

impl NodeProcess {
    fn delivered(&self) -> u64 {
        self.delivered.lock().map(|c| *c).unwrap_or(0)
    }
}

async fn run_cluster(url: String, args: Args) -> Result<bool, Error> {
    let schema = format!("shardbox_cluster_{}", std::process::id());
    let sender = shardbox(url.clone(), &schema, "sender").await?;
    let result = drive(&sender, &schema, &args).await;
    drop_schema(&url, &schema);
    result
}

/// Runs the cluster: starts the nodes, sends the traffic while printing who serves what every
/// second (killing node-0 halfway unless `--no-kill`), then checks every command was applied
/// once.
async fn drive(sender: &Shardbox, schema: &str, args: &Args) -> Result<bool, Error> {
    let mut nodes = start_nodes(schema, args)?;
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let traffic = tokio::spawn(send_traffic(
        sender.clone(),
        args.rate,
        Duration::from_secs(args.seconds),
        sent.clone(),
    ));
    let started = Instant::now();
    let mut killed: Option<Kill> = None;
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let sessions = sender.storage().sessions().await?;
        let now = chrono::Utc::now();
        let pending = sender.storage().counts(None).await?.pending();
        println!(
            "\n{:>4.1}s  sent {}  pending {pending}",
            started.elapsed().as_secs_f64(),
            sent.load(std::sync::atomic::Ordering::Relaxed)
        );
        print_nodes(&nodes, &sessions, now, &mut last, killed.is_some());
        if let Some(kill) = &mut killed {
            kill.report_takeovers(&sessions);
        }
        let half = Duration::from_secs(args.seconds) / 2;
        if args.kill && killed.is_none() && started.elapsed() >= half && !nodes.is_empty() {
            killed = Some(Kill::first_node(sender, &mut nodes[0]).await?);
        }
        if traffic.is_finished() && pending == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(args.seconds + 60) {
            return Err("the cluster did not drain within a minute after the traffic".into());
        }
    }
    traffic.await??;
    stop_nodes(&mut nodes);
    check_applied(sender, &sent, started, args).await
}

/// Starts `--nodes` node processes and waits until each is ready.
fn start_nodes(schema: &str, args: &Args) -> Result<Vec<NodeProcess>, Error> {
    let mut nodes = Vec::new();
    for i in 0..args.nodes {
        nodes.push(spawn_node(i, schema)?);
    }
    for n in &nodes {
        n.ready
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| format!("{} did not start", n.name))?;
    }
    println!(
        "{} nodes serve {SHARDS} shards (lease {LEASE:?}, poll {POLL:?}); sending {}/s for {}s",
        args.nodes, args.rate, args.seconds
    );
    Ok(nodes)
}

/// One line per node: the leases it holds, the shards it last served, what it delivered in
/// all and since the last line (`last`).
fn print_nodes(
    nodes: &[NodeProcess],
    sessions: &[ShardSession],
    now: chrono::DateTime<chrono::Utc>,
    last: &mut HashMap<String, u64>,
    killed: bool,
) {
    println!("  node      holding  last served  delivered    /s");
    for n in nodes {
        let holding = sessions
            .iter()
            .filter(|s| s.node_id.as_ref().is_some_and(|id| id.0 == n.name))
            .filter(|s| s.lease_until.is_some_and(|u| u > now))
            .count();
        let served = sessions
            .iter()
            .filter(|s| s.node_id.as_ref().is_some_and(|id| id.0 == n.name))
            .count();
        let delivered = n.delivered();
        let rate = delivered - last.insert(n.name.clone(), delivered).unwrap_or(0);
        let dead = if killed && n.name == "node-0" {
            "  (killed)"
        } else {
            ""
        };
        println!(
            "  {:<8}  {holding:>7}  {served:>11}  {delivered:>9}  {rate:>5}{dead}",
            n.name
        );
    }
}

/// The kill of node-0: when, and the shards it held (with their epochs then) that no other
/// node has taken over yet.
struct Kill {
    at: chrono::DateTime<chrono::Utc>,
    orphaned: BTreeMap<u32, i64>,
}

impl Kill {
    /// Kills `node` (node-0) with SIGKILL and notes the shards whose leases it held.
    async fn first_node(sender: &Shardbox, node: &mut NodeProcess) -> Result<Kill, Error> {
        node.child.kill()?;
        let _ = node.child.wait();
        let at = chrono::Utc::now();
        let orphaned: BTreeMap<u32, i64> = sender
            .storage()
            .sessions()
            .await?
            .into_iter()
            .filter(|s| s.node_id.as_ref().is_some_and(|id| id.0 == "node-0"))
            .filter(|s| s.lease_until.is_some_and(|u| u > at))
            .map(|s| (s.shard.0, s.epoch.0))
            .collect();
        println!(
            "\n  >>> killed node-0 (SIGKILL) holding shards {:?}; their leases run out within {LEASE:?}",
            orphaned.keys().collect::<Vec<_>>()
        );
        Ok(Kill { at, orphaned })
    }

    /// Prints each orphaned shard another node has picked up since, once.
    fn report_takeovers(&mut self, sessions: &[ShardSession]) {
        for s in sessions {
            let Some(&before) = self.orphaned.get(&s.shard.0) else {
                continue;
            };
            if let (true, Some(by)) = (s.epoch.0 > before, &s.node_id) {
                println!(
                    "  shard {:>2} of node-0: taken over by {by} (epoch {before} → {}) {:.1}s after the kill",
                    s.shard,
                    s.epoch,
                    s.picked_at
                        .and_then(|p| (p - self.at).to_std().ok())
                        .unwrap_or_default()
                        .as_secs_f64()
                );
                self.orphaned.remove(&s.shard.0);
            }
        }
    }
}

/// Closes the nodes' stdin (they shut down) and waits for them to exit.
fn stop_nodes(nodes: &mut [NodeProcess]) {
    for n in nodes.iter_mut() {
        drop(n.child.stdin.take());
    }
    for n in nodes.iter_mut() {
        let _ = n.child.wait();
    }
}

/// Whether the framework-kept counters add up to what was sent (printed either way).
async fn check_applied(
    sender: &Shardbox,
    sent: &std::sync::atomic::AtomicU64,
    started: Instant,
    args: &Args,
) -> Result<bool, Error> {
    // The framework-kept counters must add up to what was sent.
    let keys: Vec<_> = (0..ACCOUNTS)
        .map(|a| shardbox::core::storage::EntityKey {
            kind: Counter::KIND.into(),
            tenant: String::new(),
            id: format!("account-{a}"),
        })
        .collect();
    let mut applied = 0;
    for state in sender.storage().load_states(&keys).await? {
        applied += serde_json::from_slice::<Counter>(&state.state)?.value;
    }
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "\n{sent} commands sent, {applied} applied to the counters in {secs:.1}s ({:.0}/s)",
        applied as f64 / secs
    );
    if applied == sent {
        println!(
            "every command applied exactly once, across {} nodes and a crash",
            args.nodes
        );
        Ok(true)
    } else {
        println!("MISMATCH: {sent} sent but {applied} applied");
        Ok(false)
    }
}

/// Sends `rate` commands a second for `duration` to `ACCOUNTS` counters: every 100 ms, a
/// tenth of the second's commands in one write.
async fn send_traffic(
    sender: Shardbox,
    rate: u64,
    duration: Duration,
    sent: Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), Error> {
    let per_tick = (rate / 10).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let end = Instant::now() + duration;
    let mut n = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        let ids: Vec<String> = (n..n + per_tick)
            .map(|i| format!("account-{}", i % ACCOUNTS as u64))
            .collect();
        let commands: Vec<(&str, Increment)> =
            ids.iter().map(|id| (id.as_str(), Increment)).collect();
        let report = sender.send_many::<Counter>(&commands).await?;
        sent.fetch_add(report.written as u64, std::sync::atomic::Ordering::Relaxed);
        n += per_tick;
    }
    Ok(())
}

fn drop_schema(url: &str, schema: &str) {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;
    let dropped = diesel::PgConnection::establish(url)
        .map_err(|e| e.to_string())
        .and_then(|mut c| {
            c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .map_err(|e| e.to_string())
        });
    if let Err(e) = dropped {
        eprintln!("cluster: could not drop schema {schema}: {e}");
    }
}

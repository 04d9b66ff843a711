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

//!
//! ```text
//!  main.rs  the parent: arguments, the run (nodes, traffic, the table each second, the kill),
//!           the final check
//!  node.rs  a node process's main, and the parent's handle on each node process
//!  app.rs   the counter aggregate and the node's settings, shared by both
//! ```

mod app;
mod node;

use app::{shardbox, Counter, Error, Increment, ACCOUNTS, LEASE, POLL, SHARDS};
use node::{print_nodes, run_node, start_nodes, stop_nodes, NodeProcess};
use shardbox::core::storage::ShardSession;
use shardbox::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    let mut nodes = start_nodes(args.nodes, schema)?;
    println!(
        "{} nodes serve {SHARDS} shards (lease {LEASE:?}, poll {POLL:?}); sending {}/s for {}s",
        args.nodes, args.rate, args.seconds
    );
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

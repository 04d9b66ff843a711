//! The node processes: a node process's main (this program run as
//! `cluster --node <i> --schema <schema>`), and the parent's handle on each one — started,
//! read for its delivered count, shown as a line of the table, stopped.

use crate::app::{shardbox, Error};
use shardbox::core::storage::ShardSession;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A node process: serves until stdin closes, printing its delivered count four times a
/// second.
pub async fn run_node(url: String, schema: String, i: usize) -> Result<bool, Error> {
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
pub struct NodeProcess {
    pub name: String,
    pub child: Child,
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
    pub fn delivered(&self) -> u64 {
        self.delivered.lock().map(|c| *c).unwrap_or(0)
    }
}

/// Starts `count` node processes and waits until each is ready.
pub fn start_nodes(count: usize, schema: &str) -> Result<Vec<NodeProcess>, Error> {
    let mut nodes = Vec::new();
    for i in 0..count {
        nodes.push(spawn_node(i, schema)?);
    }
    for n in &nodes {
        n.ready
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| format!("{} did not start", n.name))?;
    }
    Ok(nodes)
}

/// One line per node: the leases it holds, the shards it last served, what it delivered in
/// all and since the last line (`last`).
pub fn print_nodes(
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

/// Closes the nodes' stdin (they shut down) and waits for them to exit.
pub fn stop_nodes(nodes: &mut [NodeProcess]) {
    for n in nodes.iter_mut() {
        drop(n.child.stdin.take());
    }
    for n in nodes.iter_mut() {
        let _ = n.child.wait();
    }
}

//! The `cluster` workload with its nodes as separate OS processes: 1 node process vs
//! `--nodes` node processes on the same workload, on PostgreSQL.
//!
//! ```text
//!  parent (this binary, --workload cluster)          node process (this binary, --node-process)
//!  fresh schema, migrated ─► spawn k node processes ─► build the node over the schema, start,
//!                                                      wait until its listener is connected
//!  wait for "ready" from each  ◄────────────────────── print "ready"
//!  sender (a Shardbox never started) sends N
//!  commands; every write NOTIFYs ───────────────────► LISTEN wakes the shard's worker (the node
//!                                                      holding its lease delivers)
//!  every 5 ms: "count" to each ───────────────────────► "count delivered=N" (its metrics)
//!  once the sum reaches N: confirm in the schema
//!  that no row waits for delivery
//!  "stop" + close stdin ──────────────────────────────► shut down (leases released), print
//!                                                      "stopped delivered=… stages=… …", exit 0
//!  check every counter (nothing lost, nothing twice)
//! ```
//!
//! The rate is N over the time from the first send until every message is delivered: the
//! node processes' delivered counts (counted after each stage's commit) add up to N *and* no
//! row of the schema waits for delivery. The parent asks the nodes rather than polling the
//! database every few milliseconds, because the database query is not free (a probe of the
//! delivery index per shard, walking past the entries of rows delivered since the last
//! vacuum: about 5 ms at 100,000 rows) and the database shares the cores with the nodes; it
//! runs the query only once the counts say the work is done. Node processes inherit stderr,
//! so their errors show in the run's output; a node that exits before it is told to, or with
//! a non-zero status, fails the run.
//! Node processes are killed if the parent drops them on an error path (`kill_on_drop`), and
//! stop by themselves when their stdin closes (the parent died).
//!
//! ```text
//!  mod       the parent: a run (start, send, await delivery, stop, check) and the rounds
//!  node      the node process's main
//!  process   the parent's handle on a node process, and the figures it reports
//!  pending   rows still waiting for delivery in the run's schema
//!  protocol  the lines, pool size and time limits both sides use
//!  cpu       CPU time of this process and of the machine
//! ```

mod cpu;
mod node;
mod pending;
mod process;
mod protocol;

use crate::args::{Args, Backend};
use crate::backend::Db;
use crate::report::Report;
use crate::traffic::{check, send_all, shardbox};
use cpu::{cpu_seconds, machine_ticks};
use pending::Pending;
use process::{NodeProcess, NodeStats};
use protocol::{DELIVERY_LIMIT, POLL, POOL, PROGRESS, READY, START_STOP_TIMEOUT};
use std::time::Instant;

pub use node::serve_node;

/// What one run with `nodes` node processes measured.
struct ClusterRun {
    rate: f64,
    stats: Vec<NodeStats>,
    /// The share of the machine's CPU time (all cores, every process, other users' too) that
    /// was busy while the run was timed.
    busy: f64,
}

impl ClusterRun {
    /// CPU seconds of the run's node processes together (start to stop).
    fn cpu(&self) -> f64 {
        self.stats.iter().map(|s| s.get("cpu_s")).sum()
    }
}

/// One run: a fresh schema, `nodes` node processes, N commands from the parent.
async fn run_once(a: &Args, nodes: usize) -> Result<ClusterRun, String> {
    let db = Db::new(Backend::Postgres)?;
    let (url, schema) = db.pg().cloned().ok_or("no PostgreSQL schema")?;
    // Connecting migrates the fresh schema before any node process starts.
    let sender = shardbox(db.storage(POOL).await?, a, "bench-sender").await?;
    let mut procs = start_nodes(a, &url, &schema, nodes).await?;
    let mut pending = Pending::connect(&url, &schema, a.shards)?;
    let cpu_before = cpu_seconds();
    let machine_before = machine_ticks();
    let started = Instant::now();
    send_all(&sender, a.n, a.targets, a.batch).await?;
    let sent = started.elapsed();
    await_delivery(a, nodes, &mut procs, &mut pending, started).await?;
    let elapsed = started.elapsed();
    let parent_cpu = cpu_seconds() - cpu_before;
    let machine_after = machine_ticks();
    let total = machine_after.2.saturating_sub(machine_before.2).max(1) as f64;
    let busy = machine_after.0.saturating_sub(machine_before.0) as f64 / total;
    let iowait = machine_after.1.saturating_sub(machine_before.1) as f64 / total;
    let rate = a.n as f64 / elapsed.as_secs_f64();
    let stats = stop_nodes(procs).await?;
    let (lost, duplicates) = check(&sender, a.n, a.targets).await?;
    eprintln!(
        "{nodes} node process(es): {rate:.0} msgs/s (sent in {:.2} s, all delivered at {:.2} s; \
         the sending parent used {parent_cpu:.2} s of CPU; the machine's cores were {:.0} % \
         busy, {:.0} % in I/O wait)",
        sent.as_secs_f64(),
        elapsed.as_secs_f64(),
        busy * 100.0,
        iowait * 100.0
    );
    print_nodes(a, &stats);
    if lost + duplicates > 0 {
        return Err(format!(
            "{nodes} node process(es): lost {lost}, duplicates {duplicates}"
        ));
    }
    Ok(ClusterRun { rate, stats, busy })
}

/// Starts `nodes` node processes on the run's schema and waits until each is ready.
async fn start_nodes(
    a: &Args,
    url: &str,
    schema: &str,
    nodes: usize,
) -> Result<Vec<NodeProcess>, String> {
    let mut procs = Vec::with_capacity(nodes);
    for i in 0..nodes {
        procs.push(NodeProcess::spawn(
            a,
            url,
            schema,
            &format!("bench-node-{i}"),
        )?);
    }
    for p in &mut procs {
        p.wait_for(READY, START_STOP_TIMEOUT).await?;
    }
    let pids: Vec<u32> = procs.iter().filter_map(|p| p.child.id()).collect();
    eprintln!(
        "{nodes} node process(es) ready (pids {pids:?}, schema {schema}); sending {}…",
        a.n
    );
    Ok(procs)
}

/// Waits until the node processes' delivered counts add up to N and no row of the schema
/// waits for delivery (at most `DELIVERY_LIMIT` from `started`), printing the progress.
async fn await_delivery(
    a: &Args,
    nodes: usize,
    procs: &mut [NodeProcess],
    pending: &mut Pending,
    started: Instant,
) -> Result<(), String> {
    let mut progress = Instant::now();
    loop {
        for p in procs.iter_mut() {
            p.still_running()?;
        }
        let mut delivered = 0;
        for p in procs.iter_mut() {
            delivered += p.delivered().await?;
        }
        if delivered >= a.n as u64 && pending.shards().await? == 0 {
            return Ok(());
        }
        if started.elapsed() > DELIVERY_LIMIT {
            let left = pending.rows().await?;
            return Err(format!(
                "{nodes} node process(es): {delivered} delivered, {left} rows still waiting \
                 after {DELIVERY_LIMIT:?}"
            ));
        }
        if progress.elapsed() >= PROGRESS {
            progress = Instant::now();
            eprintln!(
                "  {:.1} s: {delivered} of {} delivered",
                started.elapsed().as_secs_f64(),
                a.n
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Stops the node processes and returns what each reported.
async fn stop_nodes(mut procs: Vec<NodeProcess>) -> Result<Vec<NodeStats>, String> {
    // Tell every process first, so that they shut down side by side.
    for p in &mut procs {
        p.tell_stop().await;
    }
    let mut stats = Vec::with_capacity(procs.len());
    for p in procs {
        stats.push(p.finish().await?);
    }
    Ok(stats)
}

/// Prints each node process's figures, and a note if their deliveries do not add up to N.
fn print_nodes(a: &Args, stats: &[NodeStats]) {
    for s in stats {
        let delivered = s.get("delivered");
        eprintln!(
            "  {}: delivered {delivered:.0} ({:.1} %), stages {:.0}, pick-ups {:.0}, \
             take-overs {:.0}, refusals {:.0}, lease losses {:.0}, notifications heard {:.0}, \
             CPU {:.2} s, peak RSS {:.1} MiB",
            s.name,
            100.0 * delivered / a.n as f64,
            s.get("stages"),
            s.get("pick_ups"),
            s.get("takeovers"),
            s.get("refusals"),
            s.get("lease_losses"),
            s.get("notifications"),
            s.get("cpu_s"),
            s.get("peak_rss_mib"),
        );
    }
    let delivered: f64 = stats.iter().map(|s| s.get("delivered")).sum();
    if delivered as usize != a.n {
        eprintln!(
            "  note: the node processes report {delivered:.0} deliveries for {} commands",
            a.n
        );
    }
}

/// The `cluster` workload: `--rounds` rounds of one node process, then `--nodes` node
/// processes, each run on a fresh schema; `cluster_ratio` = the mean rate with `--nodes` / the
/// mean rate with one (and the least and greatest ratio of a round).
pub async fn run(a: &Args) -> Result<Report, String> {
    if a.backend != Backend::Postgres {
        return Err("the cluster workload needs --backend postgres".into());
    }
    // 1 node, K nodes, 1 node, K nodes, …: a machine that slows down or speeds up during the
    // series weighs on both sides alike, where one pair would credit its drift to the cluster.
    let (mut ones, mut manys) = (Vec::new(), Vec::new());
    for round in 0..a.rounds {
        let one = run_once(a, 1).await?;
        let many = run_once(a, a.nodes).await?;
        eprintln!(
            "round {}: 1 node {:.0} msgs/s, {} nodes {:.0} msgs/s, ratio {:.3}",
            round + 1,
            one.rate,
            a.nodes,
            many.rate,
            many.rate / one.rate
        );
        ones.push(one);
        manys.push(many);
    }
    let mean = |runs: &[ClusterRun]| runs.iter().map(|r| r.rate).sum::<f64>() / runs.len() as f64;
    let (rate_one, rate_many) = (mean(&ones), mean(&manys));
    let ratios: Vec<f64> = ones
        .iter()
        .zip(&manys)
        .map(|(o, m)| m.rate / o.rate)
        .collect();
    let (Some(one), Some(many)) = (ones.last(), manys.last()) else {
        return Err("--rounds must be > 0".into());
    };
    let delivered: Vec<f64> = many.stats.iter().map(|s| s.get("delivered")).collect();
    let fair = delivered.iter().sum::<f64>() / delivered.len().max(1) as f64;
    let least = delivered.iter().copied().fold(f64::INFINITY, f64::min);
    let mut r = Report {
        workload: a.workload.name(),
        backend: Backend::Postgres.name(),
        n: a.n,
        msgs_per_s: rate_many,
        ..Report::default()
    };
    r.extra.push(("rate_1_node", rate_one));
    r.extra.push(("rate_n_nodes", rate_many));
    r.extra.push(("nodes", a.nodes as f64));
    r.extra.push(("rounds", a.rounds as f64));
    r.extra.push(("cluster_ratio", rate_many / rate_one));
    r.extra.push((
        "cluster_ratio_min",
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
    ));
    r.extra.push((
        "cluster_ratio_max",
        ratios.iter().copied().fold(0.0, f64::max),
    ));
    // Of the last round: CPU seconds of all node processes together, per run (what more
    // nodes cost on top), the machine's busy share, and the spread over the nodes.
    r.extra.push(("node_cpu_s_1_node", one.cpu()));
    r.extra.push(("node_cpu_s_n_nodes", many.cpu()));
    r.extra.push(("machine_busy_1_node", one.busy));
    r.extra.push(("machine_busy_n_nodes", many.busy));
    // The least busy node's share against an even split (1.0: even).
    r.extra.push((
        "min_node_share",
        if fair > 0.0 { least / fair } else { 0.0 },
    ));
    // Each node's share of all deliveries (of the last round with `--nodes` nodes), and the
    // least of them (1 / nodes: even).
    let total: f64 = delivered.iter().sum();
    r.node_shares = many
        .stats
        .iter()
        .map(|s| (s.name.clone(), s.get("delivered") / total.max(1.0)))
        .collect();
    r.extra.push(("least_share", least / total.max(1.0)));
    Ok(r)
}

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

use crate::args::{Args, Backend};
use crate::backend::{postgres_storage, Db};
use crate::report::{peak_rss_mib, Report};
use crate::workloads::{check, send_all, shardbox};
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, RunQueryDsl};
use shardbox::Shardbox;
use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// Pooled connections per node process, and for the parent's sender.
const POOL: u32 = 4;
/// The line a node process prints once it serves the schema and hears other processes' writes.
const READY: &str = "ready";
/// The first word of a node process's answer to `count`.
const COUNT: &str = "count";
/// The first word of the line a node process prints after its clean shutdown.
const STOPPED: &str = "stopped";
/// How long a node process may take to start, and to stop once told to.
const START_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the nodes may take to deliver everything.
const DELIVERY_LIMIT: Duration = Duration::from_secs(3600);
/// How often the parent asks the node processes for their delivered counts.
const POLL: Duration = Duration::from_millis(5);
/// How often the parent prints how many messages were delivered while it waits.
const PROGRESS: Duration = Duration::from_secs(5);

/// A node process's main (`--node-process <id> --schema <schema>`): serves the schema with
/// the same settings as the other workloads' nodes until its stdin closes or a line `stop`
/// arrives, then shuts down and prints one `stopped delivered=N …` line. A line `count` is
/// answered with `count delivered=N`.
pub async fn serve_node(a: &Args, node: &str) -> Result<(), String> {
    if a.backend != Backend::Postgres {
        return Err("--node-process needs --backend postgres".into());
    }
    let schema = a.schema.as_deref().ok_or("--node-process needs --schema")?;
    let url = std::env::var("SHARDBOX_PG_URL")
        .map_err(|_| "a node process needs SHARDBOX_PG_URL".to_owned())?;
    let sb = shardbox(postgres_storage(&url, schema, POOL).await?, a, node).await?;
    let running = sb.start();
    // Ready only once the listener is connected: from then on the sender's writes wake this
    // node at once instead of at its next poll.
    let deadline = Instant::now() + START_STOP_TIMEOUT;
    loop {
        match running.listener() {
            Some(l) if l.connected => break,
            None => return Err("the storage has no listener for other processes' writes".into()),
            Some(_) if Instant::now() > deadline => {
                return Err(format!(
                    "the listener did not connect within {START_STOP_TIMEOUT:?}"
                ))
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    say(READY)?;
    serve_stdin(&sb).await?;
    let listener = running.listener().unwrap_or_default();
    running.shutdown().await.map_err(|e| e.to_string())?;
    let m = sb.metrics();
    say(&format!(
        "{STOPPED} delivered={} stages={} pick_ups={} takeovers={} refusals={} lease_losses={} \
         notifications={} listener_connects={} peak_rss_mib={:.1} cpu_s={:.2}",
        m.delivered,
        m.stages,
        m.lease_pick_ups,
        m.lease_takeovers,
        m.lease_refusals,
        m.lease_losses,
        listener.notifications,
        listener.connects,
        peak_rss_mib(),
        cpu_seconds()
    ))
}

/// CPU time (user + system) this process has used so far, in seconds, from
/// `/proc/self/stat` (in clock ticks of 1/100 s, Linux's `USER_HZ`); 0 if unknown.
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The fields after the command name, which is in parentheses and may hold spaces:
            // state is the 3rd field, utime the 14th and stime the 15th.
            let rest = &s[s.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0)
}

/// One line to the parent on stdout; an error (not a panic) if the parent is gone.
fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing `{line}` to stdout: {e}"))
}

/// Answers `count` lines on stdin; returns when stdin closes or a line `stop` arrives.
async fn serve_stdin(sb: &Shardbox) -> Result<(), String> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| format!("reading stdin: {e}"))?
    {
        match line.trim() {
            "stop" => break,
            "count" => say(&format!("{COUNT} delivered={}", sb.metrics().delivered))?,
            other => return Err(format!("unknown request `{other}` on stdin")),
        }
    }
    Ok(())
}

/// What a node process reported when it stopped: `key=value` pairs of its `stopped` line.
struct NodeStats {
    name: String,
    fields: Vec<(String, f64)>,
}

impl NodeStats {
    fn parse(name: &str, line: &str) -> Result<NodeStats, String> {
        let fields = line
            .split_whitespace()
            .skip(1)
            .map(|kv| {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("{name}: bad field `{kv}` in `{line}`"))?;
                let v = v
                    .parse()
                    .map_err(|_| format!("{name}: bad value in `{kv}`"))?;
                Ok((k.to_owned(), v))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let stats = NodeStats {
            name: name.to_owned(),
            fields,
        };
        if !stats.fields.iter().any(|(k, _)| k == "delivered") {
            return Err(format!("{name}: no delivered count in `{line}`"));
        }
        Ok(stats)
    }

    fn get(&self, key: &str) -> f64 {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0.0, |(_, v)| *v)
    }
}

/// A node process started by the parent: this binary in `--node-process` mode, killed if
/// dropped while running.
struct NodeProcess {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Lines of its stdout.
    lines: mpsc::UnboundedReceiver<String>,
}

impl NodeProcess {
    fn spawn(a: &Args, url: &str, schema: &str, name: &str) -> Result<NodeProcess, String> {
        let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["--backend", "postgres", "--node-process", name])
            .args(["--schema", schema])
            .args(["--shards", &a.shards.to_string()])
            .args(["--page-size", &a.page_size.to_string()]);
        if let Some(c) = a.cache_capacity {
            cmd.args(["--cache-capacity", &c.to_string()]);
        }
        cmd.env("SHARDBOX_PG_URL", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting node process {name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("a node process without stdout")?;
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = out.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(NodeProcess {
            name: name.to_owned(),
            child,
            stdin,
            lines,
        })
    }

    /// Waits for a line starting with `prefix` and returns it; other lines are passed on to
    /// stderr. An error if the process ends first or the line does not come in time.
    async fn wait_for(&mut self, prefix: &str, timeout: Duration) -> Result<String, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if line.starts_with(prefix) => return Ok(line),
                Ok(Some(line)) => eprintln!("{}: {line}", self.name),
                Ok(None) => {
                    let exit = match tokio::time::timeout(timeout, self.child.wait()).await {
                        Ok(Ok(status)) => status.to_string(),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "still running".into(),
                    };
                    return Err(format!(
                        "node process {} closed its stdout before `{}` ({exit})",
                        self.name,
                        prefix.trim()
                    ));
                }
                Err(_) => {
                    return Err(format!(
                        "node process {}: no `{prefix}` within {timeout:?}",
                        self.name
                    ))
                }
            }
        }
    }

    /// An error if the process has exited (it must run until told to stop).
    fn still_running(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "node process {} exited during the run: {status}",
                self.name
            )),
            Err(e) => Err(format!("node process {}: {e}", self.name)),
        }
    }

    /// The process's delivered count, asked for on its stdin.
    async fn delivered(&mut self) -> Result<u64, String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("node process {} was told to stop", self.name))?;
        if let Err(e) = stdin.write_all(b"count\n").await {
            self.still_running()?;
            return Err(format!("node process {}: {e}", self.name));
        }
        let line = self
            .wait_for(&format!("{COUNT} "), START_STOP_TIMEOUT)
            .await?;
        let stats = NodeStats::parse(&self.name, &line)?;
        Ok(stats.get("delivered") as u64)
    }

    /// Tells the process to stop: a `stop` line, then its stdin closes.
    async fn tell_stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            // A process that already died shows in `finish`.
            let _ = stdin.write_all(b"stop\n").await;
            let _ = stdin.flush().await;
        }
    }

    /// Waits for the `stopped` line and a successful exit.
    async fn finish(mut self) -> Result<NodeStats, String> {
        self.tell_stop().await;
        let line = self.wait_for(STOPPED, START_STOP_TIMEOUT).await?;
        let status = tokio::time::timeout(START_STOP_TIMEOUT, self.child.wait())
            .await
            .map_err(|_| format!("node process {} did not exit", self.name))?
            .map_err(|e| format!("node process {}: {e}", self.name))?;
        if !status.success() {
            return Err(format!("node process {} failed: {status}", self.name));
        }
        NodeStats::parse(&self.name, &line)
    }
}

/// Rows waiting for delivery: a connection of the parent's own to the run's schema.
struct Pending {
    conn: Option<PgConnection>,
    shards: u32,
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

impl Pending {
    fn connect(url: &str, schema: &str, shards: u32) -> Result<Pending, String> {
        let mut conn = PgConnection::establish(url).map_err(|e| format!("connect: {e}"))?;
        conn.batch_execute(&format!("SET search_path TO \"{schema}\""))
            .map_err(|e| format!("search_path: {e}"))?;
        Ok(Pending {
            conn: Some(conn),
            shards,
        })
    }

    /// Runs a counting query on a blocking thread.
    async fn count(&mut self, sql: String) -> Result<i64, String> {
        let mut conn = self.conn.take().ok_or("the polling connection was lost")?;
        let (conn, n) = tokio::task::spawn_blocking(move || {
            let n = diesel::sql_query(sql).get_result::<Count>(&mut conn);
            (conn, n)
        })
        .await
        .map_err(|e| e.to_string())?;
        self.conn = Some(conn);
        n.map(|c| c.n)
            .map_err(|e| format!("polling the inbox: {e}"))
    }

    /// Shards with at least one row waiting for delivery: one probe of the `(shard, status,
    /// seq)` index per shard.
    async fn shards(&mut self) -> Result<i64, String> {
        let sql = format!(
            "SELECT count(*) AS n FROM generate_series(0, {}) AS s(shard) WHERE EXISTS \
             (SELECT 1 FROM inbox_messages m WHERE m.shard = s.shard \
             AND m.status IN ('to_deliver', 'to_catch_up'))",
            self.shards.saturating_sub(1)
        );
        self.count(sql).await
    }

    /// Rows waiting for delivery (for the error message of a run that does not finish).
    async fn rows(&mut self) -> Result<i64, String> {
        self.count(
            "SELECT count(*) AS n FROM inbox_messages \
             WHERE status IN ('to_deliver', 'to_catch_up')"
                .into(),
        )
        .await
    }
}

/// The machine's CPU time so far, from the first line of `/proc/stat`: (busy, I/O wait,
/// total) in clock ticks over all cores.
fn machine_ticks() -> (u64, u64, u64) {
    let line = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = line
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let get = |i: usize| f.get(i).copied().unwrap_or(0);
    let busy = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
    (busy, get(4), busy + get(3) + get(4))
}

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
    let mut procs = Vec::with_capacity(nodes);
    for i in 0..nodes {
        procs.push(NodeProcess::spawn(
            a,
            &url,
            &schema,
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
    let mut pending = Pending::connect(&url, &schema, a.shards)?;
    let cpu_before = cpu_seconds();
    let machine_before = machine_ticks();
    let started = Instant::now();
    send_all(&sender, a.n, a.targets, a.batch).await?;
    let sent = started.elapsed();
    let mut progress = Instant::now();
    loop {
        for p in &mut procs {
            p.still_running()?;
        }
        let mut delivered = 0;
        for p in &mut procs {
            delivered += p.delivered().await?;
        }
        if delivered >= a.n as u64 && pending.shards().await? == 0 {
            break;
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
    let elapsed = started.elapsed();
    let parent_cpu = cpu_seconds() - cpu_before;
    let machine_after = machine_ticks();
    let total = machine_after.2.saturating_sub(machine_before.2).max(1) as f64;
    let busy = machine_after.0.saturating_sub(machine_before.0) as f64 / total;
    let iowait = machine_after.1.saturating_sub(machine_before.1) as f64 / total;
    let rate = a.n as f64 / elapsed.as_secs_f64();
    // Tell every process first, so that they shut down side by side.
    for p in &mut procs {
        p.tell_stop().await;
    }
    let mut stats = Vec::with_capacity(nodes);
    for p in procs {
        stats.push(p.finish().await?);
    }
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
    for s in &stats {
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
    if lost + duplicates > 0 {
        return Err(format!(
            "{nodes} node process(es): lost {lost}, duplicates {duplicates}"
        ));
    }
    Ok(ClusterRun { rate, stats, busy })
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

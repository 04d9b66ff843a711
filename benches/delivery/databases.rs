//! The `databases` workload (issue 35): one node over `--dbs` PostgreSQL databases against
//! one node over the first of them, and the cost of messages between databases.
//!
//! ```text
//!  SHARDBOX_PG_DATABASES = "url0 url1 url2"   (scripts/pg-databases.sh urls)
//!  each round, alternating:  1 database, f = 0 │ N databases, f = 0 │ N databases, f (if > 0)
//!  a run: fresh schema in each database ─► node + sender (one Shardbox) ─► N deposits to T
//!         accounts, 4 sending tasks, --batch per send; a fraction f of them name a mirror in
//!         another database, whose projection copy crosses through the outbox and a relay
//!         ─► until every deposit and copy is applied ─► audit every account and mirror
//! ```
//!
//! Reported per run: messages per second (deposits and copies, first send to last apply), the
//! copies' tail (the last copy applied after the last deposit), statements per message
//! summed over the databases, and each database's share of them (counted per connection by
//! the server it connects to, see `statements`). The JSON line carries the medians and the
//! ratios the issue asks for: N databases ÷ one at f = 0, f ÷ f = 0 on N, each database's
//! share, and statements per message N ÷ one.

use crate::args::Args;
use crate::report::Report;
use crate::statements;
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::storage::{PostgresOptions, PostgresStorage};
use shardbox::NodeId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The variable that lists the databases' URLs, home first, space-separated.
pub const URLS_ENV: &str = "SHARDBOX_PG_DATABASES";

static DEPOSITS: AtomicU64 = AtomicU64::new(0);
static COPIES: AtomicU64 = AtomicU64::new(0);

/// An account: counts its deposits.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Account {
    pub count: u64,
}

/// A deposit; `to` names the mirror its event is copied to, if any.
#[derive(Debug, Serialize, Deserialize)]
pub struct Deposit {
    pub to: Option<String>,
}

impl Message for Deposit {
    const TYPE: &'static str = "bench.deposit";
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Deposited {
    pub to: Option<String>,
}

impl Message for Deposited {
    const TYPE: &'static str = "bench.deposited";
}

impl Aggregate for Account {
    const KIND: &'static str = "db-account";
    type Command = Deposit;
    type Event = Deposited;

    async fn handle(&self, c: &Deposit, _: &Context<'_>) -> Result<Vec<Deposited>, HandlerError> {
        DEPOSITS.fetch_add(1, Ordering::Relaxed);
        Ok(vec![Deposited { to: c.to.clone() }])
    }

    fn apply(&mut self, _: &Deposited) {
        self.count += 1;
    }
}

/// A mirror: counts the deposits copied to it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Mirror {
    pub copies: u64,
}

impl Projection for Mirror {
    const KIND: &'static str = "db-mirror";
    type Event = Deposited;

    fn route(event: &Deposited, _: &shardbox::core::EventSource) -> Vec<String> {
        event.to.iter().cloned().collect()
    }

    async fn apply(&mut self, _: &Deposited, _: &Context<'_>) -> Result<(), HandlerError> {
        COPIES.fetch_add(1, Ordering::Relaxed);
        self.copies += 1;
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
struct Run {
    rate: f64,
    per_stage: f64,
    tail_ms: f64,
    statements_per_msg: f64,
    shares: Vec<f64>,
    lost: u64,
    duplicates: u64,
}

/// The deposit `i` of a run: its account and, for the chosen fraction, its mirror.
struct Plan {
    accounts: Vec<String>,
    /// Per database, mirrors that live there.
    mirrors_by_db: Vec<Vec<String>>,
    account_db: Vec<u32>,
    per_mille: u64,
}

impl Plan {
    fn new(storage: &dyn Storage, targets: usize, fraction: f64) -> Plan {
        let accounts: Vec<String> = (0..targets).map(|t| format!("a-{t}")).collect();
        let n = storage.databases().map_or(1, |d| d.map().count()) as usize;
        let db_of = |kind: &str, id: &str| {
            storage
                .databases()
                .map_or(0, |d| d.database_of_target(kind, id))
        };
        let account_db = accounts.iter().map(|a| db_of(Account::KIND, a)).collect();
        let mut mirrors_by_db = vec![Vec::new(); n];
        for m in 0..targets.max(n * 4) {
            let id = format!("m-{m}");
            mirrors_by_db[db_of(Mirror::KIND, &id) as usize].push(id);
        }
        Plan {
            accounts,
            mirrors_by_db,
            account_db,
            per_mille: (fraction * 1000.0).round() as u64,
        }
    }

    /// Deposit `i`: (account, mirror in another database when there is one, if forwarded).
    fn deposit(&self, i: usize) -> (&str, Option<String>) {
        let t = i % self.accounts.len();
        // A fixed, well spread choice of which deposits cross (Knuth's multiplicative hash).
        let forwarded = (i as u64).wrapping_mul(2_654_435_761) % 1000 < self.per_mille;
        let to = forwarded.then(|| {
            let n = self.mirrors_by_db.len();
            let other = (self.account_db[t] as usize + 1 + i % n.max(2).saturating_sub(1)) % n;
            let mirrors = &self.mirrors_by_db[other];
            mirrors[i % mirrors.len()].clone()
        });
        (&self.accounts[t], to)
    }
}

async fn drop_schemas(urls: &[String], schema: &str) {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;
    for url in urls {
        if let Ok(mut conn) = diesel::PgConnection::establish(url) {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
        }
    }
}

/// One run over `urls` with fraction `fraction` of deposits copied to another database.
async fn run(urls: &[String], a: &Args, fraction: f64, k: usize) -> Result<Run, String> {
    let schema = format!("sbx_dbbench_{}_{k}", std::process::id());
    let options = PostgresOptions::default()
        .schema(schema.clone())
        .pool_size(8);
    let storage = PostgresStorage::connect_databases(urls, options)
        .await
        .map_err(|e| e.to_string())?;
    let result = measured(storage, urls, a, fraction).await;
    drop_schemas(urls, &schema).await;
    result
}

async fn measured(
    storage: Arc<dyn Storage>,
    urls: &[String],
    a: &Args,
    fraction: f64,
) -> Result<Run, String> {
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .node_id(NodeId("bench-0".into()))
        .shards(a.shards)
        .page_size(a.page_size)
        .workers(a.workers)
        .poll_interval(Duration::from_millis(200))
        .aggregate::<Account>()
        .projection::<Mirror>()
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let plan = Arc::new(Plan::new(storage.as_ref(), a.targets, fraction));
    let forwarded = (0..a.n).filter(|i| plan.deposit(*i).1.is_some()).count() as u64;
    let node = sb.start();
    DEPOSITS.store(0, Ordering::SeqCst);
    COPIES.store(0, Ordering::SeqCst);
    let (statements_before, per_db_before) = (statements::count(), statements::per_database());
    statements::reset_tally();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (sb, plan, n, batch) = (sb.clone(), plan.clone(), a.n, a.batch);
        tasks.push(tokio::spawn(async move {
            let mut next = t;
            while next < n {
                let commands: Vec<(&str, Deposit)> = (next..n)
                    .step_by(4)
                    .take(batch)
                    .map(|i| {
                        let (account, to) = plan.deposit(i);
                        (account, Deposit { to })
                    })
                    .collect();
                next += 4 * commands.len();
                sb.send_many::<Account>(&commands)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let deadline = started + Duration::from_secs(1800);
    let mut deposits_done = None;
    let messages = a.n as u64 + forwarded;
    loop {
        // The handler's count may run ahead of the commits (a stage tried again): it only
        // dates the last deposit; the node's delivered count (after each commit) ends the run.
        if deposits_done.is_none() && DEPOSITS.load(Ordering::Relaxed) >= a.n as u64 {
            deposits_done = Some(started.elapsed());
        }
        let delivered = sb.metrics().delivered;
        if delivered >= messages {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {delivered} of {messages} messages applied in 30 minutes"
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    let statements = statements::count() - statements_before;
    let per_db: Vec<u64> = statements::per_database()
        .iter()
        .zip(per_db_before)
        .map(|(after, before)| after - before)
        .collect();
    statements::breakdown(a.n);
    node.shutdown().await.map_err(|e| e.to_string())?;
    let (lost, duplicates) = audit(&sb, &plan, a.n).await?;
    let counted: u64 = per_db.iter().take(urls.len()).sum();
    let m = sb.metrics();
    Ok(Run {
        rate: messages as f64 / elapsed.as_secs_f64(),
        per_stage: m.delivered as f64 / m.stages.max(1) as f64,
        tail_ms: (elapsed - deposits_done.unwrap_or(elapsed)).as_secs_f64() * 1000.0,
        statements_per_msg: statements as f64 / messages as f64,
        shares: per_db
            .iter()
            .take(urls.len())
            .map(|s| *s as f64 / counted.max(1) as f64)
            .collect(),
        lost,
        duplicates,
    })
}

/// Lost and doubled deposits and copies: every account's and mirror's count against the plan.
async fn audit(sb: &Shardbox, plan: &Plan, n: usize) -> Result<(u64, u64), String> {
    let mut want_accounts = vec![0u64; plan.accounts.len()];
    let mut want_mirrors: std::collections::BTreeMap<String, u64> = Default::default();
    for i in 0..n {
        let (account, to) = plan.deposit(i);
        want_accounts[account
            .trim_start_matches("a-")
            .parse::<usize>()
            .unwrap_or(0)] += 1;
        if let Some(m) = to {
            *want_mirrors.entry(m).or_default() += 1;
        }
    }
    let (mut lost, mut duplicates) = (0, 0);
    let mut tally = |want: u64, got: u64| {
        lost += want.saturating_sub(got);
        duplicates += got.saturating_sub(want);
    };
    for (t, want) in want_accounts.iter().enumerate() {
        let got = sb
            .aggregate_state::<Account>(&plan.accounts[t])
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |s| s.count);
        tally(*want, got);
    }
    for (m, want) in &want_mirrors {
        let got = sb
            .projection_state::<Mirror>(m)
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |s| s.copies);
        tally(*want, got);
    }
    Ok((lost, duplicates))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

pub async fn databases(a: &Args) -> Result<Report, String> {
    let urls: Vec<String> = std::env::var(URLS_ENV)
        .map_err(|_| format!("--workload databases needs {URLS_ENV} (the URLs of `scripts/pg-databases.sh urls`)"))?
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if urls.len() < a.dbs {
        return Err(format!(
            "--dbs {} but {URLS_ENV} lists {} URLs",
            a.dbs,
            urls.len()
        ));
    }
    let several = &urls[..a.dbs];
    let one = &urls[..1];
    statements::watch(several);
    let f = a.cross_db_fraction;
    let mut runs: Vec<(&str, Run)> = Vec::new();
    let mut k = 0;
    for round in 0..a.rounds {
        let mut kinds: Vec<(&str, &[String], f64)> =
            vec![("one", one, 0.0), ("several", several, 0.0)];
        if f > 0.0 {
            kinds.push(("crossing", several, f));
        }
        if round % 2 == 1 {
            kinds.reverse();
        }
        for (kind, urls, fraction) in kinds {
            k += 1;
            let r = run(urls, a, fraction, k).await?;
            eprintln!(
                "round {round} {kind:<8} dbs {} f {fraction:.2}: {:>7.0} msgs/s, {:.0} msgs/stage, {:.3} statements/msg, shares {:?}, copies' tail {:.0} ms, lost {}, duplicates {}",
                urls.len(), r.rate, r.per_stage, r.statements_per_msg,
                r.shares.iter().map(|s| format!("{s:.3}")).collect::<Vec<_>>(),
                r.tail_ms, r.lost, r.duplicates
            );
            runs.push((kind, r));
        }
    }
    let of = |kind: &str| -> Vec<Run> {
        runs.iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, r)| r.clone())
            .collect()
    };
    let (one_runs, several_runs, crossing_runs) = (of("one"), of("several"), of("crossing"));
    let rate = |rs: &[Run]| median(rs.iter().map(|r| r.rate).collect());
    let spm = |rs: &[Run]| median(rs.iter().map(|r| r.statements_per_msg).collect());
    let mut report = Report {
        workload: "databases",
        backend: "postgres",
        n: a.n,
        msgs_per_s: rate(&several_runs),
        ..Report::default()
    };
    report.lost = runs.iter().map(|(_, r)| r.lost).sum();
    report.duplicates = runs.iter().map(|(_, r)| r.duplicates).sum();
    report.extra.push(("dbs", a.dbs as f64));
    report.extra.push(("one_db_msgs_per_s", rate(&one_runs)));
    report
        .extra
        .push(("several_vs_one", rate(&several_runs) / rate(&one_runs)));
    report
        .extra
        .push(("one_db_statements_per_msg", spm(&one_runs)));
    report
        .extra
        .push(("statements_per_msg", spm(&several_runs)));
    report
        .extra
        .push(("statements_vs_one", spm(&several_runs) / spm(&one_runs)));
    const SHARE_NAMES: [&str; 8] = [
        "db0_share",
        "db1_share",
        "db2_share",
        "db3_share",
        "db4_share",
        "db5_share",
        "db6_share",
        "db7_share",
    ];
    for (d, name) in SHARE_NAMES.iter().enumerate().take(a.dbs) {
        let share = median(several_runs.iter().map(|r| r.shares[d]).collect());
        report.extra.push((name, share));
    }
    if f > 0.0 {
        report.extra.push(("cross_db_fraction", f));
        report
            .extra
            .push(("crossing_msgs_per_s", rate(&crossing_runs)));
        report.extra.push((
            "crossing_vs_local",
            rate(&crossing_runs) / rate(&several_runs),
        ));
        report.extra.push((
            "copies_tail_ms",
            median(crossing_runs.iter().map(|r| r.tail_ms).collect()),
        ));
    }
    Ok(report)
}

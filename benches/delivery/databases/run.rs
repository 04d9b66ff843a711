//! One run of the `databases` workload: a node over the run's databases, the deposits sent,
//! awaited and audited.

use super::model::{Account, Deposit, Mirror, Plan, COPIES, DEPOSITS};
use crate::args::Args;
use crate::statements;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::storage::{PostgresOptions, PostgresStorage};
use shardbox::NodeId;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub struct Run {
    pub rate: f64,
    pub per_stage: f64,
    pub tail_ms: f64,
    pub statements_per_msg: f64,
    pub shares: Vec<f64>,
    pub lost: u64,
    pub duplicates: u64,
}

/// The deposit `i` of a run: its account and, for the chosen fraction, its mirror.
pub(super) async fn drop_schemas(urls: &[String], schema: &str) {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;
    for url in urls {
        if let Ok(mut conn) = diesel::PgConnection::establish(url) {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
        }
    }
}

/// One run over `urls` with fraction `fraction` of deposits copied to another database.
pub async fn run(urls: &[String], a: &Args, fraction: f64, k: usize) -> Result<Run, String> {
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

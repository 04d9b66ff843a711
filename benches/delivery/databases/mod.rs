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
//!
//! ```text
//!  mod       the rounds and the report
//!  run       one run: node, sends, the wait, the audit
//!  model     the account and mirror kinds, and the plan of deposits
//!  catch_up  the databases-catch-up workload: a catch-up over N databases against one
//! ```

mod catch_up;
mod model;
mod run;

pub use catch_up::databases_catch_up;

use crate::args::Args;
use crate::report::Report;
use crate::statements;
use run::{drop_schemas, run, Run};

/// The variable that lists the databases' URLs, home first, space-separated.
pub const URLS_ENV: &str = "SHARDBOX_PG_DATABASES";

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// The URLs of `SHARDBOX_PG_DATABASES`, at least `--dbs` of them.
fn urls(a: &Args) -> Result<Vec<String>, String> {
    let urls: Vec<String> = std::env::var(URLS_ENV)
        .map_err(|_| {
            format!(
                "--workload {} needs {URLS_ENV} (the URLs of `scripts/pg-databases.sh urls`)",
                a.workload.name()
            )
        })?
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
    Ok(urls)
}

pub async fn databases(a: &Args) -> Result<Report, String> {
    let urls = urls(a)?;
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
    Ok(report(a, &runs))
}

/// The report of every run: the medians of each kind of run, and the ratios between them.
fn report(a: &Args, runs: &[(&str, Run)]) -> Report {
    let f = a.cross_db_fraction;
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
    report
}

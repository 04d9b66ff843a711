//! The `databases-catch-up` workload: a catch-up of `--n` events of history over `--dbs`
//! PostgreSQL databases against the same over the first of them, in alternating rounds.
//!
//! ```text
//!  a run: fresh schema in each database ─► --n events written straight to the event store
//!         (each in its source's database) ─► a node ─► catch-up of every ledger, timed from
//!         its start to its completion ─► every ledger audited (lost, doubled)
//! ```
//!
//! One database replays clean pages straight to the states; several always replay through
//! the Inbox (the states are in their databases), two rows in three crossing an outbox on three
//! databases: the ratio says what that costs on this machine.

use super::{drop_schemas, median, urls};
use crate::args::Args;
use crate::report::Report;
use crate::workloads::catch_up_on;
use shardbox::storage::{PostgresOptions, PostgresStorage};

pub async fn databases_catch_up(a: &Args) -> Result<Report, String> {
    let urls = urls(a)?;
    let (one, several) = (&urls[..1], &urls[..a.dbs]);
    let (mut rates_one, mut rates_several) = (Vec::new(), Vec::new());
    let (mut lost, mut duplicates) = (0, 0);
    let mut k = 0;
    for round in 0..a.rounds {
        let mut kinds = [("one", one), ("several", several)];
        if round % 2 == 1 {
            kinds.reverse();
        }
        for (kind, list) in kinds {
            k += 1;
            let schema = format!("sbx_dbcu_{}_{k}", std::process::id());
            let options = PostgresOptions::default()
                .schema(schema.clone())
                .pool_size(8);
            let storage = PostgresStorage::connect_databases(list, options)
                .await
                .map_err(|e| e.to_string())?;
            let run = catch_up_on(storage, a).await;
            drop_schemas(list, &schema).await;
            let run = run?;
            eprintln!(
                "round {round} {kind:<8} dbs {}: {:>7.0} events/s, replayed {}, lost {}, duplicates {}",
                list.len(),
                run.events_per_s,
                run.replayed,
                run.lost,
                run.duplicates
            );
            lost += run.lost;
            duplicates += run.duplicates;
            match kind {
                "one" => rates_one.push(run.events_per_s),
                _ => rates_several.push(run.events_per_s),
            }
        }
    }
    let (r1, rn) = (median(rates_one), median(rates_several));
    let mut report = Report {
        workload: "databases-catch-up",
        backend: "postgres",
        n: a.n,
        msgs_per_s: rn,
        lost,
        duplicates,
        ..Report::default()
    };
    report.extra.push(("dbs", a.dbs as f64));
    report.extra.push(("one_db_events_per_s", r1));
    report.extra.push(("several_vs_one", rn / r1));
    Ok(report)
}

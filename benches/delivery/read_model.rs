//! The `read-model` workload: the cost of a SQL projection (issue 34). The same traffic — N
//! `Booked` events posted round-robin over T producers — folded by the JSON-state projection
//! (`Ledger`: one state per instance, kept by Shardbox) and by a SQL projection (`LedgerRows`:
//! one upsert per event into the application's own table), in alternating runs of one
//! process, each on a fresh database. Reports both rates and their ratio (SQL / JSON).
//!
//! ```text
//! cargo bench --bench delivery -- --backend sqlite --workload read-model [--n 50000]
//!     [--targets 1000] [--rounds 3]
//! ```
//!
//! Each run checks its read model: every event applied once (the sum of the per-instance
//! counts is N, one row or state per producer).

use crate::args::{Args, Backend};
use crate::backend::Db;
use crate::model::{Booked, Ledger};
use crate::report::Report;
use crate::traffic::target;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::storage::on_connection;
use std::sync::Arc;
use std::time::{Duration, Instant};

diesel::table! {
    /// The SQL projection's table: one row per producer.
    ledger_rows (id) {
        id -> Text,
        events -> BigInt,
        balance -> BigInt,
    }
}

const TABLE: &str = "CREATE TABLE ledger_rows (
    id TEXT PRIMARY KEY,
    events BIGINT NOT NULL,
    balance BIGINT NOT NULL
)";

/// The ledger as a SQL projection: one upsert per event.
struct LedgerRows;

impl SqlProjection for LedgerRows {
    const KIND: &'static str = "bench-ledger-rows";
    type Event = Booked;

    fn apply(&self, conn: SqlConnection<'_>, e: &Booked, cx: &Context<'_>) -> SqlResult {
        use ledger_rows::dsl as l;
        on_connection!(conn, |c| diesel::insert_into(l::ledger_rows)
            .values((
                l::id.eq(cx.target_id),
                l::events.eq(1),
                l::balance.eq(e.amount)
            ))
            .on_conflict(l::id)
            .do_update()
            .set((
                l::events.eq(l::events + 1),
                l::balance.eq(l::balance + e.amount)
            ))
            .execute(c))?;
        Ok(())
    }

    fn reset(&self, conn: SqlConnection<'_>, _: &RebuildScope) -> SqlResult {
        conn.batch_execute("DELETE FROM ledger_rows")?;
        Ok(())
    }
}

/// Which read model a run folds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Model {
    Json,
    Sql,
}

/// A connection of the application's own to the run's database.
enum Raw {
    Sqlite(diesel::SqliteConnection),
    Postgres(diesel::PgConnection),
}

impl Raw {
    fn open(db: &Db) -> Result<Raw, String> {
        match db.backend {
            Backend::Sqlite => {
                let path = db.sqlite_path();
                let mut c = diesel::SqliteConnection::establish(&path.to_string_lossy())
                    .map_err(|e| e.to_string())?;
                c.batch_execute("PRAGMA busy_timeout = 5000")
                    .map_err(|e| e.to_string())?;
                Ok(Raw::Sqlite(c))
            }
            Backend::Postgres => {
                let (url, schema) = db.pg().ok_or("no PostgreSQL schema")?;
                let mut c = diesel::PgConnection::establish(url).map_err(|e| e.to_string())?;
                c.batch_execute(&format!("SET search_path TO \"{schema}\""))
                    .map_err(|e| e.to_string())?;
                Ok(Raw::Postgres(c))
            }
            Backend::Memory => Err("the read-model workload needs SQLite or PostgreSQL".into()),
        }
    }

    fn execute(&mut self, sql: &str) -> Result<(), String> {
        match self {
            Raw::Sqlite(c) => c.batch_execute(sql),
            Raw::Postgres(c) => c.batch_execute(sql),
        }
        .map_err(|e| e.to_string())
    }

    /// Rows and the sum of their event counts.
    fn totals(&mut self) -> Result<(i64, i64), String> {
        use ledger_rows::dsl as l;
        let counts: Vec<i64> = match self {
            Raw::Sqlite(c) => l::ledger_rows.select(l::events).load(c),
            Raw::Postgres(c) => l::ledger_rows.select(l::events).load(c),
        }
        .map_err(|e| e.to_string())?;
        Ok((counts.len() as i64, counts.iter().sum()))
    }
}

/// One run folding `model` on a fresh database: msgs/s from the first post to the last
/// commit, and the events the read model counts.
async fn run(a: &Args, model: Model) -> Result<(f64, i64), String> {
    let db = Db::new(a.backend)?;
    let storage: Arc<dyn Storage> = db.storage(8).await?;
    let mut raw = Raw::open(&db)?;
    raw.execute(TABLE)?;
    // The run's settings, with the one read model of the run.
    let builder = Shardbox::builder()
        .shared_storage(storage)
        .node_id(shardbox::NodeId("bench-0".into()))
        .shards(a.shards)
        .page_size(a.page_size)
        .workers(a.workers)
        .poll_interval(Duration::from_millis(200));
    let builder = match model {
        Model::Json => builder.projection::<Ledger>(),
        Model::Sql => builder.sql_projection(LedgerRows),
    };
    let sb = builder.build().await.map_err(|e| e.to_string())?;
    let node = sb.start();
    let started = Instant::now();
    post_all(&sb, a.n, a.targets, a.batch).await?;
    let deadline = Instant::now() + Duration::from_secs(3600);
    while sb.metrics().delivered < a.n as u64 {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {} delivered",
                sb.metrics().delivered,
                a.n
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = a.n as f64 / started.elapsed().as_secs_f64();
    node.shutdown().await.map_err(|e| e.to_string())?;
    let counted = match model {
        Model::Sql => raw.totals()?.1,
        Model::Json => {
            let mut events = 0;
            for t in 0..a.targets.min(a.n) {
                events += sb
                    .projection_state::<Ledger>(&target(t, a.targets))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_or(0, |l| l.events as i64);
            }
            events
        }
    };
    Ok((rate, counted))
}

/// Posts `n` `Booked` events from 4 tasks, round-robin over `targets` producers, `batch` per
/// write.
async fn post_all(sb: &Shardbox, n: usize, targets: usize, batch: usize) -> Result<(), String> {
    let mut tasks = Vec::new();
    for t in 0..4 {
        let sb = sb.clone();
        tasks.push(tokio::spawn(async move {
            let mut next = t;
            while next < n {
                let events: Vec<(EventSource, Booked)> = (next..n)
                    .step_by(4)
                    .take(batch)
                    .map(|i| {
                        (
                            EventSource::external(target(i, targets)),
                            Booked { amount: 1 },
                        )
                    })
                    .collect();
                next += events.len() * 4;
                sb.post_many(&events).await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

pub async fn read_model(a: &Args) -> Result<Report, String> {
    let mut json = Vec::new();
    let mut sql = Vec::new();
    let (mut lost, mut duplicates) = (0u64, 0u64);
    for round in 0..a.rounds.max(1) {
        // A B, then B A: neither model always runs on the warmer machine.
        let order = if round % 2 == 0 {
            [Model::Json, Model::Sql]
        } else {
            [Model::Sql, Model::Json]
        };
        for model in order {
            let (rate, counted) = run(a, model).await?;
            eprintln!("round {round}: {model:?} {rate:.0} msgs/s, {counted} events folded");
            let n = a.n as i64;
            lost += n.saturating_sub(counted) as u64;
            duplicates += counted.saturating_sub(n) as u64;
            match model {
                Model::Json => json.push(rate),
                Model::Sql => sql.push(rate),
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (json_rate, sql_rate) = (median(&mut json), median(&mut sql));
    Ok(Report {
        workload: a.workload.name(),
        backend: a.backend.name(),
        n: a.n,
        msgs_per_s: sql_rate,
        floor_per_s: json_rate,
        lost,
        duplicates,
        extra: vec![
            ("json_state_msgs_per_s", json_rate),
            ("sql_projection_msgs_per_s", sql_rate),
            ("sql_over_json", sql_rate / json_rate),
        ],
        ..Report::default()
    })
}

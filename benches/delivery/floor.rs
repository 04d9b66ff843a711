//! The floor: the least work any durable inbox must do for `n` messages on the same database,
//! measured in the same run — insert the rows in batches of the page size inside
//! transactions, read them back in pages on the delivery index, delete them in batches.
//! Written with diesel directly, no Shardbox code in the path.

use crate::args::Backend;
use crate::backend::Db;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use std::time::Instant;

#[derive(QueryableByName)]
struct Seq {
    #[diesel(sql_type = BigInt)]
    seq: i64,
}

/// What differs between the backends' floors.
struct Dialect {
    /// The payload `null` as a blob literal.
    payload: &'static str,
    /// Whether inserts give `seq`: SQLite's inbox table does not draw it (the floor numbers
    /// its rows itself, the least work there is), PostgreSQL's does.
    seq: bool,
}

fn insert_sql(from: usize, to: usize, shards: u32, targets: usize, d: &Dialect) -> String {
    let mut sql = format!(
        "INSERT INTO inbox_messages ({}shard, signal_id, target_kind, target_id, tenant, kind, status, received_at, payload, payload_type, metadata) VALUES ",
        if d.seq { "seq, " } else { "" }
    );
    for i in from..to {
        if i > from {
            sql.push(',');
        }
        let shard = (i as u64 % u64::from(shards)) as u32;
        let seq = if d.seq {
            format!("{}, ", i + 1)
        } else {
            String::new()
        };
        sql.push_str(&format!(
            "({seq}{shard}, 'floor-{i}', 'floor', 't{}', '', 'command', 'to_deliver', 0, {}, 'bench.bump', '{{}}')",
            i % targets,
            d.payload
        ));
    }
    sql
}

/// The three steps on one concrete connection type (diesel's `sql_query` is not generic
/// over backends without its private specialisation bounds, so this is stamped per type).
macro_rules! floor_run {
    ($name:ident, $conn:ty, $dialect:expr) => {
        fn $name(conn: &mut $conn, n: usize, shards: u32, targets: usize, page: usize) -> Result<f64, String> {
            let started = Instant::now();
            let mut from = 0;
            while from < n {
                let to = (from + page).min(n);
                let sql = insert_sql(from, to, shards, targets, &$dialect);
                conn.transaction::<_, diesel::result::Error, _>(|c| c.batch_execute(&sql))
                    .map_err(|e| format!("floor insert: {e}"))?;
                from = to;
            }
            let mut left = n;
            while left > 0 {
                let mut progressed = false;
                for shard in 0..shards {
                    let seqs: Vec<Seq> = diesel::sql_query(format!(
                        "SELECT seq FROM inbox_messages WHERE shard = {shard} AND status = 'to_deliver' AND deliver_after IS NULL AND status <> 'delivered' ORDER BY seq LIMIT {page}"
                    ))
                    .load(conn)
                    .map_err(|e| format!("floor read: {e}"))?;
                    if seqs.is_empty() {
                        continue;
                    }
                    progressed = true;
                    left -= seqs.len();
                    let list: Vec<String> = seqs.iter().map(|s| s.seq.to_string()).collect();
                    let sql = format!("DELETE FROM inbox_messages WHERE seq IN ({})", list.join(","));
                    conn.transaction::<_, diesel::result::Error, _>(|c| c.batch_execute(&sql))
                        .map_err(|e| format!("floor delete: {e}"))?;
                }
                if !progressed {
                    return Err(format!("floor: {left} rows went missing"));
                }
            }
            Ok(n as f64 / started.elapsed().as_secs_f64())
        }
    };
}

floor_run!(
    run_sqlite,
    diesel::SqliteConnection,
    Dialect {
        payload: "X'6e756c6c'",
        seq: true,
    }
);
floor_run!(
    run_pg,
    diesel::PgConnection,
    Dialect {
        payload: "'\\x6e756c6c'::bytea",
        seq: false,
    }
);

/// How many times `live` measures the floor; it reports the median. On the project's
/// machine one SQLite floor run lands at about 55–60k or 78–94k rows/s, whatever the build,
/// so a single run could move the ratio by a third.
pub const RUNS: usize = 3;

/// The median of [`RUNS`] floor measurements, and every measurement in order.
pub fn median(
    db: &Db,
    n: usize,
    shards: u32,
    targets: usize,
    page: usize,
) -> Result<(f64, Vec<f64>), String> {
    let runs = (0..RUNS)
        .map(|_| measure(db, n, shards, targets, page))
        .collect::<Result<Vec<f64>, String>>()?;
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    Ok((sorted[sorted.len() / 2], runs))
}

/// Messages per second of the floor on `db` (whose schema must already exist).
fn measure(db: &Db, n: usize, shards: u32, targets: usize, page: usize) -> Result<f64, String> {
    match db.backend {
        Backend::Sqlite => {
            let path = db.sqlite_path();
            let mut c = diesel::SqliteConnection::establish(&path.to_string_lossy())
                .map_err(|e| format!("floor: {e}"))?;
            // The database settings Shardbox's SQLite storage runs with by default: WAL,
            // synchronous=NORMAL, and checkpoints by a thread every 100 ms instead of inside
            // commits (the commits' own autocheckpoint only as a safety net at 10,000 pages).
            c.batch_execute(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000; \
                 PRAGMA wal_autocheckpoint=10000; PRAGMA temp_store=MEMORY;",
            )
            .map_err(|e| format!("floor: {e}"))?;
            let checkpoints = Checkpoints::start(path);
            let rate = run_sqlite(&mut c, n, shards, targets, page);
            checkpoints.stop();
            rate
        }
        Backend::Postgres => {
            let (url, schema) = db.pg().cloned().unwrap_or_default();
            let mut c = diesel::PgConnection::establish(&url).map_err(|e| format!("floor: {e}"))?;
            c.batch_execute(&format!("SET search_path TO \"{schema}\""))
                .map_err(|e| format!("floor: {e}"))?;
            run_pg(&mut c, n, shards, targets, page)
        }
        // Memory has no database: its floor is the same three steps on plain collections.
        Backend::Memory => {
            let started = Instant::now();
            let mut rows: std::collections::BTreeMap<(u32, usize), Vec<u8>> = Default::default();
            for chunk_start in (0..n).step_by(page) {
                for i in chunk_start..(chunk_start + page).min(n) {
                    rows.insert(((i as u64 % u64::from(shards)) as u32, i), b"null".to_vec());
                }
            }
            while !rows.is_empty() {
                for shard in 0..shards {
                    let keys: Vec<_> = rows
                        .range((shard, 0)..(shard + 1, 0))
                        .take(page)
                        .map(|(k, _)| *k)
                        .collect();
                    for k in keys {
                        rows.remove(&k);
                    }
                }
            }
            let _ = targets;
            Ok(n as f64 / started.elapsed().as_secs_f64())
        }
    }
}

/// The floor's checkpoint thread: `PRAGMA wal_checkpoint(PASSIVE)` every 100 ms on a
/// connection of its own, as Shardbox's SQLite storage does.
struct Checkpoints {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpoints {
    fn start(path: std::path::PathBuf) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let Ok(mut c) = diesel::SqliteConnection::establish(&path.to_string_lossy()) else {
                return;
            };
            let _ = c.batch_execute("PRAGMA busy_timeout=10000;");
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                let _ = c.batch_execute("PRAGMA wal_checkpoint(PASSIVE);");
            }
        });
        Checkpoints { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

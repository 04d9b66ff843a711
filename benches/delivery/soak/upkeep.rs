//! PostgreSQL upkeep during the soak: the workload's own `VACUUM (ANALYZE)` of the schema's
//! tables every `--vacuum-secs`, standing in for autovacuum on a server that has it off (as
//! docs/operations.md tells operators of such servers to do). Each pass's time is kept for
//! the sample table. On a server with autovacuum on, the soak leaves it to autovacuum.

use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the vacuum passes did so far.
#[derive(Debug, Default)]
pub struct Vacuums {
    pub passes: AtomicU64,
    /// Milliseconds of the longest pass since the last sample took it.
    pub longest_ms: AtomicU64,
    pub failures: AtomicU64,
}

#[derive(QueryableByName)]
struct Setting {
    #[diesel(sql_type = Text)]
    setting: String,
}

/// Whether the server runs autovacuum.
pub fn autovacuum_on(url: &str) -> Result<bool, String> {
    let mut c = PgConnection::establish(url).map_err(|e| format!("upkeep: {e}"))?;
    let s: Setting = diesel::sql_query("SELECT setting FROM pg_settings WHERE name = 'autovacuum'")
        .get_result(&mut c)
        .map_err(|e| format!("upkeep: {e}"))?;
    Ok(s.setting == "on")
}

#[derive(QueryableByName)]
struct Table {
    #[diesel(sql_type = Text)]
    name: String,
}

/// Vacuums and analyzes every table of `schema` every `every` until `stop` (a blocking
/// thread of its own).
pub fn start(
    url: String,
    schema: String,
    every: Duration,
    vacuums: Arc<Vacuums>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut conn = match PgConnection::establish(&url) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("upkeep: cannot connect, no vacuum: {e}");
                return;
            }
        };
        let mut next = Instant::now() + every;
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() < next {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            next += every;
            let started = Instant::now();
            match pass(&mut conn, &schema) {
                Ok(()) => {
                    vacuums.passes.fetch_add(1, Ordering::Relaxed);
                    let ms = started.elapsed().as_millis() as u64;
                    vacuums.longest_ms.fetch_max(ms, Ordering::Relaxed);
                }
                Err(e) => {
                    if vacuums.failures.fetch_add(1, Ordering::Relaxed) < 3 {
                        eprintln!("upkeep: vacuum failed: {e}");
                    }
                }
            }
        }
    })
}

fn pass(conn: &mut PgConnection, schema: &str) -> Result<(), diesel::result::Error> {
    let tables: Vec<Table> =
        diesel::sql_query("SELECT tablename::text AS name FROM pg_tables WHERE schemaname = $1")
            .bind::<Text, _>(schema)
            .load(conn)?;
    if tables.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = tables
        .iter()
        .map(|t| format!("\"{schema}\".\"{}\"", t.name))
        .collect();
    conn.batch_execute(&format!("VACUUM (ANALYZE) {}", list.join(", ")))
}

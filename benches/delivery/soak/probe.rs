//! What the soak samples: this process (resident memory, open file descriptors) and the
//! database, through a connection of its own — table sizes with their indexes, row counts
//! (delivered rows kept, rows pending, outcome rows, dead letters, events), and on
//! PostgreSQL the schema's connections, dead tuples, the tuples updated or deleted so far and
//! the age of the oldest snapshot held in the database.
//!
//! SQLite has no dead tuples: it reuses freed pages, so it reports the free pages instead,
//! and its connections are the file descriptors open on the database file.

use diesel::connection::SimpleConnection;
use diesel::sql_types::{BigInt, Text};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl, SqliteConnection};
use shardbox::core::sync::lock;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The tables whose size is followed, in the table's order.
pub const TABLES: [&str; 5] = [
    "inbox_messages",
    "command_outcomes",
    "entity_states",
    "events",
    "dead_letters",
];

/// One sample of the database.
#[derive(Debug, Clone, Default)]
pub struct DbSample {
    /// Bytes of each of [`TABLES`], indexes and TOAST included.
    pub table_bytes: [i64; 5],
    /// PostgreSQL: dead tuples of each of [`TABLES`] (`n_dead_tup`).
    pub dead_tuples: [i64; 5],
    /// PostgreSQL: tuples updated or deleted so far in each of [`TABLES`], each leaving a
    /// dead version behind (`n_tup_upd + n_tup_del`).
    pub churn: [i64; 5],
    /// PostgreSQL: of those, updates that were HOT (no index entry; their dead versions are
    /// pruned within the page, without a vacuum).
    pub hot_updates: [i64; 5],
    /// PostgreSQL: the whole schema; SQLite: the database file (page count × page size).
    pub total_bytes: i64,
    /// SQLite: bytes of free pages in the file.
    pub free_bytes: i64,
    /// SQLite: bytes of the write-ahead log.
    pub wal_bytes: i64,
    /// Delivered rows kept for deduplication.
    pub delivered_kept: i64,
    /// Rows not delivered yet (due, delayed, retrying, held).
    pub pending: i64,
    pub outcomes: i64,
    pub dead_letters: i64,
    pub events: i64,
    /// PostgreSQL: connections of this run's storages; SQLite: descriptors open on its file.
    pub connections: i64,
    /// PostgreSQL: the oldest snapshot in the database, in transactions (`age(backend_xmin)`)
    /// and in seconds since its transaction started.
    pub xmin_age: i64,
    pub oldest_xact_s: i64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct TableStat {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = BigInt)]
    bytes: i64,
    #[diesel(sql_type = BigInt)]
    dead: i64,
    #[diesel(sql_type = BigInt)]
    churn: i64,
    #[diesel(sql_type = BigInt)]
    hot: i64,
}

#[derive(QueryableByName)]
struct Rows {
    #[diesel(sql_type = BigInt)]
    delivered_kept: i64,
    #[diesel(sql_type = BigInt)]
    pending: i64,
    #[diesel(sql_type = BigInt)]
    outcomes: i64,
    #[diesel(sql_type = BigInt)]
    dead_letters: i64,
    #[diesel(sql_type = BigInt)]
    events: i64,
}

#[derive(QueryableByName)]
struct Horizon {
    #[diesel(sql_type = BigInt)]
    xmin_age: i64,
    #[diesel(sql_type = BigInt)]
    oldest_xact_s: i64,
}

const ROWS: &str = "SELECT \
    (SELECT count(*) FROM inbox_messages WHERE status = 'delivered') AS delivered_kept, \
    (SELECT count(*) FROM inbox_messages WHERE status <> 'delivered') AS pending, \
    (SELECT count(*) FROM command_outcomes) AS outcomes, \
    (SELECT count(*) FROM dead_letters) AS dead_letters, \
    (SELECT count(*) FROM events) AS events";

enum Conn {
    Pg {
        conn: PgConnection,
        schema: String,
        application: String,
    },
    Sqlite {
        conn: SqliteConnection,
        path: PathBuf,
    },
}

/// The soak's own connection to the database under test.
#[derive(Clone)]
pub struct Probe(Arc<Mutex<Conn>>);

impl Probe {
    /// A probe of PostgreSQL `schema`, counting the connections named `application`.
    pub fn postgres(url: &str, schema: &str, application: &str) -> Result<Probe, String> {
        let mut conn = PgConnection::establish(url).map_err(|e| format!("probe: {e}"))?;
        conn.batch_execute(&format!("SET search_path TO \"{schema}\""))
            .map_err(|e| format!("probe: {e}"))?;
        Ok(Probe(Arc::new(Mutex::new(Conn::Pg {
            conn,
            schema: schema.to_owned(),
            application: application.to_owned(),
        }))))
    }

    /// A probe of the SQLite file at `path`.
    pub fn sqlite(path: PathBuf) -> Result<Probe, String> {
        let mut conn = SqliteConnection::establish(&path.to_string_lossy())
            .map_err(|e| format!("probe: {e}"))?;
        conn.batch_execute("PRAGMA busy_timeout = 10000")
            .map_err(|e| format!("probe: {e}"))?;
        Ok(Probe(Arc::new(Mutex::new(Conn::Sqlite { conn, path }))))
    }

    /// Takes one sample (on a blocking thread).
    pub async fn sample(&self) -> Result<DbSample, String> {
        let probe = self.0.clone();
        tokio::task::spawn_blocking(move || match &mut *lock(&probe) {
            Conn::Pg {
                conn,
                schema,
                application,
            } => postgres(conn, schema, application),
            Conn::Sqlite { conn, path } => sqlite(conn, path),
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("probe: {e}"))
    }
}

fn rows(s: &mut DbSample, r: Rows) {
    s.delivered_kept = r.delivered_kept;
    s.pending = r.pending;
    s.outcomes = r.outcomes;
    s.dead_letters = r.dead_letters;
    s.events = r.events;
}

fn postgres(
    conn: &mut PgConnection,
    schema: &str,
    application: &str,
) -> Result<DbSample, diesel::result::Error> {
    let mut s = DbSample::default();
    let stats: Vec<TableStat> = diesel::sql_query(
        "SELECT c.relname::text AS name, pg_total_relation_size(c.oid) AS bytes, \
         COALESCE(t.n_dead_tup, 0) AS dead, COALESCE(t.n_tup_upd + t.n_tup_del, 0) AS churn, \
         COALESCE(t.n_tup_hot_upd, 0) AS hot \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         LEFT JOIN pg_stat_user_tables t ON t.relid = c.oid \
         WHERE n.nspname = $1 AND c.relkind = 'r'",
    )
    .bind::<Text, _>(schema)
    .load(conn)?;
    for t in &stats {
        s.total_bytes += t.bytes;
        if let Some(i) = TABLES.iter().position(|n| *n == t.name) {
            s.table_bytes[i] = t.bytes;
            s.dead_tuples[i] = t.dead;
            s.churn[i] = t.churn;
            s.hot_updates[i] = t.hot;
        }
    }
    rows(&mut s, diesel::sql_query(ROWS).get_result(conn)?);
    s.connections =
        diesel::sql_query("SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1")
            .bind::<Text, _>(application)
            .get_result::<Count>(conn)?
            .n;
    let h: Horizon = diesel::sql_query(
        "SELECT COALESCE(max(age(backend_xmin)), 0)::bigint AS xmin_age, \
         COALESCE(EXTRACT(EPOCH FROM max(clock_timestamp() - xact_start)), 0)::bigint \
         AS oldest_xact_s \
         FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .get_result(conn)?;
    s.xmin_age = h.xmin_age;
    s.oldest_xact_s = h.oldest_xact_s;
    Ok(s)
}

fn sqlite(conn: &mut SqliteConnection, path: &PathBuf) -> Result<DbSample, diesel::result::Error> {
    let mut s = DbSample::default();
    // Per table through the `dbstat` table, where SQLite was built with it.
    let stats: Result<Vec<TableStat>, _> = diesel::sql_query(
        "SELECT COALESCE(m.tbl_name, d.name) AS name, SUM(d.pgsize) AS bytes, \
         0 AS dead, 0 AS churn, 0 AS hot \
         FROM dbstat d LEFT JOIN sqlite_master m ON m.name = d.name GROUP BY 1",
    )
    .load(conn);
    for t in stats.unwrap_or_default() {
        if let Some(i) = TABLES.iter().position(|n| *n == t.name) {
            s.table_bytes[i] = t.bytes;
        }
    }
    let pages = |conn: &mut SqliteConnection, pragma: &str| {
        diesel::sql_query(format!(
            "SELECT (SELECT {pragma} FROM pragma_{pragma}()) * \
             (SELECT page_size FROM pragma_page_size()) AS n"
        ))
        .get_result::<Count>(conn)
        .map(|c| c.n)
    };
    s.total_bytes = pages(conn, "page_count")?;
    s.free_bytes = pages(conn, "freelist_count")?;
    rows(&mut s, diesel::sql_query(ROWS).get_result(conn)?);
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    s.wal_bytes = std::fs::metadata(&wal).map_or(0, |m| m.len() as i64);
    s.connections = descriptors_on(path);
    Ok(s)
}

/// This process's file descriptors open on `file` (one per SQLite connection).
fn descriptors_on(file: &PathBuf) -> i64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| {
        dir.filter_map(Result::ok)
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|to| &to == file))
            .count() as i64
    })
}

/// This process: resident memory (MiB, VmRSS), open file descriptors and threads.
pub fn process() -> (f64, i64, i64) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as i64);
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count() as i64);
    (rss, fds, threads)
}

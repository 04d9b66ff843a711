//! A PostgreSQL schema of its own for one test: what lets test cases (this crate's and the
//! integration tests') share one database and run at the same time.
//!
//! ```text
//!  pg_url(test)            SHARDBOX_PG_URL, or None after a loud SKIPPED notice on the
//!                          process's stderr (past libtest's capture), numbered
//!  TestSchema::new(url, t) a unique name; nothing is created until a storage connects
//!  connect(pool) / raw()   a PostgresStorage, or a plain connection, in the schema
//!  drop                    DROP SCHEMA … CASCADE (also when the test panics)
//!  explain(conn, sql)      the lines of `EXPLAIN sql`, joined, for plan assertions
//! ```
//!
//! Behind the `test-schema` feature (which turns on `postgres`); this crate's own unit tests
//! have it always. It is the PostgreSQL backend's test support, not part of the conformance
//! suite, and stays beside [`PostgresStorage`] rather than in `shardbox-conformance`: it
//! builds this crate's [`PostgresStorage`], and this crate's unit tests need that storage as
//! their own type (they read its private fields). A helper crate that depended on this one
//! would hand them a second compilation of it, whose `PostgresStorage` is another type.
//! Keeping it here also keeps diesel and libpq out of the suite, which is generic over
//! core's traits.

use crate::{PostgresOptions, PostgresStorage};
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use std::sync::atomic::{AtomicU32, Ordering};

/// The PostgreSQL URL for tests (`SHARDBOX_PG_URL`), or `None` after a loud notice on stderr
/// that `test` is skipped (see [`skipped`]).
pub fn pg_url(test: &str) -> Option<String> {
    match std::env::var("SHARDBOX_PG_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            skipped(test);
            None
        }
    }
}

/// PostgreSQL tests this test binary has skipped so far.
static SKIPPED: AtomicU32 = AtomicU32::new(0);

/// Says on the process's stderr that PostgreSQL test `test` did not run, numbered within
/// this test binary. libtest captures what a test prints through `print!`/`eprint!` (and
/// shows it only if the test fails), so an `eprintln!` notice never showed in a plain
/// `cargo test`; a write to the stderr handle itself is not captured. libtest has no
/// runtime skip on stable, so the test still counts as passed: the notice is how a run
/// without `SHARDBOX_PG_URL` says what it left out.
fn skipped(test: &str) {
    use std::io::Write;
    let n = SKIPPED.fetch_add(1, Ordering::Relaxed) + 1;
    let notice = format!(
        "\nSKIPPED #{n} of this test binary: PostgreSQL test `{test}` did not run (it counts as \
         passed); set SHARDBOX_PG_URL=postgres://postgres@127.0.0.1:5432/test to run it\n"
    );
    // Nowhere to report a failed write to stderr.
    let _ = std::io::stderr().lock().write_all(notice.as_bytes());
}

/// A line of `EXPLAIN` output.
#[derive(diesel::QueryableByName)]
struct PlanLine {
    #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
    line: String,
}

/// The plan PostgreSQL gives `sql` (`EXPLAIN sql`, lines joined by newlines); panics if it
/// cannot explain it.
pub fn explain(conn: &mut PgConnection, sql: &str) -> String {
    use diesel::RunQueryDsl;
    let lines: Vec<PlanLine> = diesel::sql_query(format!("EXPLAIN {sql}"))
        .load(conn)
        .expect("explain");
    lines
        .into_iter()
        .map(|l| l.line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// How often this connection ran its prepared statements whose text starts with `prefix`
/// with their kept generic plan, and with a plan made for their parameters: `(generic,
/// custom)` from `pg_prepared_statements` (both 0 if none is prepared). A statement PostgreSQL
/// settles on one plan for shows `custom` 5 and `generic` the runs after those.
pub fn prepared_plans(conn: &mut PgConnection, prefix: &str) -> (i64, i64) {
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Plans {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        generic: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        custom: i64,
    }
    let plans = diesel::sql_query(
        "SELECT COALESCE(sum(generic_plans), 0)::BIGINT AS generic, \
         COALESCE(sum(custom_plans), 0)::BIGINT AS custom FROM pg_prepared_statements \
         WHERE starts_with(statement, $1)",
    )
    .bind::<diesel::sql_types::Text, _>(prefix)
    .get_result::<Plans>(conn)
    .expect("prepared statements' plans");
    (plans.generic, plans.custom)
}

/// Terminates every backend whose `application_name` is `application_name` (a test's own
/// connections, named so in their URL), but the caller's; returns how many. The outage tests
/// use it to cut their storage's connections and nobody else's.
pub fn terminate_backends(
    admin: &mut PgConnection,
    application_name: &str,
) -> Result<usize, diesel::result::Error> {
    #[derive(diesel::QueryableByName)]
    struct Killed {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    use diesel::RunQueryDsl;
    diesel::sql_query(
        "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind::<diesel::sql_types::Text, _>(application_name)
    .get_result::<Killed>(admin)
    .map(|k| usize::try_from(k.n).unwrap_or(0))
}

/// A test schema with a unique name, dropped with everything in it when the guard drops.
#[derive(Debug)]
pub struct TestSchema {
    /// The database URL.
    pub url: String,
    /// The schema's name.
    pub name: String,
}

impl TestSchema {
    /// A unique schema name for `test` (lower case, at most 63 bytes); nothing is created
    /// until a storage connects with it.
    pub fn new(url: &str, test: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let suffix = format!(
            "_{}_{}_{nanos:x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let test: String = test
            .to_lowercase()
            .chars()
            .take(63 - 4 - suffix.len())
            .collect();
        TestSchema {
            url: url.to_owned(),
            name: format!("sbx_{test}{suffix}"),
        }
    }

    /// Options for a pool of `pool_size` in this schema, every connection opened up front (so
    /// that concurrent cases really run concurrently).
    pub fn options(&self, pool_size: u32) -> PostgresOptions {
        PostgresOptions::default()
            .schema(self.name.clone())
            .pool_size(pool_size)
            .min_idle(None)
    }

    /// A storage in this schema with a pool of `pool_size`; panics if it cannot connect.
    pub async fn connect(&self, pool_size: u32) -> PostgresStorage {
        PostgresStorage::connect_with(self.url.clone(), self.options(pool_size))
            .await
            .expect("connect to SHARDBOX_PG_URL")
    }

    /// A plain connection with `search_path` set to this schema; panics if it cannot connect.
    pub fn raw(&self) -> PgConnection {
        let mut conn = PgConnection::establish(&self.url).expect("connect");
        conn.batch_execute(&format!("SET search_path TO \"{}\"", self.name))
            .expect("search_path");
        conn
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name);
        let dropped = PgConnection::establish(&self.url)
            .map_err(|e| e.to_string())
            .and_then(|mut c| c.batch_execute(&sql).map_err(|e| e.to_string()));
        if let Err(e) = dropped {
            eprintln!("could not drop test schema {}: {e}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child run of [`skip_probe`]: without it the probe does nothing.
    const PROBE: &str = "SHARDBOX_TEST_SKIP_PROBE";

    /// The PostgreSQL test the child run skips.
    #[test]
    fn skip_probe() {
        if std::env::var_os(PROBE).is_some() {
            assert!(pg_url("skip_probe").is_none());
            assert!(pg_url("skip_probe_again").is_none());
        }
    }

    /// This test binary run again, as `cargo test` runs it (output captured), with only the
    /// probe and no `SHARDBOX_PG_URL`: its skips must show on stderr, numbered.
    #[test]
    fn a_skipped_postgres_test_says_so_past_the_test_capture() {
        let exe = std::env::current_exe().expect("this test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "test_schema::tests::skip_probe",
                "--test-threads=1",
            ])
            .env(PROBE, "1")
            .env_remove("SHARDBOX_PG_URL")
            .env_remove("RUST_TEST_NOCAPTURE")
            .output()
            .expect("run the probe");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(stdout.contains("1 passed"), "the probe ran: {stdout}");
        assert!(
            stderr.contains("SKIPPED #1 of this test binary: PostgreSQL test `skip_probe`")
                && stderr
                    .contains("SKIPPED #2 of this test binary: PostgreSQL test `skip_probe_again`")
                && stderr.contains("SHARDBOX_PG_URL="),
            "the notices pass the capture: {stderr}"
        );
    }
}

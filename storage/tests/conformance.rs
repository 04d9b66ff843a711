//! The storage conformance suite against every backend: `memory::`, `sqlite::` and
//! `postgres::` each run every case of `shardbox_storage::conformance`.
//!
//! PostgreSQL cases need `SHARDBOX_PG_URL` (e.g. `postgres://postgres@127.0.0.1:5432/test`);
//! each case runs in its own freshly created schema, dropped at the end, so cases run in
//! parallel. Without the variable they print a notice and pass without testing anything.

mod memory {
    use shardbox_core::memory::MemoryStorage;

    async fn fresh(_case: &str) -> Option<(MemoryStorage, ())> {
        Some((MemoryStorage::new(), ()))
    }

    shardbox_storage::conformance_suite!(fresh);
}

mod sqlite {
    use shardbox_storage::SqliteStorage;

    /// A new database file in a temporary directory, removed with the guard.
    async fn fresh(_case: &str) -> Option<(SqliteStorage, tempfile::TempDir)> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let storage = SqliteStorage::open(dir.path().join("shardbox.db"))
            .await
            .expect("open SQLite");
        Some((storage, dir))
    }

    shardbox_storage::conformance_suite!(fresh);
}

mod postgres {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, PgConnection};
    use shardbox_storage::{PostgresOptions, PostgresStorage};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Drops the case's schema when the case ends (also when it panics).
    struct Schema {
        url: String,
        name: String,
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name);
            match PgConnection::establish(&self.url).and_then(|mut c| {
                c.batch_execute(&sql)
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
            }) {
                Ok(()) => {}
                Err(e) => eprintln!("could not drop test schema {}: {e}", self.name),
            }
        }
    }

    /// A unique schema name for `case`: lower-case, at most 63 bytes.
    fn schema_name(case: &str) -> String {
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
        let case: String = case.chars().take(63 - 4 - suffix.len()).collect();
        format!("sbx_{case}{suffix}")
    }

    async fn fresh(case: &str) -> Option<(PostgresStorage, Schema)> {
        let Ok(url) = std::env::var("SHARDBOX_PG_URL") else {
            eprintln!(
                "SKIPPED: PostgreSQL conformance test `{case}` did not run; \
                 set SHARDBOX_PG_URL=postgres://postgres@127.0.0.1:5432/test to run it"
            );
            return None;
        };
        let name = schema_name(case);
        let guard = Schema {
            url: url.clone(),
            name: name.clone(),
        };
        let options = PostgresOptions::default()
            .schema(name)
            .pool_size(4)
            .min_idle(None);
        let storage = PostgresStorage::connect_with(url, options)
            .await
            .expect("connect to SHARDBOX_PG_URL");
        Some((storage, guard))
    }

    shardbox_storage::conformance_suite!(fresh);
}

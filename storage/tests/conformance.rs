//! The storage conformance suite (`shardbox-conformance`) against this crate's backends:
//! `sqlite::` and `postgres::` each run every case of it. (Core's `MemoryStorage` runs it in
//! the suite's own tests, `conformance/tests/memory.rs`.)
//!
//! PostgreSQL cases need `SHARDBOX_PG_URL` (e.g. `postgres://postgres@127.0.0.1:5432/test`);
//! each case runs in its own freshly created schema, dropped at the end, so cases run in
//! parallel. Without the variable they print a notice and pass without testing anything.

mod common;

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

    shardbox_conformance::conformance_suite!(fresh);
}

mod postgres {
    use super::common::{pg_url, Schema};
    use shardbox_storage::PostgresStorage;

    async fn fresh(case: &str) -> Option<(PostgresStorage, Schema)> {
        let url = pg_url(case)?;
        let schema = Schema::new(&url, case);
        let storage = schema.connect(4).await;
        Some((storage, schema))
    }

    shardbox_conformance::conformance_suite!(fresh);
}

/// The suite on a storage over two databases of each durable backend: two SQLite files, and
/// two PostgreSQL schemas (each a whole storage with its own pool, as a database is).
mod several_sqlite {
    use shardbox_core::databases::{Database, Databases};
    use shardbox_storage::SqliteStorage;
    use std::sync::Arc;

    async fn fresh(_case: &str) -> Option<(Databases, tempfile::TempDir)> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut dbs: Vec<Arc<dyn Database>> = Vec::new();
        for d in 0..2 {
            let storage = SqliteStorage::open(dir.path().join(format!("shardbox-{d}.db")))
                .await
                .expect("open SQLite");
            dbs.push(Arc::new(storage));
        }
        Some((Databases::new(dbs).expect("two databases"), dir))
    }

    shardbox_conformance::conformance_suite!(several_databases: fresh);
}

mod several_postgres {
    use super::common::{pg_url, Schema};
    use shardbox_core::databases::{Database, Databases};
    use std::sync::Arc;

    async fn fresh(case: &str) -> Option<(Databases, (Schema, Schema))> {
        let url = pg_url(case)?;
        let home = Schema::new(&url, &format!("{case}_db0"));
        let other = Schema::new(&url, &format!("{case}_db1"));
        let dbs: Vec<Arc<dyn Database>> = vec![
            Arc::new(home.connect(4).await),
            Arc::new(other.connect(4).await),
        ];
        Some((Databases::new(dbs).expect("two databases"), (home, other)))
    }

    shardbox_conformance::conformance_suite!(several_databases: fresh);
}

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

//! TLS to PostgreSQL (the `postgres-tls` feature): a storage opened with `sslmode=require`
//! connects, migrates and works, and the server's own view (`pg_stat_ssl`) shows every one of
//! its connections encrypted.
//!
//! Needs `SHARDBOX_PG_URL` and a server with `ssl = on` (`.ci/run` gives the local server a
//! self-signed certificate when it has none). Without the feature, libpq is built without TLS
//! and refuses `sslmode=require`, so this file compiles to nothing: CI runs it with
//! `cargo test -p shardbox-storage --features postgres-tls --test postgres_tls`.
#![cfg(feature = "postgres-tls")]

mod common;

use common::{pg_url, Schema};
use diesel::sql_types::{Bool, Text};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use shardbox_conformance::fixtures::{command, messages};
use shardbox_core::InboxStore;
use shardbox_storage::PostgresStorage;

/// A backend's row of `pg_stat_ssl`.
#[derive(QueryableByName, Debug)]
struct SslRow {
    #[diesel(sql_type = Bool)]
    ssl: bool,
    #[diesel(sql_type = Text)]
    version: String,
}

/// `url` with `sslmode=require` and `application_name` set.
fn require_tls(url: &str, application_name: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode=require&application_name={application_name}")
}

#[tokio::test]
async fn a_storage_with_sslmode_require_runs_over_tls() {
    let Some(url) = pg_url("a_storage_with_sslmode_require_runs_over_tls") else {
        return;
    };
    let schema = Schema::new(&url, "tls");
    let tls_url = require_tls(&url, &schema.name);

    // The storage: migrations, a write and a read, all on connections that require TLS.
    let storage = PostgresStorage::connect_with(tls_url.clone(), schema.options(2))
        .await
        .expect("connect with sslmode=require (is `ssl = on` on the server? see .ci/run)");
    storage
        .write(messages(vec![command(0, "t-1", "s-1")]))
        .await
        .expect("write over TLS");
    let counts = storage.counts(None).await.expect("counts over TLS");
    assert_eq!(counts.pending(), 1, "the message written over TLS is there");

    // The server's view: its own backend, then every backend the storage opened.
    let mut conn = PgConnection::establish(&tls_url).expect("raw connection with TLS");
    let own: SslRow = diesel::sql_query(
        "SELECT ssl, coalesce(version, '') AS version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .get_result(&mut conn)
    .expect("pg_stat_ssl");
    assert!(own.ssl, "this connection's backend uses SSL: {own:?}");
    assert!(own.version.starts_with("TLS"), "a TLS version: {own:?}");

    let storage_backends: Vec<SslRow> = diesel::sql_query(
        "SELECT s.ssl, coalesce(s.version, '') AS version \
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = $1 AND s.pid <> pg_backend_pid()",
    )
    .bind::<Text, _>(&schema.name)
    .load(&mut conn)
    .expect("pg_stat_ssl of the storage's backends");
    assert!(
        !storage_backends.is_empty(),
        "the storage's pooled connections are open"
    );
    assert!(
        storage_backends.iter().all(|row| row.ssl),
        "every connection of the storage uses SSL: {storage_backends:?}"
    );
    drop(storage);
}

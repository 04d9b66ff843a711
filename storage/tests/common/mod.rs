//! Helpers shared by the integration tests: PostgreSQL test schemas.
#![allow(dead_code)] // each test crate uses a part

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use shardbox_storage::{PostgresOptions, PostgresStorage};
use std::sync::atomic::{AtomicU32, Ordering};

/// The PostgreSQL URL for tests, or `None` after a loud notice that `test` is skipped.
pub fn pg_url(test: &str) -> Option<String> {
    match std::env::var("SHARDBOX_PG_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            eprintln!(
                "SKIPPED: PostgreSQL conformance test `{test}` did not run; \
                 set SHARDBOX_PG_URL=postgres://postgres@127.0.0.1:5432/test to run it"
            );
            None
        }
    }
}

/// A test schema with a unique name, dropped (with everything in it) when the guard drops,
/// also when the test panics.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
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
        let test: String = test.chars().take(63 - 4 - suffix.len()).collect();
        Schema {
            url: url.to_owned(),
            name: format!("sbx_{test}{suffix}"),
        }
    }

    /// Options for a small pool in this schema, every connection opened up front (so that
    /// concurrent cases really run concurrently).
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions::default()
            .schema(self.name.clone())
            .pool_size(4)
            .min_idle(None)
    }

    /// A storage in this schema.
    pub async fn connect(&self) -> PostgresStorage {
        PostgresStorage::connect_with(self.url.clone(), self.options())
            .await
            .expect("connect to SHARDBOX_PG_URL")
    }

    /// A plain connection with `search_path` set to this schema.
    pub fn raw(&self) -> PgConnection {
        let mut conn = PgConnection::establish(&self.url).expect("connect");
        conn.batch_execute(&format!("SET search_path TO \"{}\"", self.name))
            .expect("search_path");
        conn
    }
}

impl Drop for Schema {
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

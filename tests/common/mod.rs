//! Shared pieces of the integration tests: a test aggregate and backend factories.
#![allow(dead_code)]

pub mod cluster;

use serde::{Deserialize, Serialize};
use shardbox::core::memory::MemoryStorage;
use shardbox::core::Storage;
use shardbox::prelude::*;
use std::sync::Arc;

/// An aggregate that records, per target, the numbers it was sent, in handling order.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct Tally {
    pub applied: Vec<u64>,
    pub sum: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum TallyCommand {
    /// Record number `n` (ordered per target by the sender).
    Record(u64),
    /// Add to the sum.
    Add(i64),
}

impl Message for TallyCommand {
    const TYPE: &'static str = "tally.command";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum TallyEvent {
    Recorded(u64),
    Added(i64),
}

impl Message for TallyEvent {
    const TYPE: &'static str = "tally.event";
}

impl Aggregate for Tally {
    const KIND: &'static str = "tally";
    type Command = TallyCommand;
    type Event = TallyEvent;

    fn handle(&self, c: &TallyCommand, _: &Context<'_>) -> Result<Vec<TallyEvent>, HandlerError> {
        Ok(vec![match c {
            TallyCommand::Record(n) => TallyEvent::Recorded(*n),
            TallyCommand::Add(x) => TallyEvent::Added(*x),
        }])
    }

    fn apply(&mut self, e: &TallyEvent) {
        match e {
            TallyEvent::Recorded(n) => self.applied.push(*n),
            TallyEvent::Added(x) => self.sum += x,
        }
    }
}

/// A projection of Tally events: counts events per tally.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct TallyView {
    pub events: u64,
    pub sum: i64,
}

impl Projection for TallyView {
    const KIND: &'static str = "tally-view";
    type Event = TallyEvent;

    fn apply(&mut self, e: &TallyEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        self.events += 1;
        if let TallyEvent::Added(x) = e {
            self.sum += x;
        }
        Ok(())
    }
}

/// A fresh in-memory backend.
pub fn memory() -> Arc<dyn Storage> {
    Arc::new(MemoryStorage::new())
}

/// A fresh SQLite file in a temporary directory (kept alive by the returned guard).
pub async fn sqlite() -> (Arc<dyn Storage>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = shardbox::storage::SqliteStorage::open(dir.path().join("shardbox.db"))
        .await
        .expect("open SQLite");
    (Arc::new(storage), dir)
}

/// The PostgreSQL URL for tests, or `None` after a loud notice that `test` is skipped.
pub fn pg_url(test: &str) -> Option<String> {
    match std::env::var("SHARDBOX_PG_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            eprintln!(
                "SKIPPED: PostgreSQL test `{test}` did not run; \
                 set SHARDBOX_PG_URL=postgres://postgres@127.0.0.1:5432/test to run it"
            );
            None
        }
    }
}

/// A PostgreSQL schema of its own for one test, dropped with everything in it when the guard
/// drops (also when the test panics).
pub struct PgSchema {
    pub url: String,
    pub name: String,
}

impl PgSchema {
    /// A unique schema for `test`.
    pub fn new(url: &str, test: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
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
        PgSchema {
            url: url.to_owned(),
            name: format!("sbx_{test}{suffix}"),
        }
    }

    /// A storage in this schema with a pool of `pool_size`.
    pub async fn connect(&self, pool_size: u32) -> Arc<dyn Storage> {
        let options = shardbox::storage::PostgresOptions::default()
            .schema(self.name.clone())
            .pool_size(pool_size);
        Arc::new(
            shardbox::storage::PostgresStorage::connect_with(self.url.clone(), options)
                .await
                .expect("connect to SHARDBOX_PG_URL"),
        )
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        use diesel::connection::SimpleConnection;
        use diesel::Connection;
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name);
        let dropped = diesel::PgConnection::establish(&self.url)
            .map_err(|e| e.to_string())
            .and_then(|mut c| c.batch_execute(&sql).map_err(|e| e.to_string()));
        if let Err(e) = dropped {
            eprintln!("could not drop test schema {}: {e}", self.name);
        }
    }
}

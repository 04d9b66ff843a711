//! Shared pieces of the integration tests: a test aggregate and backend factories.
#![allow(dead_code)]

pub mod cluster;
mod every_backend;

#[allow(unused_imports)] // each test crate uses a part
pub(crate) use every_backend::on_every_backend;
#[allow(unused_imports)]
pub(crate) use every_backend::on_several_databases;

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

    async fn handle(
        &self,
        c: &TallyCommand,
        _: &Context<'_>,
    ) -> Result<Vec<TallyEvent>, HandlerError> {
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

    async fn apply(&mut self, e: &TallyEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        self.events += 1;
        if let TallyEvent::Added(x) = e {
            self.sum += x;
        }
        Ok(())
    }
}

/// Shard leases not yet expired, held by `node` (any node if `None`).
pub async fn live_leases(storage: &dyn Storage, node: Option<&str>) -> usize {
    let now = chrono::Utc::now();
    storage
        .sessions()
        .await
        .expect("sessions")
        .iter()
        .filter(|s| node.is_none_or(|node| s.node_id.as_ref().is_some_and(|n| n.0 == node)))
        .filter(|s| s.lease_until.is_some_and(|u| u > now))
        .count()
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

/// Two storages over one fresh database, as two nodes in one process have them: memory
/// shares one backend; SQLite opens one file twice; PostgreSQL connects twice (`connections`
/// each) to one schema named after `test`. The guard keeps the file or schema until dropped.
/// `None` (said loudly) for PostgreSQL without `SHARDBOX_PG_URL`.
#[allow(dead_code)] // each test crate uses a part of common
pub async fn two_storages(
    backend: &str,
    test: &str,
    connections: u32,
) -> Option<(Arc<dyn Storage>, Arc<dyn Storage>, Box<dyn std::any::Any>)> {
    match backend {
        "memory" => {
            let storage = memory();
            Some((storage.clone(), storage, Box::new(())))
        }
        "sqlite" => {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("shared.db");
            let open = || shardbox::storage::SqliteStorage::open(&path);
            let a: Arc<dyn Storage> = Arc::new(open().await.expect("open A"));
            let b: Arc<dyn Storage> = Arc::new(open().await.expect("open B"));
            Some((a, b, Box::new(dir)))
        }
        _ => {
            let url = pg_url(test)?;
            let schema = PgSchema::new(&url, test);
            let a: Arc<dyn Storage> = Arc::new(schema.connect(connections).await);
            let b: Arc<dyn Storage> = Arc::new(schema.connect(connections).await);
            Some((a, b, Box::new(schema)))
        }
    }
}

/// A storage over `n` fresh databases of `backend` ("memory", "sqlite" or "postgres": `n`
/// schemas named after `test`, `connections` each), and the guard that keeps them. `None`
/// (said loudly) for PostgreSQL without `SHARDBOX_PG_URL`.
#[allow(dead_code)] // each test crate uses a part of common
pub async fn several(
    backend: &str,
    test: &str,
    n: usize,
    connections: u32,
) -> Option<(Arc<dyn Storage>, Box<dyn std::any::Any>)> {
    use shardbox::core::databases::{Database, Databases};
    let mut dbs: Vec<Arc<dyn Database>> = Vec::new();
    let guard: Box<dyn std::any::Any> = match backend {
        "memory" => {
            for _ in 0..n {
                dbs.push(Arc::new(MemoryStorage::new()));
            }
            Box::new(())
        }
        "sqlite" => {
            let dir = tempfile::tempdir().expect("tempdir");
            for d in 0..n {
                let path = dir.path().join(format!("shardbox-{d}.db"));
                let storage = shardbox::storage::SqliteStorage::open(path)
                    .await
                    .expect("open SQLite");
                dbs.push(Arc::new(storage));
            }
            Box::new(dir)
        }
        _ => {
            let url = pg_url(test)?;
            let mut schemas = Vec::new();
            for d in 0..n {
                let schema = PgSchema::new(&url, &format!("{test}_db{d}"));
                dbs.push(Arc::new(schema.connect(connections).await));
                schemas.push(schema);
            }
            Box::new(schemas)
        }
    };
    let storage = Databases::new(dbs).expect("a storage over several databases");
    Some((Arc::new(storage), guard))
}

/// The PostgreSQL URL and test schemas, shared with the storage crate's tests.
#[allow(unused_imports)] // each test crate uses a part
pub use shardbox_storage::test_schema::{pg_url, TestSchema as PgSchema};

/// Steady traffic for the multi-node tests: round n sends `Record(n)` to every one of `ids` in
/// one write, through `via[n % via.len()]` (clients talk to any node), every `every`, until
/// [`Rounds::stop`]. A send that fails panics the test, naming its round and sender.
#[allow(dead_code)] // each test crate uses a part of common
pub struct Rounds {
    stop: Arc<std::sync::atomic::AtomicBool>,
    sent: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)]
impl Rounds {
    /// Starts the rounds on the current runtime.
    pub fn start(
        via: Vec<shardbox::Shardbox>,
        ids: Vec<String>,
        every: std::time::Duration,
    ) -> Self {
        use std::sync::atomic::Ordering;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = {
            let (stop, sent) = (stop.clone(), sent.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let n = sent.load(Ordering::SeqCst);
                    let commands: Vec<(&str, TallyCommand)> = ids
                        .iter()
                        .map(|id| (id.as_str(), TallyCommand::Record(n)))
                        .collect();
                    let sender = n as usize % via.len();
                    if let Err(e) = via[sender].send_many::<Tally>(&commands).await {
                        panic!("round {n} through sender {sender}: {e}");
                    }
                    sent.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(every).await;
                }
            })
        };
        Rounds { stop, sent, task }
    }

    /// Rounds sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops after the round in flight; returns how many were sent.
    pub async fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.expect("the rounds' task");
        self.sent.load(std::sync::atomic::Ordering::SeqCst)
    }
}

//! [`Databases`]: one storage over several databases, each running today's schema for the
//! shards it holds.
//!
//! ```text
//!  Databases [home = 0, 1, 2, …]              each a whole storage of one database
//!   shard-scoped calls (page, stage commit, lease, next due, expired rows)
//!        └─► the shard's database, with its local shard index (map.rs)
//!   a stage's rows for targets of other databases
//!        └─► StageCommit::outbox of its own database ─► relays copy them (relays.rs)
//!   sends from the application ─► straight to each target's database
//!   membership, strategy, re-sharding announcements, kind settings' reads, catch-up jobs
//!   (and their steps' ticks), read models' versions ─► the home database
//!   a catch-up's first step and its end ─► every database, around the step's commit
//!                                          (catch_up.rs)
//!   whole-storage reads (counts, depths, dead letters, events) ─► every database, merged
//! ```
//!
//! Inside one database nothing changes: a stage is still one fenced transaction. A storage of
//! one database is today's mode. Seqs, event seqs and dead-letter ids are made unique across
//! databases (`local × N + database`), so whatever the storage hands out names one row.
//!
//! Not supported yet, refused with [`StorageError::Unsupported`] naming it: retiring a read
//! model's version (see docs/clustering.md, "Past one database").

mod catch_up;
mod events;
mod inbox;
mod listener;
pub mod map;
mod records;
mod registry;
mod relays;
pub mod strategy;
mod translate;

pub use map::{DatabaseMap, MAX_DATABASES, SLICES};
pub use relays::RelayRound;
pub use strategy::DatabaseStrategy;

use crate::model::error::StorageError;
use crate::model::strategy::{ShardStrategy, StableHashStrategy};
use crate::storage::{Inspect, SchemaCheck, Storage, WriteListener};
use std::sync::Arc;

/// How many outbox rows a relay copies in one transaction unless told otherwise.
pub const DEFAULT_RELAY_BATCH: usize = 500;

/// A database a [`Databases`] storage spans: any storage that can also be inspected.
pub trait Database: Storage + Inspect {}

impl<T: Storage + Inspect> Database for T {}

/// One storage over several databases (see the module docs). The first is the home database.
pub struct Databases {
    dbs: Vec<Arc<dyn Database>>,
    map: DatabaseMap,
    listener: listener::Listeners,
    relays: Vec<crate::cluster::relay::Relay>,
    outbox_written: tokio::sync::Notify,
    /// The application's strategy, whose slice of a target picks its database (the stock one
    /// until [`DatabaseStrategy::over`] tells it the application's).
    placement: std::sync::RwLock<Arc<dyn ShardStrategy>>,
}

impl Databases {
    /// A storage over `databases`, the first being the home database. Refused for none or
    /// more than [`MAX_DATABASES`].
    pub fn new(databases: Vec<Arc<dyn Database>>) -> Result<Self, StorageError> {
        let map = DatabaseMap::new(databases.len())?;
        Ok(Databases {
            listener: listener::Listeners::new(databases.clone(), map),
            relays: Self::make_relays(&databases, DEFAULT_RELAY_BATCH),
            dbs: databases,
            map,
            outbox_written: tokio::sync::Notify::new(),
            placement: std::sync::RwLock::new(Arc::new(StableHashStrategy::new())),
        })
    }

    /// Places targets by `strategy` from now on: the application's own, so that its
    /// co-located kinds share a database (the builder and the tools call this through
    /// [`DatabaseStrategy::over`]).
    pub fn place_by(&self, strategy: Arc<dyn ShardStrategy>) {
        *crate::sync::write(&self.placement) = strategy;
    }

    /// The database a target (kind, id) lives in.
    pub fn database_of_target(&self, kind: &str, id: &str) -> u32 {
        let strategy = crate::sync::read(&self.placement).clone();
        DatabaseStrategy::new(strategy, self.map).database_of(kind, id)
    }

    /// `keys` grouped by the database of their target, in database order.
    fn keys_by_database<'k>(
        &self,
        keys: impl IntoIterator<Item = (&'k str, &'k str)>,
    ) -> Vec<Vec<usize>> {
        let mut groups = vec![Vec::new(); self.dbs.len()];
        for (i, (kind, id)) in keys.into_iter().enumerate() {
            groups[self.database_of_target(kind, id) as usize].push(i);
        }
        groups
    }

    /// `storage` as a storage over several databases, if it is one (`None` for a storage of
    /// one database, which is today's mode).
    pub fn of<S: Storage + ?Sized>(storage: &S) -> Option<&Databases> {
        storage.as_any()?.downcast_ref::<Databases>()
    }

    /// Sets how many outbox rows a relay copies in one transaction (default 500).
    pub fn relay_batch(mut self, rows: usize) -> Self {
        self.relays = Self::make_relays(&self.dbs, rows.max(1));
        self
    }

    /// The map of shards, seqs and ids to databases.
    pub fn map(&self) -> DatabaseMap {
        self.map
    }

    /// The databases, home first.
    pub fn databases(&self) -> &[Arc<dyn Database>] {
        &self.dbs
    }

    fn home(&self) -> &dyn Database {
        self.dbs[0].as_ref()
    }

    fn db(&self, database: u32) -> &dyn Database {
        self.dbs[database as usize].as_ref()
    }

    /// Runs `f` on every database in turn; the results in database order, or the first error.
    async fn each<'a, T, F, Fut>(&'a self, f: F) -> Result<Vec<T>, StorageError>
    where
        F: Fn(u32, &'a dyn Database) -> Fut,
        Fut: std::future::Future<Output = Result<T, StorageError>> + 'a,
    {
        let mut out = Vec::with_capacity(self.dbs.len());
        for (d, db) in self.dbs.iter().enumerate() {
            out.push(f(d as u32, db.as_ref()).await?);
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Storage for Databases {
    fn describe(&self) -> String {
        let each: Vec<String> = self.dbs.iter().map(|d| d.describe()).collect();
        format!("{} databases: {}", self.dbs.len(), each.join(", "))
    }

    fn write_listener(&self) -> Option<&dyn WriteListener> {
        self.listener
            .any()
            .then_some(&self.listener as &dyn WriteListener)
    }

    async fn node_stopped(&self) -> Result<(), StorageError> {
        self.each(|_, db| db.node_stopped()).await.map(drop)
    }

    fn runs_writes_in_transaction(&self) -> bool {
        self.dbs.iter().all(|d| d.runs_writes_in_transaction())
    }

    fn schema_check(&self) -> Option<&dyn SchemaCheck> {
        self.home().schema_check()
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

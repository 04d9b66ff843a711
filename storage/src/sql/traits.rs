//! [`SqlStorage`]: the storage traits of shardbox-core for a diesel backend, written once.
//!
//! ```text
//!  SqliteStorage   = SqlStorage<SqliteConnection, SqliteBackend>   backend: path, checkpoints
//!  PostgresStorage = SqlStorage<PgConnection, PostgresBackend>     backend: schema, notify, listen
//!
//!  impl<C, B: StorageBackend<Conn = C>> InboxStore, WorkRegistry, … for SqlStorage<C, B>
//!    each method: self.db.run(move |conn| sql::<file>::<unit>(conn, …))   (one blocking unit)
//!    then, for writes: self.backend.written(shards) / decided(shards)      (what differs)
//! ```
//!
//! Each async method moves its arguments into one closure that runs on the blocking pool
//! (checkout, transaction and queries together, see [`crate::pool`]) and calls a unit of work
//! of `crate::sql`, generic over the connection. The traits are implemented once for the
//! generic [`SqlStorage`] (core's traits are foreign, so they cannot be implemented for "any
//! type with a diesel backend", only for a type of this crate); what each backend adds —
//! its connection type, what it does after a write, its listener — is a [`StorageBackend`].
//! One file per trait: `inbox`, `dead_letters`, `registry`, `events` (events and entity
//! states), `catch_up`; `Storage`, `SchemaCheck` and `Inspect` are here.

// The generic impls here and in the submodules are public (core's traits, for the public `SqliteStorage` and
// `PostgresStorage`) and are bounded by `StorageBackend`, which is crate-private on purpose:
// it exists so that one body serves both backends, not for another crate to implement. The
// two lints would have it public (and `Dialect`, `Db` with it).
#![allow(private_bounds, private_interfaces)]

use crate::pool::Db;
use crate::sql::Dialect;
use diesel::r2d2::R2D2Connection;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness};
use shardbox_core::{ShardIndex, StorageError, WriteListener};

mod catch_up;
mod dead_letters;
mod events;
mod inbox;
mod registry;

/// Durable storage through diesel over one backend `B`: [`SqliteStorage`](crate::SqliteStorage)
/// or [`PostgresStorage`](crate::PostgresStorage). Implements every storage trait of
/// shardbox-core, and [`Inspect`](crate::Inspect).
pub struct SqlStorage<C: R2D2Connection + Send + 'static, B> {
    /// The connection pool, and the unit of work's blocking run.
    pub(crate) db: Db<C>,
    /// What the backend keeps besides (a path and checkpoints; a schema and notifications).
    pub(crate) backend: B,
}

/// A connection type the storage runs on: its units of work ([`Dialect`]), its pool, its
/// migrations.
pub(crate) trait SqlConnection:
    Dialect + R2D2Connection + MigrationHarness<<Self as diesel::Connection>::Backend> + Send + 'static
{
}

impl<C> SqlConnection for C where
    C: Dialect
        + R2D2Connection
        + MigrationHarness<<C as diesel::Connection>::Backend>
        + Send
        + 'static
{
}

/// What a backend adds to [`SqlStorage`]: its connection type and migrations, and what it
/// does besides the SQL. Implemented by `SqliteBackend` and `PostgresBackend`.
#[async_trait::async_trait]
pub(crate) trait StorageBackend: Send + Sync + Sized + 'static {
    /// The diesel connection type the units of work run on.
    type Conn: SqlConnection;

    /// The backend's schema migrations (checked by the readiness probe).
    const MIGRATIONS: EmbeddedMigrations;

    /// `Storage::describe`.
    fn describe(&self, db: &Db<Self::Conn>) -> String;

    /// Told of every committed write, with the shards it wrote.
    fn written(&self, shards: &[ShardIndex]);

    /// Told of every commit that decided command outcomes, with its shard.
    fn decided(&self, shards: &[ShardIndex]);

    /// `Storage::write_listener`.
    fn write_listener(storage: &SqlStorage<Self::Conn, Self>) -> Option<&dyn WriteListener>;

    /// `Storage::node_stopped`.
    async fn node_stopped(&self, db: &Db<Self::Conn>) -> Result<(), StorageError>;
}

/// The schema check of a readiness probe: the migrations applied, read on a pooled
/// connection, against those this binary embeds (no migration is run).
#[async_trait::async_trait]
impl<C: SqlConnection, B: StorageBackend<Conn = C>> shardbox_core::storage::SchemaCheck
    for SqlStorage<C, B>
{
    async fn check_schema(&self) -> Result<(), StorageError> {
        let name = self.db.name().to_owned();
        self.db
            .run(move |conn| {
                crate::migrate::migrate(conn, &B::MIGRATIONS, crate::MigrationMode::Verify, &name)
                    .map(drop)
            })
            .await
    }
}

#[async_trait::async_trait]
impl<C: SqlConnection, B: StorageBackend<Conn = C>> shardbox_core::Storage for SqlStorage<C, B> {
    fn describe(&self) -> String {
        self.backend.describe(&self.db)
    }

    fn write_listener(&self) -> Option<&dyn shardbox_core::WriteListener> {
        B::write_listener(self)
    }

    async fn node_stopped(&self) -> Result<(), shardbox_core::StorageError> {
        self.backend.node_stopped(&self.db).await
    }

    fn schema_check(&self) -> Option<&dyn shardbox_core::storage::SchemaCheck> {
        Some(self)
    }
}

impl<C: SqlConnection, B: StorageBackend<Conn = C>> SqlStorage<C, B> {
    /// The dead letters, oldest first.
    pub async fn dead_letters(
        &self,
    ) -> Result<Vec<shardbox_core::storage::DeadLetter>, shardbox_core::StorageError> {
        self.db.run(crate::sql::inbox::dead_letters).await
    }

    /// Every row of the Inbox, in `seq` order. Loads the whole table: for tests and
    /// inspection of small databases, not for production monitoring (use
    /// [`counts`](shardbox_core::InboxStore::counts)).
    pub async fn rows(
        &self,
    ) -> Result<Vec<shardbox_core::InboxMessage>, shardbox_core::StorageError> {
        self.db.run(crate::sql::inbox::rows).await
    }
}

#[async_trait::async_trait]
impl<C: SqlConnection, B: StorageBackend<Conn = C>> crate::Inspect for SqlStorage<C, B> {
    async fn dead_letters(
        &self,
    ) -> Result<Vec<shardbox_core::storage::DeadLetter>, shardbox_core::StorageError> {
        SqlStorage::<C, B>::dead_letters(self).await
    }

    async fn rows(&self) -> Result<Vec<shardbox_core::InboxMessage>, shardbox_core::StorageError> {
        SqlStorage::<C, B>::rows(self).await
    }
}

//! [`SqliteStorage`]: the embedded default, one SQLite file (bundled SQLite, nothing to
//! install).
//!
//! ```text
//!  open(path) ─► first connection: pragmas, migrations in BEGIN IMMEDIATE
//!             ─► r2d2 pool, every connection: busy_timeout, WAL, synchronous=NORMAL,
//!                foreign_keys
//!  writes     ─► the process's writers take turns on one connection of their own (its
//!                page cache stays warm), then BEGIN IMMEDIATE: one writer at a time;
//!                another process's writers wait up to busy_timeout
//!  reads      ─► deferred transactions, concurrent with the writer (WAL)
//!  checkpoint ─► a background thread copies the WAL into the file every 100 ms
//!                (see `checkpoint`); commits do not
//! ```
//!
//! Several processes may open the same file: migrations run inside an immediate transaction,
//! so one process applies them and the others find them applied.

mod checkpoint;
mod event_rows;
mod inbox_rows;
mod options;

pub use options::SqliteOptions;

use crate::checkout::Manager;
use crate::error::{classify_connect, Failure};
use crate::migrate::migrate;
use crate::pool::{blocking, pool_builder, Db};
use crate::redact::DbName;
use crate::rows::{EntityStateRow, NewEntityStateRow, NewEventRow, NewInboxRow};
use crate::sql::prepared::{MarkDelivered, UpsertStates};
use crate::sql::{ladder, AddressedRow, Dialect};
use checkpoint::Checkpointer;
use diesel::connection::Connection;
use diesel::RunQueryDsl;
use diesel::SqliteConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations};
use options::{Pragmas, SAFETY_NET_PAGES, SQLITE_DEFAULT_PAGES};
use shardbox_core::StorageError;
use std::path::{Path, PathBuf};

/// The SQLite schema's migrations (`storage/migrations/sqlite`).
pub const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// Durable storage in one SQLite file.
///
/// ```no_run
/// # async fn run() -> Result<(), shardbox_core::StorageError> {
/// use shardbox_storage::{SqliteOptions, SqliteStorage};
/// let storage = SqliteStorage::open("shardbox.db").await?;
/// let tuned = SqliteStorage::open_with("other.db", SqliteOptions::default().pool_size(4)).await?;
/// # Ok(()) }
/// ```
pub struct SqliteStorage {
    db: Db<SqliteConnection>,
    path: PathBuf,
    /// The background checkpoint thread, stopped when the storage is dropped.
    _checkpointer: Option<Checkpointer>,
}

impl std::fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.db.state();
        f.debug_struct("SqliteStorage")
            .field("path", &self.path)
            .field("connections", &state.connections)
            .field("idle", &state.idle_connections)
            .finish()
    }
}

impl SqliteStorage {
    /// Opens (creating if needed) the database at `path` with default options, migrating it
    /// to the schema of this binary.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StorageError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the database at `path` with `options`.
    ///
    /// Errors: [`StorageError::Unavailable`] if the file cannot be opened,
    /// [`StorageError::ReadOnly`] if it cannot be written, [`StorageError::SchemaMismatch`]
    /// if its schema is newer than this binary (or has pending migrations and
    /// [`MigrationMode::Verify`](crate::MigrationMode::Verify) was chosen).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<Self, StorageError> {
        let path = path.as_ref().to_path_buf();
        blocking(move || open_blocking(path, options)).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn describe_backend(&self) -> String {
        format!("sqlite {}", self.db.name())
    }

    fn written_backend(&self, _shards: &[shardbox_core::ShardIndex]) {
        // No notification channel between processes.
    }

    fn decided_backend(&self, _shards: &[shardbox_core::ShardIndex]) {
        // No notification channel between processes: a process that runs no node finds
        // other processes' outcomes by its fallback poll.
    }

    fn write_listener_backend(&self) -> Option<&dyn shardbox_core::WriteListener> {
        // SQLite has no notification channel between processes.
        None
    }

    /// A node stopped: the WAL is copied into the database file and truncated, so that a
    /// stopped application leaves no large `-wal` file behind (the background checkpoints
    /// copy it but never shrink it). Waits up to `busy_timeout` for other connections'
    /// readers and writers; if another process keeps the database busy, the WAL is left as
    /// it is (logged), to be truncated at a later stop.
    async fn node_stopped_backend(&self) -> Result<(), StorageError> {
        let database = self.db.name().to_owned();
        let row = self.db.run(checkpoint::truncate).await?;
        if row.busy != 0 {
            tracing::info!(%database, wal_pages = row.log, checkpointed = row.checkpointed, "WAL not truncated at shutdown: the database is busy (another process?)");
        } else {
            tracing::debug!(%database, wal_pages = row.log, "WAL checkpointed and truncated at shutdown");
        }
        Ok(())
    }
}

fn open_blocking(path: PathBuf, options: SqliteOptions) -> Result<SqliteStorage, StorageError> {
    let name = path.display().to_string();
    let url = match path.to_str() {
        Some(":memory:") | Some("") => {
            return Err(StorageError::Unavailable {
                database: name,
                reason: "an in-memory SQLite database would be a different empty database on \
                         every pooled connection; use shardbox_core::memory::MemoryStorage"
                    .into(),
                advice: "",
                source: None,
            })
        }
        Some(url) => url.to_owned(),
        None => {
            return Err(StorageError::Unavailable {
                database: name,
                reason: "the path is not valid UTF-8".into(),
                advice: "",
                source: None,
            })
        }
    };
    let db_name = DbName::path(name.clone());
    let pragmas = Pragmas {
        busy_timeout: options.busy_timeout,
        autocheckpoint: match options.checkpoint_interval {
            Some(_) => SAFETY_NET_PAGES,
            None => SQLITE_DEFAULT_PAGES,
        },
    };

    let mut conn = SqliteConnection::establish(&url).map_err(|e| classify_connect(e, &db_name))?;
    pragmas
        .apply(&mut conn)
        .map_err(|e| classify_connect(e, &db_name))?;
    let applied = conn
        .immediate_transaction(|conn| migrate(conn, &SQLITE_MIGRATIONS, options.migrations, &name))
        .map_err(|f: Failure| f.into_storage_error(&db_name))?;
    if !applied.is_empty() {
        tracing::info!(database = %name, ?applied, "migrated SQLite schema");
    }
    drop(conn);

    let pool = pool_builder(
        &db_name,
        options.pool_size,
        None,
        options.connection_timeout,
    )
    .connection_customizer(Box::new(pragmas))
    .build(Manager::<SqliteConnection>::new(url.clone()))
    .map_err(|e| classify_connect(e, &db_name))?;
    let checkpointer = match options.checkpoint_interval {
        Some(interval) => Some(Checkpointer::start(&url, &name, interval, pragmas)?),
        None => None,
    };
    Ok(SqliteStorage {
        db: Db::new(pool, db_name.clone()).gate_writers(Box::new(move || {
            let mut conn =
                SqliteConnection::establish(&url).map_err(|e| classify_connect(e, &db_name))?;
            pragmas
                .apply(&mut conn)
                .map_err(|e| classify_connect(e, &db_name))?;
            Ok(conn)
        })),
        path,
        _checkpointer: checkpointer,
    })
}

impl Dialect for SqliteConnection {
    const SHARE_LOCK: &'static str = "";

    fn write_transaction<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        // Writers of this process take turns on the writer connection before BEGIN IMMEDIATE
        // (see Db::gate_writers); other processes still meet the busy timeout.
        crate::pool::gated(self, |writer| writer.immediate_transaction(work))
    }

    fn write_statement<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        self.write_transaction(work)
    }

    fn lock_sessions_in_order(&mut self, _shards: &[i32]) -> Result<(), Failure> {
        // The immediate transaction already excludes every other writer.
        Ok(())
    }

    fn read_shard_count_locked(&mut self, _exclusive: bool) -> Result<Option<String>, Failure> {
        // Inside an immediate transaction: no other writer runs until it ends.
        use crate::schema::shardbox_settings::dsl as st;
        use diesel::prelude::*;
        Ok(st::shardbox_settings
            .filter(st::name.eq("shard_count"))
            .select(st::value)
            .first(self)
            .optional()?)
    }

    fn lock_catch_up_start(&mut self, _kind: &str, _tenant: &str) -> Result<(), Failure> {
        // The immediate transaction already excludes every other writer.
        Ok(())
    }

    fn lock_appends(&mut self) -> Result<(), Failure> {
        // The immediate transaction already excludes every other writer.
        Ok(())
    }

    fn append_event_rows(&mut self, rows: &[NewEventRow]) -> Result<usize, Failure> {
        // Writers are serialised, so events commit in seq order already.
        event_rows::append(self, rows)
    }

    const CLOCK_NOW_MICROS: &'static str =
        "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";

    fn inserts_in_one_statement(_rows: usize) -> bool {
        // Drawing the seqs is a statement of its own (see `inbox_rows`).
        false
    }

    fn insert_inbox_rows(&mut self, rows: &[NewInboxRow]) -> Result<Vec<i32>, Failure> {
        inbox_rows::insert(self, rows)
    }

    fn insert_addressed_rows(
        &mut self,
        _rows: &[&NewInboxRow],
        _expected: u32,
    ) -> Option<Result<Vec<AddressedRow>, Failure>> {
        None
    }

    fn upsert_state_rows(&mut self, rows: &[NewEntityStateRow<'_>]) -> Result<(), Failure> {
        ladder!(rows, |rows| {
            UpsertStates(rows).execute(self)?;
        });
        Ok(())
    }

    fn mark_delivered_rows(
        &mut self,
        shard: i32,
        seqs: &[i64],
        at: i64,
        keep_until: i64,
    ) -> Result<usize, Failure> {
        let mut touched = 0;
        ladder!(seqs, |seqs| {
            touched += MarkDelivered {
                shard,
                seqs,
                at,
                keep_until,
            }
            .execute(self)?;
        });
        Ok(touched)
    }

    fn load_state_rows(
        &mut self,
        kind: &str,
        tenant: &str,
        ids: &[String],
    ) -> Result<Vec<EntityStateRow>, Failure> {
        use crate::schema::entity_states::dsl as es;
        use diesel::{ExpressionMethods, QueryDsl, SelectableHelper};
        let states = es::entity_states
            .filter(es::kind.eq(kind))
            .filter(es::tenant.eq(tenant))
            .select(EntityStateRow::as_select());
        Ok(match ids {
            // One id as `=`: a statement diesel keeps prepared (an `IN` list it never does).
            [id] => states.filter(es::id.eq(id)).load(self)?,
            ids => states.filter(es::id.eq_any(ids)).load(self)?,
        })
    }
}

/// The units of work over [`SqliteConnection`].
mod units {
    type Conn = diesel::SqliteConnection;
    crate::sql::units!();
}

/// The schema check of a readiness probe: the migrations applied, read on a pooled
/// connection, against those this binary embeds (no migration is run).
#[async_trait::async_trait]
impl shardbox_core::storage::SchemaCheck for SqliteStorage {
    async fn check_schema(&self) -> Result<(), StorageError> {
        let name = self.db.name().to_owned();
        self.db
            .run(move |conn| {
                migrate(
                    conn,
                    &SQLITE_MIGRATIONS,
                    crate::MigrationMode::Verify,
                    &name,
                )
                .map(drop)
            })
            .await
    }
}

crate::sql::storage_impls!(SqliteStorage, units);

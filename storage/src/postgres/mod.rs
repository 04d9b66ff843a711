//! [`PostgresStorage`]: one PostgreSQL database shared by every node of a cluster.
//!
//! ```text
//!  connect(url) ─► first connection: search_path, then in one transaction:
//!                  pg_advisory_xact_lock(migrations, schema) ─► CREATE SCHEMA IF NOT EXISTS
//!                  ─► migrations
//!               ─► r2d2 pool, every connection: SET search_path TO "<schema>" (if chosen)
//!  writes       ─► READ COMMITTED transactions; row locks and advisory locks where a
//!                  check-then-write must be atomic (fence, pick-up, catch-up start)
//!  reads        ─► reads that must agree are one statement (a page read, see
//!                  `sql::page_read`); several rows of a kind are written by one statement
//!                  of array parameters (see `arrays`)
//!  notify       ─► after a transaction that wrote inbox rows commits, pg_notify with their
//!                  shards (see `notify`); a node's listener hears them on a connection of its
//!                  own (see `listen`)
//! ```
//!
//! Many processes may connect at once: the advisory lock lets one of them migrate while the
//! others wait and then find the schema up to date.

mod arrays;
mod dialect;
mod listen;
mod notify;
mod options;
mod own_echo;
mod several;
mod stage_statement;
mod states_by_id;

pub use options::PostgresOptions;

use crate::checkout::Manager;
use crate::error::{classify_connect, Failure};
use crate::migrate::migrate;
use crate::pool::{blocking, pool_builder, Db};
use crate::redact::DbName;
use diesel::connection::{Connection, SimpleConnection};
use diesel::sql_types::{Integer, Nullable, Text};
use diesel::{PgConnection, RunQueryDsl};
use diesel_migrations::{embed_migrations, EmbeddedMigrations};
use options::{quote_identifier, SearchPath};
use shardbox_core::{ListenerHandle, NodeId, ShardIndex, ShardObserver, StorageError};
use std::sync::Arc;

/// The PostgreSQL schema's migrations (`storage/migrations/postgres`).
pub const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// First key of the advisory locks Shardbox takes (`pg_advisory_xact_lock(class, hash)`),
/// one class per purpose; the second key is a hash of the schema (and more).
const LOCK_MIGRATIONS: i32 = 0x5342_0001;
const LOCK_CATCH_UP_START: i32 = 0x5342_0002;
const LOCK_EVENT_APPEND: i32 = 0x5342_0003;

/// Durable storage in a PostgreSQL database, for clustered mode.
///
/// ```no_run
/// # async fn run() -> Result<(), shardbox_core::StorageError> {
/// use shardbox_storage::{PostgresOptions, PostgresStorage};
/// let storage = PostgresStorage::connect("postgres://app@db:5432/app").await?;
/// let isolated = PostgresStorage::connect_with(
///     "postgres://app@db:5432/app",
///     PostgresOptions::default().schema("shardbox").pool_size(16),
/// )
/// .await?;
/// # Ok(()) }
/// ```
pub struct PostgresStorage {
    db: Db<PgConnection>,
    schema: Option<String>,
    /// For the listener's own connection; holds the password, so never printed.
    url: String,
    listen: bool,
    notifier: notify::Notifier,
    /// Names this instance's notifications and wakes its own listeners in process (see
    /// [`own_echo::OwnEcho`]).
    echo: own_echo::OwnEcho,
}

impl std::fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.db.state();
        f.debug_struct("PostgresStorage")
            .field("database", &self.db.name())
            .field("schema", &self.schema)
            .field("connections", &state.connections)
            .field("idle", &state.idle_connections)
            .finish()
    }
}

impl PostgresStorage {
    /// Connects to the database at `url` (`postgres://user:password@host:port/dbname`) with
    /// default options, migrating it to the schema of this binary.
    pub async fn connect(url: impl Into<String>) -> Result<Self, StorageError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects with `options`.
    ///
    /// Errors: [`StorageError::Unavailable`] if the server cannot be reached,
    /// [`StorageError::AuthenticationFailed`] if it refuses the login,
    /// [`StorageError::UnknownRole`] or [`StorageError::UnknownDatabase`] if it has no such
    /// user or database, [`StorageError::InvalidUrl`] if libpq cannot parse the URL,
    /// [`StorageError::SchemaMismatch`] if the schema is newer than this binary (or
    /// has pending migrations and [`MigrationMode::Verify`](crate::MigrationMode::Verify) was
    /// chosen). Error messages name the URL with its password redacted.
    pub async fn connect_with(
        url: impl Into<String>,
        options: PostgresOptions,
    ) -> Result<Self, StorageError> {
        let url = url.into();
        blocking(move || connect_blocking(url, options)).await
    }

    /// The schema the tables live in, if one was chosen.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    fn describe_backend(&self) -> String {
        match &self.schema {
            Some(schema) => format!("postgres {} (schema {schema})", self.db.name()),
            None => format!("postgres {}", self.db.name()),
        }
    }

    fn written_backend(&self, shards: &[ShardIndex]) {
        self.echo.written(shards);
        self.notifier.written(shards);
    }

    fn decided_backend(&self, shards: &[ShardIndex]) {
        self.echo.decided(shards);
        self.notifier.decided(shards);
    }

    fn write_listener_backend(&self) -> Option<&dyn shardbox_core::WriteListener> {
        self.listen
            .then_some(self as &dyn shardbox_core::WriteListener)
    }

    /// Nothing to tidy: the server keeps its own files.
    async fn node_stopped_backend(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

/// `LISTEN`s on a connection of its own, on a thread of its own, for the notifications every
/// write sends; reconnects with back-off when the connection drops (see the `listen` module).
impl shardbox_core::WriteListener for PostgresStorage {
    fn listen(
        &self,
        node_id: &NodeId,
        shard_count: u32,
        observer: Arc<dyn ShardObserver>,
    ) -> Result<ListenerHandle, StorageError> {
        let target = listen::ListenTarget {
            url: self.url.clone(),
            schema: self.schema.clone(),
            database: self.db.db_name().clone(),
            echo: self.echo.clone(),
        };
        listen::start(target, node_id, shard_count, observer)
    }
}

/// The database as a schema error names it: with the schema, where one was chosen.
fn in_schema(database: &str, schema: Option<&str>) -> String {
    match schema {
        Some(schema) => format!("{database} (schema {schema})"),
        None => database.to_owned(),
    }
}

fn connect_blocking(
    url: String,
    options: PostgresOptions,
) -> Result<PostgresStorage, StorageError> {
    let name = DbName::url(&url);
    let search_path = SearchPath {
        schema: options.schema.clone(),
    };
    let mut conn = PgConnection::establish(&url).map_err(|e| classify_connect(e, &name))?;
    search_path
        .apply(&mut conn)
        .map_err(|e| classify_connect(e, &name))?;
    let applied = conn
        .transaction(|conn| {
            diesel::sql_query(
                "SELECT pg_advisory_xact_lock($1, hashtext(COALESCE($2, current_schema(), '')))",
            )
            .bind::<Integer, _>(LOCK_MIGRATIONS)
            .bind::<Nullable<Text>, _>(options.schema.as_deref())
            .execute(conn)?;
            if let Some(schema) = &options.schema {
                conn.batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {}",
                    quote_identifier(schema)
                ))?;
            }
            migrate(
                conn,
                &POSTGRES_MIGRATIONS,
                options.migrations,
                &in_schema(name.as_str(), options.schema.as_deref()),
            )
        })
        .map_err(|f: Failure| f.into_storage_error(&name))?;
    if !applied.is_empty() {
        tracing::info!(database = %name, schema = ?options.schema, ?applied, "migrated PostgreSQL schema");
    }
    drop(conn);

    let pool = pool_builder(
        &name,
        options.pool_size,
        options.min_idle,
        options.connection_timeout,
    )
    .connection_customizer(Box::new(search_path))
    .build(Manager::<PgConnection>::new(url.clone()))
    .map_err(|e| classify_connect(e, &name))?;
    let echo = own_echo::OwnEcho::new();
    let target = listen::ListenTarget {
        url: url.clone(),
        schema: options.schema.clone(),
        database: name.clone(),
        echo: echo.clone(),
    };
    let notifier = notify::Notifier::start(target, echo.origin())
        .map_err(|e| StorageError::Task(format!("could not start the notifier thread: {e}")))?;
    Ok(PostgresStorage {
        notifier,
        echo,
        db: Db::new(pool, name),
        schema: options.schema,
        url,
        listen: options.listen,
    })
}

/// The units of work over [`PgConnection`].
mod units {
    type Conn = diesel::PgConnection;
    crate::sql::units!();
}

/// The schema check of a readiness probe: the migrations applied, read on a pooled
/// connection, against those this binary embeds (no migration is run).
#[async_trait::async_trait]
impl shardbox_core::storage::SchemaCheck for PostgresStorage {
    async fn check_schema(&self) -> Result<(), StorageError> {
        let name = in_schema(self.db.name(), self.schema.as_deref());
        self.db
            .run(move |conn| {
                migrate(
                    conn,
                    &POSTGRES_MIGRATIONS,
                    crate::MigrationMode::Verify,
                    &name,
                )
                .map(drop)
            })
            .await
    }
}

crate::sql::storage_impls!(PostgresStorage, units);

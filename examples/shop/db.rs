//! The shop's database: Shardbox's storage and the application's own connection to the same
//! database, with the application's migration run at start.
//!
//! ```text
//!  SQLite (default)        a fresh file in a temporary directory, removed at the end
//!  --postgres URL          a fresh schema `shop_example_<pid>` in that database, dropped at
//!                          the end (Shardbox creates it and its tables; the application's
//!                          connection works in it through its search_path)
//! ```
//!
//! The application's connection is a diesel `MultiConnection` over both backends, so one
//! typed query serves both. It is a blocking connection: [`AppDb::run`] runs each unit of work
//! on it inside one `spawn_blocking`, never on a runtime worker. What the tables are and how
//! they are queried is order_list.rs's; this file only opens and migrates.

use crate::BoxError;
use crate::{order_list, order_list_v2};
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, QueryResult, SqliteConnection};
use shardbox::core::Storage;
use shardbox::{PostgresOptions, PostgresStorage, SqliteStorage};
use std::sync::{Arc, Mutex};

/// The application's own connection: either backend, one typed query for both.
#[derive(diesel::MultiConnection)]
pub enum AppConnection {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

/// The application's connection, shared by the run's tasks (one at a time).
#[derive(Clone)]
pub struct AppDb(Arc<Mutex<AppConnection>>);

impl AppDb {
    /// Opens the connection with `connect` and runs the application's migration on it.
    async fn open(
        connect: impl FnOnce() -> Result<AppConnection, BoxError> + Send + 'static,
    ) -> Result<AppDb, BoxError> {
        tokio::task::spawn_blocking(move || {
            let mut conn = connect()?;
            conn.batch_execute(order_list::MIGRATION)?;
            conn.batch_execute(order_list_v2::MIGRATION)?;
            Ok(AppDb(Arc::new(Mutex::new(conn))))
        })
        .await?
    }

    /// Runs `work` on the connection, off the runtime's worker threads.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut AppConnection) -> QueryResult<T> + Send + 'static,
    ) -> Result<T, BoxError> {
        let conn = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn
                .lock()
                .map_err(|_| "the application's connection was poisoned by a panic")?;
            Ok(work(&mut conn)?)
        })
        .await?
    }
}

/// Where the run keeps its data: removed (the file) or dropped (the schema) with it.
enum Place {
    // Removed with everything in it when dropped.
    Sqlite { _dir: tempfile::TempDir },
    Postgres { url: String, schema: String },
}

impl Drop for Place {
    fn drop(&mut self) {
        let Place::Postgres { url, schema } = self else {
            return; // the temporary directory removes itself
        };
        let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        let dropped = PgConnection::establish(url)
            .map_err(|e| e.to_string())
            .and_then(|mut c| c.batch_execute(&sql).map_err(|e| e.to_string()));
        match dropped {
            Ok(()) => println!("dropped schema {schema}"),
            Err(e) => eprintln!("could not drop schema {schema}: {e}"),
        }
    }
}

/// Shardbox's storage and the application's connection, over one database.
pub struct ShopDb {
    pub storage: Arc<dyn Storage>,
    pub app: AppDb,
    /// What the run works on, for its output.
    pub described: String,
    /// Last, so that it is dropped after the connections above.
    _place: Place,
}

impl ShopDb {
    /// A fresh SQLite file in a temporary directory.
    pub async fn sqlite() -> Result<ShopDb, BoxError> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("shop.db");
        // Shardbox's own migrations first, then the application's.
        let storage = SqliteStorage::open(&path).await?;
        let path_text = path
            .to_str()
            .ok_or("the temporary path is not UTF-8")?
            .to_owned();
        let app = AppDb::open(move || {
            let mut conn = SqliteConnection::establish(&path_text)?;
            // As Shardbox's connections: wait for the writer instead of failing at once.
            conn.batch_execute(
                "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;",
            )?;
            Ok(AppConnection::Sqlite(conn))
        })
        .await?;
        Ok(ShopDb {
            storage: Arc::new(storage),
            app,
            described: format!("SQLite file {}", path.display()),
            _place: Place::Sqlite { _dir: dir },
        })
    }

    /// A fresh schema of its own in the PostgreSQL database at `url`.
    pub async fn postgres(url: &str) -> Result<ShopDb, BoxError> {
        let schema = format!("shop_example_{}", std::process::id());
        // Owned from here on: dropped at the end even if a step below fails.
        let place = Place::Postgres {
            url: url.to_owned(),
            schema: schema.clone(),
        };
        // Shardbox creates the schema and its tables; the application's tables go beside them.
        let options = PostgresOptions::default().schema(&schema).pool_size(4);
        let storage = PostgresStorage::connect_with(url, options).await?;
        let (url, search_path) = (url.to_owned(), format!("SET search_path TO \"{schema}\""));
        let app = AppDb::open(move || {
            let mut conn = PgConnection::establish(&url)?;
            conn.batch_execute(&search_path)?;
            Ok(AppConnection::Postgres(conn))
        })
        .await?;
        Ok(ShopDb {
            storage: Arc::new(storage),
            app,
            described: format!("PostgreSQL schema {schema}"),
            _place: place,
        })
    }
}

//! # shardbox-storage
//!
//! Durable storage for Shardbox through diesel: every storage trait of `shardbox-core`
//! (`InboxStore`, `WorkRegistry`, `EventStore`, `EntityStore`, `CatchUpStore`, `Storage`) for
//!
//! - [`SqliteStorage`]: one SQLite file, bundled SQLite, the embedded default (local mode);
//! - [`PostgresStorage`]: a PostgreSQL database shared by many nodes (clustered mode);
//!
//! and, behind the `conformance` feature (off by default), one `conformance` suite that every
//! backend — core's in-memory one included — must pass.
//!
//! ```text
//!  SqliteStorage ─┐                      ┌─ sql::*      the queries, written once (functions
//!                 ├─ sql::SqlStorage ────┤               generic over the connection)
//!  PostgresStorage┘   (async traits)     ├─ rows::*     row structs ⇄ core types
//!                                        ├─ pool::Db    spawn_blocking + r2d2 checkout
//!                                        ├─ migrate     embedded migrations, version checks
//!                                        └─ error       driver errors → typed StorageError
//! ```
//!
//! Every unit of work (checkout, transaction, queries) runs in one `spawn_blocking` closure;
//! no runtime thread waits on the database. The schema is created by embedded migrations when
//! a database is opened (see `docs/storage.md`).
//!
//! ```no_run
//! # async fn run() -> Result<(), shardbox_core::StorageError> {
//! use shardbox_core::{InboxStore, ShardIndex};
//! use shardbox_storage::SqliteStorage;
//! let storage = SqliteStorage::open("shardbox.db").await?;
//! let counts = storage.counts(Some(ShardIndex(0))).await?;
//! println!("{} pending", counts.pending());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod checkout;
// The crate's own unit tests use the suite's fixtures and PostgreSQL test schemas.
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod error;
mod inspect;
mod migrate;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
mod redact;
mod rows;
mod schema;
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use inspect::Inspect;
pub use migrate::MigrationMode;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStorage, POSTGRES_MIGRATIONS};
pub use redact::{redact, RedactedError};
pub use sql::traits::SqlStorage;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStorage, SQLITE_MIGRATIONS};

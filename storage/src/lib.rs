//! # shardbox-storage
//!
//! Durable storage for Shardbox through diesel: every storage trait of `shardbox-core`
//! (`InboxStore`, `WorkRegistry`, `EventStore`, `EntityStore`, `CatchUpStore`, `Storage`) for
//!
//! - [`SqliteStorage`]: one SQLite file, bundled SQLite, the embedded default (local mode);
//! - [`PostgresStorage`]: a PostgreSQL database shared by many nodes (clustered mode);
//!
//! and, behind the `test-schema` feature (off by default), `test_schema`: a PostgreSQL
//! schema of its own per test, for tests that share one database. Both backends pass the
//! storage conformance suite, which lives in a crate of its own (`shardbox-conformance`).
//!
//! ```text
//!  SqliteStorage ─┐                      ┌─ sql::*      the queries, written once (macros
//!                 ├─ sql::storage_impls ─┤               over the concrete connection type)
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
mod error;
mod migrate;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
mod redact;
mod rows;
mod schema;
mod sql;
pub mod sql_projection;
#[cfg(feature = "sqlite")]
mod sqlite;
// The crate's own unit tests make PostgreSQL test schemas too; see the module doc for why
// this lives here and not in `shardbox-conformance`.
#[cfg(all(feature = "postgres", any(test, feature = "test-schema")))]
pub mod test_schema;

// Core's trait (so that the conformance suite needs core only), kept at its old path here.
pub use migrate::MigrationMode;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStorage, POSTGRES_MIGRATIONS};
pub use redact::{redact, RedactedError};
pub use shardbox_core::storage::Inspect;
pub use sql_projection::{Sql, SqlConnection, SqlProjection, SqlResult};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStorage, SQLITE_MIGRATIONS};

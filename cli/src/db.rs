//! Opening the database the command points at: a PostgreSQL URL or a SQLite path.
//!
//! Every command but `migrate` opens it in `MigrationMode::Verify`, so that an operator's
//! look never changes a schema (a database of another version is refused with the
//! library's `SchemaMismatch`). A SQLite path that does not exist is refused rather than
//! created, except by `migrate`.

use shardbox_core::{Storage, StorageError};
use shardbox_storage::MigrationMode;
#[cfg(feature = "postgres")]
use shardbox_storage::{PostgresOptions, PostgresStorage};
#[cfg(feature = "sqlite")]
use shardbox_storage::{SqliteOptions, SqliteStorage};
use std::path::Path;
use std::sync::Arc;

/// Which backend a `--db` value names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target<'a> {
    /// A PostgreSQL URL.
    Postgres(&'a str),
    /// A SQLite file.
    Sqlite(&'a Path),
}

impl<'a> Target<'a> {
    /// A URL starting with postgres:// or postgresql:// is PostgreSQL, anything else a path.
    pub fn of(db: &'a str) -> Self {
        if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            Target::Postgres(db)
        } else {
            Target::Sqlite(Path::new(db))
        }
    }

    /// The database as it may be shown: a file path, or a URL without its password.
    #[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
    fn name(&self) -> String {
        match self {
            Target::Postgres(url) => shardbox_storage::redact(url),
            Target::Sqlite(path) => path.display().to_string(),
        }
    }

    /// The Cargo feature that builds this backend in.
    #[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
    fn feature(&self) -> &'static str {
        match self {
            Target::Postgres(_) => "postgres",
            Target::Sqlite(_) => "sqlite",
        }
    }
}

/// Opens `db` (PostgreSQL tables in `schema` if given) with `mode`.
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))] // `schema`: PostgreSQL only
pub async fn open(
    db: &str,
    schema: Option<&str>,
    mode: MigrationMode,
) -> Result<Arc<dyn Storage>, StorageError> {
    match Target::of(db) {
        #[cfg(feature = "postgres")]
        Target::Postgres(url) => {
            // One connection does: the CLI runs one query at a time and listens to nothing.
            let mut options = PostgresOptions::default()
                .pool_size(2)
                .min_idle(Some(0))
                .listen(false)
                .migrations(mode);
            if let Some(schema) = schema {
                options = options.schema(schema);
            }
            Ok(Arc::new(PostgresStorage::connect_with(url, options).await?))
        }
        #[cfg(feature = "sqlite")]
        Target::Sqlite(path) => {
            if mode == MigrationMode::Verify && !path.exists() {
                return Err(StorageError::Unavailable {
                    database: path.display().to_string(),
                    reason: "no such file (run `shardbox migrate` to create a database there)"
                        .into(),
                    source: None,
                });
            }
            let options = SqliteOptions::default()
                .pool_size(2)
                .checkpoint_interval(None)
                .migrations(mode);
            Ok(Arc::new(SqliteStorage::open_with(path, options).await?))
        }
        #[allow(unreachable_patterns)] // when both backends are built in
        other => Err(StorageError::Unavailable {
            database: other.name(),
            reason: format!(
                "this shardbox binary was built without the `{}` feature",
                other.feature()
            ),
            source: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_postgres_and_anything_else_a_file() {
        assert!(matches!(
            Target::of("postgres://u@h/db"),
            Target::Postgres(_)
        ));
        assert!(matches!(
            Target::of("postgresql://h/db"),
            Target::Postgres(_)
        ));
        assert!(matches!(Target::of("./postgres.db"), Target::Sqlite(_)));
        assert!(matches!(
            Target::of("/var/lib/app/shardbox.db"),
            Target::Sqlite(_)
        ));
    }
}

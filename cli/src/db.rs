//! Opening the database the command points at: a PostgreSQL URL or a SQLite path — or, for
//! a storage over several PostgreSQL databases, their URLs separated by spaces, the home
//! database first (`--db "postgres://…/a postgres://…/b"`), opened as the application opens
//! them (`PostgresStorage::connect_databases`), so that rows are placed in the right database.
//!
//! Every command but `migrate` opens it in `MigrationMode::Verify`, so that an operator's
//! look never changes a schema (a database of another version is refused with the
//! library's `SchemaMismatch`). A SQLite path that does not exist is refused rather than
//! created, except by `migrate`.

use crate::error::CliError;
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
    /// A URL of another scheme (`mysql://…`): no backend serves it.
    OtherScheme(&'a str),
}

impl<'a> Target<'a> {
    /// A URL starting with postgres:// or postgresql:// is PostgreSQL, a URL of another
    /// scheme is refused, anything else is a path.
    pub fn of(db: &'a str) -> Self {
        if db.starts_with("postgres://") || db.starts_with("postgresql://") {
            Target::Postgres(db)
        } else if let Some(scheme) = url_scheme(db) {
            Target::OtherScheme(scheme)
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
            Target::OtherScheme(scheme) => format!("{scheme}://…"),
        }
    }

    /// The Cargo feature that builds this backend in.
    #[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
    fn feature(&self) -> &'static str {
        match self {
            Target::Postgres(_) => "postgres",
            Target::Sqlite(_) | Target::OtherScheme(_) => "sqlite",
        }
    }
}

/// A PostgreSQL storage as the CLI uses one: one connection does (it runs one query at a
/// time and listens to nothing).
#[cfg(feature = "postgres")]
async fn open_postgres(
    url: &str,
    schema: Option<&str>,
    mode: MigrationMode,
) -> Result<PostgresStorage, StorageError> {
    let mut options = PostgresOptions::default()
        .pool_size(2)
        .min_idle(Some(0))
        .listen(false)
        .migrations(mode);
    if let Some(schema) = schema {
        options = options.schema(schema);
    }
    PostgresStorage::connect_with(url, options).await
}

/// One storage over the PostgreSQL databases `urls` (the home database first).
#[cfg(feature = "postgres")]
async fn open_several(
    urls: &[&str],
    schema: Option<&str>,
    mode: MigrationMode,
) -> Result<Arc<dyn Storage>, CliError> {
    // Every entry is checked before any is connected to.
    for (i, url) in urls.iter().enumerate() {
        if !matches!(Target::of(url), Target::Postgres(_)) {
            return Err(several_refused(url));
        }
        if urls[..i].contains(url) {
            return Err(CliError::Usage(format!(
                "--db lists {} twice; each database of a storage over several holds shards of its own",
                shardbox_storage::redact(url)
            )));
        }
    }
    let mut dbs: Vec<Arc<dyn shardbox_core::databases::Database>> = Vec::new();
    for url in urls {
        dbs.push(Arc::new(open_postgres(url, schema, mode).await?));
    }
    Ok(Arc::new(shardbox_core::databases::Databases::new(dbs)?))
}

/// Without PostgreSQL built in, a list of databases is refused.
#[cfg(not(feature = "postgres"))]
async fn open_several(
    urls: &[&str],
    _schema: Option<&str>,
    _mode: MigrationMode,
) -> Result<Arc<dyn Storage>, CliError> {
    Err(several_refused(urls[0]))
}

/// The refusal of a list of databases that names something else than a PostgreSQL URL.
fn several_refused(entry: &str) -> CliError {
    CliError::Usage(format!(
        "--db lists several databases, so each must be a PostgreSQL URL (postgres://…), and `{}` is not{}; a SQLite path with a space in it cannot be listed",
        Target::of(entry).name(),
        if cfg!(feature = "postgres") { "" } else { " (and this shardbox binary was built without the `postgres` feature)" }
    ))
}

/// The scheme of `db` if it is written as a URL (`scheme://…`, the scheme a letter followed
/// by letters, digits, `+`, `-` or `.`, as RFC 3986 has it); `None` for a path.
fn url_scheme(db: &str) -> Option<&str> {
    let (scheme, _) = db.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// Opens `db` (PostgreSQL tables in `schema` if given) with `mode`: several PostgreSQL URLs
/// separated by spaces open one storage over those databases.
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))] // `schema`: PostgreSQL only
pub async fn open(
    db: &str,
    schema: Option<&str>,
    mode: MigrationMode,
) -> Result<Arc<dyn Storage>, CliError> {
    let listed: Vec<&str> = db.split_whitespace().collect();
    if listed.len() > 1 {
        return open_several(&listed, schema, mode).await;
    }
    match Target::of(db.trim()) {
        Target::OtherScheme(scheme) => Err(CliError::Usage(format!(
            "--db {}: no backend serves `{scheme}://` URLs; give a PostgreSQL URL (postgres://… or postgresql://…) or the path of a SQLite file (without a scheme)",
            shardbox_storage::redact(db)
        ))),
        #[cfg(feature = "postgres")]
        Target::Postgres(url) => {
            // One connection does: the CLI runs one query at a time and listens to nothing.
            Ok(Arc::new(open_postgres(url, schema, mode).await?))
        }
        #[cfg(feature = "sqlite")]
        Target::Sqlite(path) => {
            if matches!(path.to_str(), Some(":memory:" | "")) {
                return Err(CliError::Usage(format!(
                    "--db {:?}: an in-memory database lives and dies with one process, so there is nothing for the CLI to operate; give the path of a SQLite file or a PostgreSQL URL (postgres://…)",
                    path.display().to_string()
                )));
            }
            if mode == MigrationMode::Verify && !path.exists() {
                return Err(CliError::Storage(StorageError::Unavailable {
                    database: path.display().to_string(),
                    reason: "no such file (run `shardbox migrate` to create a database there)"
                        .into(),
                    advice: "",
                    source: None,
                }));
            }
            let options = SqliteOptions::default()
                .pool_size(2)
                .checkpoint_interval(None)
                .migrations(mode);
            Ok(Arc::new(SqliteStorage::open_with(path, options).await?))
        }
        #[allow(unreachable_patterns)] // when both backends are built in
        other => Err(CliError::Storage(StorageError::Unavailable {
            database: other.name(),
            reason: format!(
                "this shardbox binary was built without the `{}` feature",
                other.feature()
            ),
            advice: "",
            source: None,
        })),
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
        assert_eq!(Target::of("mysql://u@h/db"), Target::OtherScheme("mysql"));
        assert_eq!(Target::of("xyz://foo"), Target::OtherScheme("xyz"));
        assert!(matches!(Target::of("./a://b"), Target::Sqlite(_)));
        assert!(matches!(
            Target::of("/var/lib/app/shardbox.db"),
            Target::Sqlite(_)
        ));
    }
}

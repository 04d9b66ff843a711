//! Schema versions: bring a database to the schema this binary expects, or refuse it.
//!
//! ```text
//!  applied ⊄ known      → SchemaMismatch (a newer binary migrated it: upgrade)
//!  nothing applied, off → SchemaMismatch (no Shardbox tables: wrong schema or path?)
//!  pending, migrate off → SchemaMismatch (run the migrations)
//!  pending, migrate on  → apply them in version order
//! ```
//!
//! The caller runs this under a lock that makes it safe for several processes opening the
//! same database at once (an immediate transaction on SQLite, a transaction-level advisory
//! lock on PostgreSQL), so only one of them applies each migration and the others see it done.

use crate::error::Failure;
use diesel::backend::Backend;
use diesel::migration::{Migration, MigrationSource, MigrationVersion};
use diesel_migrations::MigrationHarness;
use shardbox_core::Cause;
use shardbox_core::StorageError;

/// Whether opening a database may change its schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrationMode {
    /// Apply pending migrations (the default).
    #[default]
    Apply,
    /// Never change the schema; a database with pending migrations is refused with
    /// [`StorageError::SchemaMismatch`] (for deployments where migrations are run separately).
    Verify,
}

/// Checks the database's schema against `source` and applies what is missing (in
/// [`MigrationMode::Apply`]). Returns the versions applied.
pub(crate) fn migrate<DB, C, S>(
    conn: &mut C,
    source: &S,
    mode: MigrationMode,
    database: &str,
) -> Result<Vec<String>, Failure>
where
    DB: Backend,
    C: MigrationHarness<DB>,
    S: MigrationSource<DB>,
{
    let query_failed = |e: Box<dyn std::error::Error + Send + Sync>| -> Failure {
        match e.downcast::<diesel::result::Error>() {
            Ok(e) => Failure::Db(*e),
            Err(e) => Failure::Storage(StorageError::Query {
                database: database.to_owned(),
                reason: format!("migration failed: {e}"),
                source: Some(Cause::from_boxed(e)),
            }),
        }
    };
    let mut known: Vec<Box<dyn Migration<DB>>> = source.migrations().map_err(query_failed)?;
    known.sort_by(|a, b| a.name().version().cmp(&b.name().version()));
    let known_versions: Vec<MigrationVersion<'static>> = known
        .iter()
        .map(|m| m.name().version().as_owned())
        .collect();
    let expected = known_versions
        .last()
        .map_or_else(|| "none".to_owned(), ToString::to_string);
    let mut applied = conn.applied_migrations().map_err(query_failed)?;
    applied.sort();
    let found = applied
        .last()
        .map_or_else(|| "none (empty database)".to_owned(), ToString::to_string);

    let unknown: Vec<String> = applied
        .iter()
        .filter(|v| !known_versions.contains(v))
        .map(ToString::to_string)
        .collect();
    if !unknown.is_empty() {
        return Err(Failure::Storage(StorageError::SchemaMismatch {
            database: database.to_owned(),
            found: format!("{found} (unknown migrations: {})", unknown.join(", ")),
            expected,
            advice: "the database was migrated by a newer Shardbox; upgrade this binary, or point it at another database",
        }));
    }

    let pending: Vec<&dyn Migration<DB>> = known
        .iter()
        .filter(|m| !applied.contains(&m.name().version()))
        .map(|m| &**m)
        .collect();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    if mode == MigrationMode::Verify && applied.is_empty() {
        // Most often a misspelled schema or path, not a database to upgrade: listing every
        // migration would hide that.
        return Err(Failure::Storage(StorageError::SchemaMismatch {
            database: database.to_owned(),
            found: format!(
                "none: it has no Shardbox tables (all {} migrations pending)",
                pending.len()
            ),
            expected,
            advice: "check the schema name (--schema, PostgresOptions::schema) or the path, or create the tables there with `shardbox migrate` (or by opening it once with MigrationMode::Apply, the default)",
        }));
    }
    if mode == MigrationMode::Verify {
        let names: Vec<String> = pending.iter().map(|m| m.name().to_string()).collect();
        return Err(Failure::Storage(StorageError::SchemaMismatch {
            database: database.to_owned(),
            found: format!("{found} (pending migrations: {})", names.join(", ")),
            expected,
            advice: "apply the pending migrations: open once with MigrationMode::Apply (the default), or run storage/migrations by hand",
        }));
    }
    let mut done = Vec::with_capacity(pending.len());
    for m in pending {
        let version = conn.run_migration(m).map_err(query_failed)?;
        tracing::info!(database, migration = %m.name(), "applied migration");
        done.push(version.to_string());
    }
    Ok(done)
}

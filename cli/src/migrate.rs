//! `shardbox migrate [--check]`: apply the embedded migrations, or say whether the schema is
//! current (exit 1 if not) without changing it.

use crate::db;
use crate::error::CliError;
use crate::output::{outln, print_json};
use serde_json::json;
use shardbox_core::StorageError;
use shardbox_storage::MigrationMode;

/// Runs `migrate` on `db`.
pub async fn run(db: &str, schema: Option<&str>, check: bool, json: bool) -> Result<(), CliError> {
    if !check {
        let storage = db::open(db, schema, MigrationMode::Apply).await?;
        let text = format!("schema of {} is current", storage.describe());
        if json {
            return print_json(&json!({ "current": true, "database": storage.describe() }));
        }
        outln!("{text}")?;
        return Ok(());
    }
    match db::open(db, schema, MigrationMode::Verify).await {
        Ok(storage) => {
            if json {
                print_json(&json!({ "current": true, "database": storage.describe() }))?;
            } else {
                outln!("schema of {} is current", storage.describe())?;
            }
            Ok(())
        }
        Err(CliError::Storage(e @ StorageError::SchemaMismatch { .. })) => {
            if json {
                print_json(&json!({ "current": false, "error": e.to_string() }))?;
            }
            Err(CliError::NotFound(format!("schema is not current: {e}")))
        }
        Err(e) => Err(e),
    }
}

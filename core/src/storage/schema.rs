//! Whether a database's schema is still the one this binary expects, asked while it runs
//! (a readiness probe): another process may have migrated it to a newer version since it
//! was opened. Backends without a schema (memory) have no such check.

use crate::model::error::StorageError;

/// A backend's schema-version check, offered through
/// [`Storage::schema_check`](crate::Storage::schema_check).
#[async_trait::async_trait]
pub trait SchemaCheck: Send + Sync {
    /// `Ok` if every migration this binary knows is applied and none it does not know is;
    /// else [`StorageError::SchemaMismatch`] saying what to do. Changes nothing.
    async fn check_schema(&self) -> Result<(), StorageError>;
}

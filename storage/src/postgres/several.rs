//! Opening a storage over several PostgreSQL databases from a list of URLs.
//!
//! ```text
//!  [url]              ─► PostgresStorage (today's mode, unchanged)
//!  [home, url1, url2] ─► Databases over a PostgresStorage each (migrated, listening, alike)
//! ```

use super::{PostgresOptions, PostgresStorage};
use shardbox_core::databases::{Database, Databases};
use shardbox_core::{Storage, StorageError};
use std::sync::Arc;

impl PostgresStorage {
    /// Connects to every database of `urls`, the home database first, each with `options`:
    /// one URL gives that database's storage exactly as [`PostgresStorage::connect_with`];
    /// several give one storage over them ([`Databases`]). Every database is migrated (or
    /// checked) as `options` says before the storage is returned. Refused for an empty list,
    /// or a list that names one database twice.
    pub async fn connect_databases(
        urls: &[String],
        options: PostgresOptions,
    ) -> Result<Arc<dyn Storage>, StorageError> {
        if let [url] = urls {
            return Ok(Arc::new(Self::connect_with(url.clone(), options).await?));
        }
        if urls.is_empty() {
            return Err(StorageError::Unsupported {
                what: "a storage over no database".into(),
                reason: "give one PostgreSQL URL, or several (the home database first)".into(),
            });
        }
        for (i, url) in urls.iter().enumerate() {
            if urls[..i].contains(url) {
                return Err(StorageError::Unsupported {
                    what: format!("database URL {} given twice", crate::redact(url)),
                    reason: "each database of a storage over several holds shards of its own; list each once".into(),
                });
            }
        }
        let mut dbs: Vec<Arc<dyn Database>> = Vec::with_capacity(urls.len());
        for url in urls {
            dbs.push(Arc::new(
                Self::connect_with(url.clone(), options.clone()).await?,
            ));
        }
        Ok(Arc::new(Databases::new(dbs)?))
    }
}

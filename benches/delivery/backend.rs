//! Opening the backend under test, and a raw diesel connection to the same database for the
//! floor measurement.

use crate::args::Backend;
use diesel::connection::SimpleConnection;
use diesel::Connection;
use shardbox::core::memory::MemoryStorage;
use shardbox::core::Storage;
use shardbox::storage::{PostgresOptions, PostgresStorage, SqliteStorage};
use std::sync::Arc;

/// A database for one run; removed when dropped.
pub struct Db {
    pub backend: Backend,
    dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

impl Db {
    pub fn new(backend: Backend) -> Result<Db, String> {
        let mut db = Db {
            backend,
            dir: None,
            pg: None,
        };
        match backend {
            Backend::Memory => {}
            Backend::Sqlite => {
                db.dir = Some(tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?);
            }
            Backend::Postgres => {
                let url = std::env::var("SHARDBOX_PG_URL").map_err(|_| {
                    "--backend postgres needs SHARDBOX_PG_URL (e.g. postgres://postgres@127.0.0.1:5432/test)"
                        .to_owned()
                })?;
                // One schema per Db of this process (the jobs workload opens two).
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let schema = match k {
                    0 => format!("sbx_bench_{}", std::process::id()),
                    k => format!("sbx_bench_{}_{k}", std::process::id()),
                };
                db.pg = Some((url, schema));
            }
        }
        Ok(db)
    }

    /// A fresh storage over this database (the same one on every call).
    pub async fn storage(&self, pool: u32) -> Result<Arc<dyn Storage>, String> {
        Ok(match self.backend {
            Backend::Memory => Arc::new(MemoryStorage::new()),
            Backend::Sqlite => Arc::new(
                SqliteStorage::open(self.sqlite_path())
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            Backend::Postgres => {
                let (url, schema) = self.pg.clone().unwrap_or_default();
                postgres_storage(&url, &schema, pool).await?
            }
        })
    }

    pub fn sqlite_path(&self) -> std::path::PathBuf {
        self.dir
            .as_ref()
            .map(|d| d.path().join("bench.db"))
            .unwrap_or_default()
    }

    /// The PostgreSQL URL and schema, if this is PostgreSQL.
    pub fn pg(&self) -> Option<&(String, String)> {
        self.pg.as_ref()
    }
}

/// A PostgreSQL storage over `schema` with `pool` connections, listening for other nodes'
/// writes (the default, stated here because the cluster workload's node processes rely on
/// it). Does not own the schema: nothing is dropped with it.
pub async fn postgres_storage(
    url: &str,
    schema: &str,
    pool: u32,
) -> Result<Arc<dyn Storage>, String> {
    let options = PostgresOptions::default()
        .schema(schema)
        .pool_size(pool)
        .listen(true);
    Ok(Arc::new(
        PostgresStorage::connect_with(url, options)
            .await
            .map_err(|e| e.to_string())?,
    ))
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some((url, schema)) = &self.pg {
            if let Ok(mut c) = diesel::PgConnection::establish(url) {
                let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
            }
        }
    }
}

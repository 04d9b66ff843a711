//! `KindControlStore` for a diesel backend: pausing and resuming a kind, and its settings.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `KindControlStore` for `$storage` over the unit functions of module `$units`.
macro_rules! kind_control_store_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::KindControlStore for $storage {
            async fn kind_controls(
                &self,
            ) -> Result<Vec<shardbox_core::KindControl>, shardbox_core::StorageError> {
                self.db.run(move |conn| $units::kind_controls(conn)).await
            }

            async fn pause_kind(
                &self,
                kind: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<bool, shardbox_core::StorageError> {
                let kind = kind.to_owned();
                self.db
                    .run(move |conn| $units::pause_kind(conn, kind, now))
                    .await
            }

            async fn resume_kind(
                &self,
                kind: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::storage::ResumeReport, shardbox_core::StorageError> {
                let kind = kind.to_owned();
                let report = self
                    .db
                    .run(move |conn| $units::resume_kind(conn, kind, now))
                    .await?;
                self.written_backend(&report.shards);
                Ok(report)
            }

            async fn set_kind_settings(
                &self,
                kind: &str,
                settings: &shardbox_core::KindSettings,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<(), shardbox_core::StorageError> {
                let (kind, settings) = (kind.to_owned(), settings.clone());
                self.db
                    .run(move |conn| $units::set_kind_settings(conn, kind, settings, now))
                    .await
            }
        }
    };
}
pub(crate) use kind_control_store_impl;

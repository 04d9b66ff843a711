//! `EventStore` for a diesel backend: reading the event log by type, by source and by id.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `EventStore` for `$storage` over the unit functions of module `$units`.
macro_rules! event_store_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::EventStore for $storage {
            async fn read_events(
                &self,
                after_seq: i64,
                event_types: &[String],
                since: Option<chrono::DateTime<chrono::Utc>>,
                limit: usize,
            ) -> Result<Vec<shardbox_core::StoredEvent>, shardbox_core::StorageError> {
                let event_types = event_types.to_vec();
                self.db
                    .run(move |conn| {
                        $units::read_events(conn, after_seq, event_types, since, limit)
                    })
                    .await
            }

            async fn read_source_events(
                &self,
                tenant: &str,
                source: &shardbox_core::EventSource,
                after_seq: i64,
                limit: usize,
            ) -> Result<Vec<shardbox_core::StoredEvent>, shardbox_core::StorageError> {
                let (tenant, source) = (tenant.to_owned(), source.clone());
                self.db
                    .run(move |conn| {
                        $units::read_source_events(conn, tenant, source, after_seq, limit)
                    })
                    .await
            }

            async fn last_event_seq(&self) -> Result<i64, shardbox_core::StorageError> {
                self.db.run($units::last_event_seq).await
            }

            async fn event_seqs(
                &self,
                ids: &[shardbox_core::SignalId],
            ) -> Result<Vec<(shardbox_core::SignalId, i64)>, shardbox_core::StorageError> {
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let ids = ids.to_vec();
                self.db.run(move |conn| $units::event_seqs(conn, ids)).await
            }

            async fn count_events(
                &self,
                event_types: &[String],
                since: Option<chrono::DateTime<chrono::Utc>>,
            ) -> Result<i64, shardbox_core::StorageError> {
                let event_types = event_types.to_vec();
                self.db
                    .run(move |conn| $units::count_events(conn, event_types, since))
                    .await
            }
        }
    };
}
pub(crate) use event_store_impl;

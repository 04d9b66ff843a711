//! `OutboxStore` for a diesel backend: the outbox read and trimmed, and the relay's copy.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `OutboxStore` for `$storage` over the unit functions of module `$units`.
macro_rules! outbox_store_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::OutboxStore for $storage {
            async fn outbox_page(
                &self,
                database: u32,
                after: i64,
                limit: usize,
            ) -> Result<Vec<shardbox_core::storage::OutboxRow>, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::outbox_page(conn, database, after, limit))
                    .await
            }

            async fn trim_outbox(
                &self,
                database: u32,
                up_to: i64,
            ) -> Result<usize, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::trim_outbox(conn, database, up_to))
                    .await
            }

            async fn relay_position(&self, from: u32) -> Result<i64, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::relay_position(conn, from))
                    .await
            }

            async fn relay_into(
                &self,
                copy: shardbox_core::storage::RelayCopy,
            ) -> Result<shardbox_core::storage::RelayOutcome, shardbox_core::StorageError> {
                let outcome = self
                    .db
                    .run(move |conn| $units::relay_into(conn, copy))
                    .await?;
                if let shardbox_core::storage::RelayOutcome::Copied { written, .. } = &outcome {
                    self.written_backend(&written.shards);
                }
                Ok(outcome)
            }
        }
    };
}
pub(crate) use outbox_store_impl;

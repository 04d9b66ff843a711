//! `DeadLetterStore` for a diesel backend: listing, requeueing and purging dead letters, and
//! unblocking a blocked target.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `DeadLetterStore` for `$storage` over the unit functions of module `$units`.
macro_rules! dead_letter_store_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::DeadLetterStore for $storage {
            async fn list_dead_letters(
                &self,
                filter: &shardbox_core::storage::DeadLetterFilter,
            ) -> Result<Vec<shardbox_core::storage::StoredDeadLetter>, shardbox_core::StorageError>
            {
                let filter = filter.clone();
                self.db
                    .run(move |conn| $units::list_dead_letters(conn, filter))
                    .await
            }

            async fn count_dead_letters(
                &self,
                filter: &shardbox_core::storage::DeadLetterFilter,
            ) -> Result<u64, shardbox_core::StorageError> {
                let filter = filter.clone();
                self.db
                    .run(move |conn| $units::count_dead_letters(conn, filter))
                    .await
            }

            async fn requeue_dead_letters(
                &self,
                requeue: Vec<shardbox_core::storage::Requeue>,
                shard_count: u32,
                _now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::storage::RequeueReport, shardbox_core::StorageError> {
                if requeue.is_empty() {
                    return Ok(Default::default());
                }
                self.db
                    .run(move |conn| $units::requeue_dead_letters(conn, requeue, shard_count))
                    .await
            }

            async fn purge_dead_letters(
                &self,
                filter: &shardbox_core::storage::DeadLetterFilter,
            ) -> Result<u64, shardbox_core::StorageError> {
                let filter = filter.clone();
                self.db
                    .run(move |conn| $units::purge_dead_letters(conn, filter))
                    .await
            }

            async fn blocked_targets(
                &self,
                limit: usize,
            ) -> Result<Vec<shardbox_core::storage::BlockedTarget>, shardbox_core::StorageError>
            {
                self.db
                    .run(move |conn| $units::blocked_targets(conn, limit))
                    .await
            }

            async fn unblock_target(
                &self,
                target: &shardbox_core::storage::EntityKey,
                action: shardbox_core::storage::Unblock,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::storage::UnblockReport, shardbox_core::StorageError> {
                let target = target.clone();
                self.db
                    .run(move |conn| $units::unblock_target(conn, target, action, now))
                    .await
            }
        }
    };
}
pub(crate) use dead_letter_store_impl;

//! `Storage` (the whole of the capabilities, with the backend's description and hooks) and
//! [`crate::Inspect`] (whole-table reads for tests and small databases) for a diesel backend.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `Storage` and [`crate::Inspect`] for `$storage` over the unit functions of module `$units`.
macro_rules! storage_and_inspect_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::Storage for $storage {
            fn describe(&self) -> String {
                self.describe_backend()
            }

            fn write_listener(&self) -> Option<&dyn shardbox_core::WriteListener> {
                self.write_listener_backend()
            }

            async fn node_stopped(&self) -> Result<(), shardbox_core::StorageError> {
                self.node_stopped_backend().await
            }

            fn schema_check(&self) -> Option<&dyn shardbox_core::storage::SchemaCheck> {
                Some(self)
            }
        }

        impl $storage {
            /// The dead letters, oldest first.
            pub async fn dead_letters(
                &self,
            ) -> Result<Vec<shardbox_core::storage::DeadLetter>, shardbox_core::StorageError> {
                self.db.run($units::dead_letters).await
            }

            /// Every row of the Inbox, in `seq` order. Loads the whole table: for tests and
            /// inspection of small databases, not for production monitoring (use
            /// [`counts`](shardbox_core::InboxStore::counts)).
            pub async fn rows(
                &self,
            ) -> Result<Vec<shardbox_core::InboxMessage>, shardbox_core::StorageError> {
                self.db.run($units::rows).await
            }
        }

        #[async_trait::async_trait]
        impl $crate::Inspect for $storage {
            async fn dead_letters(
                &self,
            ) -> Result<Vec<shardbox_core::storage::DeadLetter>, shardbox_core::StorageError> {
                <$storage>::dead_letters(self).await
            }

            async fn rows(
                &self,
            ) -> Result<Vec<shardbox_core::InboxMessage>, shardbox_core::StorageError> {
                <$storage>::rows(self).await
            }

            async fn outcome_records(&self) -> Result<u64, shardbox_core::StorageError> {
                self.db.run($units::outcome_records).await
            }
        }
    };
}
pub(crate) use storage_and_inspect_impl;

//! `EntityStore` for a diesel backend: loading stored entity states.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `EntityStore` for `$storage` over the unit functions of module `$units`.
macro_rules! entity_store_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::EntityStore for $storage {
            async fn load_states(
                &self,
                keys: &[shardbox_core::storage::EntityKey],
            ) -> Result<Vec<shardbox_core::storage::EntityState>, shardbox_core::StorageError> {
                if keys.is_empty() {
                    return Ok(Vec::new());
                }
                let keys = keys.to_vec();
                self.db
                    .run(move |conn| $units::load_states(conn, keys))
                    .await
            }
        }
    };
}
pub(crate) use entity_store_impl;

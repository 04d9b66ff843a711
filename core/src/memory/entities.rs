//! The in-memory [`EntityStore`]: framework-kept entity states.

use super::MemoryStorage;
use crate::model::error::StorageError;
use crate::storage::{EntityKey, EntityState, EntityStore};
use async_trait::async_trait;

#[async_trait]
impl EntityStore for MemoryStorage {
    async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError> {
        let state = self.lock();
        Ok(keys
            .iter()
            .filter_map(|k| state.states.get(k).cloned())
            .collect())
    }
}

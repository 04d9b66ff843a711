//! Framework-kept entity state.

use crate::error::StorageError;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Which entity a state belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityKey {
    /// Entity kind.
    pub kind: String,
    /// Tenant.
    pub tenant: String,
    /// Entity id.
    pub id: String,
}

/// A stored entity state.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityState {
    /// Whose state.
    pub key: EntityKey,
    /// Number of commits that changed it.
    pub version: i64,
    /// Serialized state (JSON).
    pub state: Vec<u8>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// A state to store in a stage commit (its version grows by one).
#[derive(Debug, Clone, PartialEq)]
pub struct EntityStateWrite {
    /// Whose state.
    pub key: EntityKey,
    /// Serialized state, or `None` to delete it (a catch-up reset).
    pub state: Option<Vec<u8>>,
}

/// The `entity_states` table.
#[async_trait]
pub trait EntityStore: Send + Sync + 'static {
    /// The states of `keys` that exist (in no particular order).
    async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError>;
}

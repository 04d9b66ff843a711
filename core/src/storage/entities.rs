//! Framework-kept entity state.

use crate::model::error::StorageError;
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

impl EntityKey {
    /// The key of `kind` instance `id` of `tenant` (empty for single-tenant applications).
    ///
    /// ```
    /// let key = shardbox_core::storage::EntityKey::new("account", "", "acc-1");
    /// assert_eq!((key.kind.as_str(), key.id.as_str()), ("account", "acc-1"));
    /// ```
    pub fn new(kind: impl Into<String>, tenant: impl Into<String>, id: impl Into<String>) -> Self {
        EntityKey {
            kind: kind.into(),
            tenant: tenant.into(),
            id: id.into(),
        }
    }
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
    /// The version of its kind's state shape it was saved at (1 before versions existed).
    pub state_version: u32,
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
    /// The version of its kind's state shape (`STATE_VERSION`) it is saved at.
    pub state_version: u32,
}

/// The `entity_states` table.
#[async_trait]
pub trait EntityStore: Send + Sync + 'static {
    /// The states of `keys` that exist (in no particular order).
    async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError>;
}

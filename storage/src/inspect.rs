//! Read-only views of a backend for tests and operators: what the storage traits of core do
//! not expose (dead letters, whole rows).
//!
//! Implemented by every backend of this crate and by core's [`MemoryStorage`], so that the
//! conformance suite can check dead letters and row contents the same way everywhere.

use async_trait::async_trait;
use shardbox_core::memory::MemoryStorage;
use shardbox_core::storage::DeadLetter;
use shardbox_core::{InboxMessage, StorageError};

/// Inspection of a backend's contents.
#[async_trait]
pub trait Inspect: Send + Sync {
    /// The dead letters, oldest first.
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError>;

    /// Every row of the Inbox, in `seq` order (loads the whole table).
    async fn rows(&self) -> Result<Vec<InboxMessage>, StorageError>;
}

#[async_trait]
impl Inspect for MemoryStorage {
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError> {
        Ok(MemoryStorage::dead_letters(self))
    }

    async fn rows(&self) -> Result<Vec<InboxMessage>, StorageError> {
        Ok(MemoryStorage::rows(self))
    }
}

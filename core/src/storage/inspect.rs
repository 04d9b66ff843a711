//! Read-only views of a backend for tests and operators: what the other storage traits do
//! not expose (dead letters as the stage wrote them, whole Inbox rows).
//!
//! Implemented by core's [`MemoryStorage`] and by every backend of `shardbox-storage`, so that
//! the conformance suite (`shardbox-conformance`) can check dead letters and row contents the
//! same way everywhere. It lives here, beside the other storage traits, so that the suite
//! needs `shardbox-core` only and a backend of another crate can implement it.
//!
//! [`MemoryStorage`]: crate::memory::MemoryStorage

use crate::model::error::StorageError;
use crate::model::message::InboxMessage;
use crate::storage::DeadLetter;
use async_trait::async_trait;

/// Inspection of a backend's contents.
#[async_trait]
pub trait Inspect: Send + Sync {
    /// The dead letters, oldest first.
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError>;

    /// Every row of the Inbox, in `seq` order (loads the whole table).
    async fn rows(&self) -> Result<Vec<InboxMessage>, StorageError>;

    /// How many command outcome records are stored, forgotten ones (past their
    /// `keep_until`) not yet purged included.
    async fn outcome_records(&self) -> Result<u64, StorageError>;
}

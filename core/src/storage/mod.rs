//! The storage traits: small, separate capabilities that every backend implements.
//!
//! ```text
//!  InboxStore    write rows (dedup), read a due page, commit a stage (fenced), with the
//!                application's writes inside its transaction (`in_transaction`)
//!  WorkRegistry  the lock table: pick up, renew, release shard leases
//!  EventStore    read the event store in seq pages
//!  EntityStore   load framework-kept entity states
//!  CatchUpStore  catch-up jobs, and read models' versions (blue/green rebuilds)
//!  DeadLetterStore  operators: dead letters (list, count, requeue, purge), blocked targets
//!  KindControlStore  kinds paused, run-time settings (every node reads them)
//!  OutboxStore   messages for another database (written in a stage's commit), and the
//!                relay's fenced copy of them into their database
//!  Inspect       tests and operators: every row and dead letter as stored (read-only)
//!  StorageReads  a read-only view over all of them (what `Shardbox::storage()` hands out)
//! ```
//!
//! Writes that must be atomic across tables (a stage commit, an event with its fan-out) go
//! through one method each, so that a backend can run them in one transaction. [`Storage`] is
//! the sum of all traits, implemented for every type that has them.

mod catch_up;
mod commit;
mod dead_letters;
mod entities;
mod events;
mod in_transaction;
mod inbox;
mod inspect;
mod kind_controls;
pub mod listener;
pub mod observer;
mod outbox;
mod reads;
mod registry;
mod row_change;
mod schema;
mod spread;
mod versions;
mod write;

pub use listener::{ListenerHandle, ListenerStats, WriteListener};
pub use observer::ShardObserver;

pub use catch_up::{CatchUpJob, CatchUpStatus, CatchUpStore, CatchUpTargets, NewCatchUp};
pub use commit::{CommitReport, StageCommit};
pub use dead_letters::{
    unblocked_outcome, unblocked_reason, BlockedTarget, DeadLetterFilter, DeadLetterId,
    DeadLetterStore, Requeue, RequeueReport, StoredDeadLetter, Unblock, UnblockReport,
};
pub use entities::{EntityKey, EntityState, EntityStateWrite, EntityStore};
pub use events::EventStore;
pub use in_transaction::{
    apply_failed_batch, FailedBatch, FailedWrites, InTransaction, TransactionError,
    TransactionalWork,
};
pub use inbox::{InboxCounts, InboxStore, KindDepth, Page, ShardDepth};
pub use inspect::Inspect;
pub use kind_controls::{KindControlStore, ResumeReport};
pub use outbox::{OutboxRow, OutboxStore, OutboxWrite, RelayCopy, RelayOutcome};
pub use reads::StorageReads;
pub use registry::{
    DatabasePlace, Lease, Member, ReshardAnnouncement, ReshardMoves, ReshardSwitch, Route,
    ShardLayout, ShardSession, WorkRegistry,
};
pub use row_change::{DeadLetter, HoldRelease, RowChange, RowUpdate};
pub use schema::SchemaCheck;
pub use spread::{CatchUpSpread, SpreadProgress, StorePositions};
pub use versions::ReadModelVersion;
pub use write::{WriteBatch, WriteReport};

/// Every storage capability together: what a delivery needs from a backend.
#[async_trait::async_trait]
pub trait Storage:
    InboxStore
    + WorkRegistry
    + EventStore
    + EntityStore
    + CatchUpStore
    + DeadLetterStore
    + KindControlStore
    + OutboxStore
{
    /// A short description of the backend and database for logs (no secrets).
    fn describe(&self) -> String;

    /// The backend's way of hearing writes made by other processes, if it has one
    /// (PostgreSQL: `LISTEN`/`NOTIFY`). The default has none: other processes' writes are
    /// found by polling.
    fn write_listener(&self) -> Option<&dyn WriteListener> {
        None
    }

    /// Called at the end of a node's clean shutdown (`shutdown().await`), after its workers
    /// stopped and its leases were released: the backend's chance to leave its files tidy
    /// (SQLite copies the write-ahead log into the database file and truncates it). The
    /// default does nothing. An error is logged by the node, not returned.
    async fn node_stopped(&self) -> Result<(), crate::model::error::StorageError> {
        Ok(())
    }

    /// Whether its stage commit runs the application's writes inside its transaction
    /// ([`StageCommit::in_transaction`]: SQL projections). The default does not, and the
    /// builder refuses such a projection on it.
    fn runs_writes_in_transaction(&self) -> bool {
        false
    }

    /// The backend's check that the database's schema is still the one this binary expects,
    /// if it has a schema (SQL backends). The default has none.
    fn schema_check(&self) -> Option<&dyn SchemaCheck> {
        None
    }

    /// The backend as [`Any`](std::any::Any), for code that acts on one concrete storage: a
    /// storage over several databases is found this way (`Databases::of`), and a node then
    /// places targets by its databases and runs its relays. The default is `None`.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

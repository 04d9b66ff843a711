//! # Shardbox
//!
//! Delivers commands and events to the entities of an event-driven (CQRS) application through a
//! sharded Inbox: one node at a time serves a shard (a lease in a lock table), and each shard
//! is processed in stages whose page of messages a Conveyor carries through pluggable
//! stations, committing every change of the page in one transaction.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use shardbox::prelude::*;
//!
//! #[derive(Default, Serialize, Deserialize)]
//! struct Counter { value: i64 }
//!
//! #[derive(Serialize, Deserialize)]
//! enum CounterCommand { Add(i64) }
//! impl Message for CounterCommand { const TYPE: &'static str = "counter.command"; }
//!
//! #[derive(Serialize, Deserialize)]
//! enum CounterEvent { Added(i64) }
//! impl Message for CounterEvent { const TYPE: &'static str = "counter.event"; }
//!
//! impl Aggregate for Counter {
//!     const KIND: &'static str = "counter";
//!     type Command = CounterCommand;
//!     type Event = CounterEvent;
//!     async fn handle(&self, c: &CounterCommand, _: &Context<'_>) -> Result<Vec<CounterEvent>, HandlerError> {
//!         let CounterCommand::Add(n) = c;
//!         Ok(vec![CounterEvent::Added(*n)])
//!     }
//!     fn apply(&mut self, e: &CounterEvent) {
//!         let CounterEvent::Added(n) = e;
//!         self.value += n;
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let shardbox = Shardbox::builder().memory().aggregate::<Counter>().build().await?;
//! let node = shardbox.start();
//! shardbox.send::<Counter>("c-1", &CounterCommand::Add(5)).await?;
//! node.drain(std::time::Duration::from_secs(5)).await?;
//! node.shutdown().await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

/// The admin HTTP surface (health, Prometheus metrics, JSON API, web dashboard) to mount
/// in an application: `admin` feature.
#[cfg(feature = "admin")]
pub mod admin;
mod builder;
mod catch_up;
mod failures;
mod kinds;
#[cfg(feature = "otel")]
pub mod otel;
mod pipeline;
mod reads;
mod schema_evolution;
mod shardbox;
pub mod testing;
mod versions;

pub use builder::ShardboxBuilder;
pub use catch_up::CatchUpHandle;
pub use pipeline::Pipeline;
pub use shardbox::{Node, Shardbox};

pub use shardbox_core::storage::{
    BlockedTarget, CatchUpStatus, CatchUpTargets, DeadLetterFilter, DeadLetterId, EntityKey,
    Member, ReadModelVersion, RequeueReport, ReshardMoves, ResumeReport, StorageReads,
    StoredDeadLetter, Unblock, UnblockReport,
};

/// The storage conformance suite (the `shardbox-conformance` crate), for authors of another
/// storage backend: `conformance` feature. See its crate documentation for how to run it.
///
/// ```
/// // In a test file of the backend's crate: one #[tokio::test] per case, each on a fresh store.
/// mod my_store {
///     use shardbox::core::memory::MemoryStorage; // the backend under test
///
///     async fn fresh(_case: &str) -> Option<(MemoryStorage, ())> {
///         Some((MemoryStorage::new(), ()))
///     }
///
///     shardbox::conformance::conformance_suite!(fresh);
/// }
///
/// // A case is an async fn too, to call alone.
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// let store = shardbox::core::memory::MemoryStorage::new();
/// shardbox::conformance::write_then_read_in_seq_order(store).await;
/// # }
/// ```
#[cfg(feature = "conformance")]
pub use shardbox_conformance as conformance;
pub use shardbox_core as core;
pub use shardbox_stations as stations;
pub use shardbox_storage as storage;
#[cfg(feature = "postgres")]
pub use shardbox_storage::{PostgresOptions, PostgresStorage};
pub use shardbox_storage::{SqlConnection, SqlProjection, SqlResult};
#[cfg(feature = "sqlite")]
pub use shardbox_storage::{SqliteOptions, SqliteStorage};

/// Declares an enum of event types a subscriber follows (see [`EventSet`]).
pub use shardbox_core::event_set;

/// For writing your own [`Station`]s: `#[shardbox::async_trait]` on the impl.
pub use async_trait::async_trait;

/// The date-time crate of Shardbox's times (`DeadLetterFilter::since`, `SendOptions::due_at`,
/// catch-up starts…), re-exported so that an application needs no dependency of its own to
/// name them: `shardbox::chrono::Utc::now()`.
pub use chrono;

pub use shardbox_core::{
    Aggregate, Backoff, CatchUp, CatchUpProgress, Clock, CommandOutcome, ConfigError, Context,
    Conveyor, DeliveryConfig, DeliveryError, DeliveryMonitor, DeliveryReport, EntityKind, EventSet,
    EventSource, ExhaustedOutcome, FailureAction, FailureInfo, FailurePolicy, HandlerError,
    IdField, IdProblem, Intent, InvalidId, KindControl, KindLimits, KindRole, KindSettings,
    ManualClock, Message, MetricsSnapshot, NextAttempt, NodeId, NoopMonitor, OutcomeWait, Outgoing,
    PayloadError, ProcessActions, ProcessManager, Projection, Reactor, RebuildScope,
    RegisteredKind, ReshardOptions, ReshardReport, SendOptions, SendReceipt, ShardIndex,
    ShardStrategy, SignalId, StableHashStrategy, StageInfo, StageReport, Station, StationContext,
    StorageError, StrategyRecord, SystemClock, TracePropagator, UpcastError, Upcasters,
    MAX_DELIVER_STAGES, MAX_ID_BYTES,
};
pub use shardbox_core::{InvalidTime, TimeField, MAX_SPAN};
pub use shardbox_core::{PayloadTooLarge, DEFAULT_MAX_PAYLOAD_BYTES};

/// The names most applications need.
pub mod prelude {
    pub use crate::event_set;
    #[cfg(feature = "sqlite")]
    pub use crate::SqliteStorage;
    pub use crate::{
        async_trait, Aggregate, Backoff, CatchUp, CommandOutcome, Context, Conveyor,
        DeadLetterFilter, DeliveryError, EntityKey, EventSet, EventSource, ExhaustedOutcome,
        FailurePolicy, HandlerError, Intent, Message, OutcomeWait, Outgoing, ProcessActions,
        ProcessManager, Projection, Reactor, RebuildScope, SendOptions, Shardbox, SqlConnection,
        SqlProjection, SqlResult, Station, Unblock,
    };
}

/// The Rust snippets of the README and of docs/ are compiled (and run, unless marked
/// `no_run` or `ignore`) as doc tests of this crate, so that the pages cannot drift from the
/// API. A snippet that shows only a part of an application keeps the rest in hidden lines
/// (`# `), as rustdoc's own examples do.
#[cfg(doctest)]
mod doc_pages {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/catch-up.md")]
    struct CatchUp;
    #[doc = include_str!("../docs/clustering.md")]
    struct Clustering;
    #[doc = include_str!("../docs/entities.md")]
    struct Entities;
    #[doc = include_str!("../docs/failures.md")]
    struct Failures;
    #[doc = include_str!("../docs/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../docs/operations.md")]
    struct Operations;
    #[doc = include_str!("../docs/read-models.md")]
    struct ReadModels;
    #[doc = include_str!("../docs/storage.md")]
    struct Storage;
}

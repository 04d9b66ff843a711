//! # shardbox-core
//!
//! The small, stable heart of Shardbox. It holds the types every other crate speaks:
//!
//! ```text
//!  send / post ──► Inbox (sharded rows) ──► Delivery::deliver(shard)
//!                                              │ pick up lease (WorkRegistry)
//!                                              │ read a page in seq order (InboxStore)
//!                                              ▼
//!                                  Conveyor ─► Station ─► Station ─► …
//!                                              │ intents, states, emitted events
//!                                              ▼
//!                                  one fenced commit (InboxStore::commit_stage)
//! ```
//!
//! Core performs no I/O of its own except through the storage traits; the in-memory backend
//! ([`memory::MemoryStorage`]) lives here so that tests and fire-and-forget users need nothing
//! else. Durable backends live in `shardbox-storage`, stock stations in `shardbox-stations`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod catch_up;
pub mod clock;
pub mod config;
pub mod conveyor;
pub mod cycle;
pub mod delivery;
mod due;
pub mod entity;
pub mod error;
pub mod event;
pub mod expiry;
pub mod failure;
pub mod handler;
mod heartbeat;
pub mod ids;
pub mod inbox;
pub mod listener;
pub mod memory;
pub mod message;
pub mod metrics;
pub mod monitor;
pub mod observer;
pub mod registry;
pub mod runner;
pub mod station;
pub mod storage;
pub mod strategy;
pub mod wakeups;
mod write_queue;

pub use catch_up::{CatchUp, CatchUpProgress};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{DeliveryConfig, DeliveryConfigBuilder};
pub use conveyor::{Conveyor, Intent};
pub use delivery::{Delivery, DeliveryEnv, DeliveryReport};
pub use entity::{Aggregate, Context, HandlerError, Message, Outgoing, Projection, Reactor};
pub use error::{ConfigError, DeliveryError, StorageError};
pub use event::{EventSource, NewEvent, StoredEvent};
pub use failure::{Backoff, ExhaustedOutcome, FailureDecision, FailurePolicy};
pub use handler::{BatchResult, EntityHandler, MessageOutcome};
pub use ids::{
    IdField, IdProblem, InvalidId, LeaseEpoch, NodeId, ShardIndex, SignalId, WorkerId, MAX_ID_BYTES,
};
pub use inbox::{Inbox, SendOptions, SendReceipt};
pub use listener::{ListenerHandle, ListenerStats, WriteListener};
pub use message::{DedupKey, InboxMessage, MessageKind, MessageStatus, Metadata, NewMessage};
pub use metrics::{DeliveryMetrics, LatencySummary, MetricsSnapshot};
pub use monitor::{
    DeliveryMonitor, FailureAction, FailureInfo, NoopMonitor, StageInfo, StageReport,
};
pub use observer::ShardObserver;
pub use registry::EntityRegistry;
pub use runner::{LocalRunner, RunnerHandle};
pub use station::Station;
pub use storage::{
    CatchUpStore, DeadLetterStore, EntityStore, EventStore, InboxStore, Lease, Storage,
    WorkRegistry,
};
pub use strategy::{ShardStrategy, StableHashStrategy};

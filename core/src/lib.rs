//! # shardbox-core
//!
//! The small, stable heart of Shardbox. Its folders are its layers; each may use the ones
//! above it in this list, never one below (the order is docs/architecture.md's layer table,
//! which `scripts/layer-check.py` checks the imports and this list against):
//!
//! ```text
//!  sync        the one poison-tolerant locking rule (uses nothing of the crate)
//!  model/      ids, messages, events, errors, config, failure policy, clock, shard strategy
//!  storage/    the storage traits (InboxStore, WorkRegistry, EventStore, …), listener, observer
//!  catch_up    the catch-up request, status machine and progress (pure decisions)
//!  memory/     the in-memory backend (one file per storage trait)
//!  entity/     Aggregate / Projection / Reactor / ProcessManager, their type-erased handlers, the registry
//!  telemetry/  the DeliveryMonitor hooks and the metrics
//!  stage/      one stage as stations see it: Conveyor, Station, StationContext (read-only)
//!  cluster/    what nodes agree on via the lock table: membership, leases, re-sharding, clock
//!  databases/  one storage over several databases: routing, merged reads, relays
//!  runner/     one node's scheduling: workers, turns, stages' fenced commits, wake-ups, timers
//!  send/       send / post into the Inbox (group commit)
//!  operator/   operator actions, written once for the facade, the admin surface and the CLI
//! ```
//!
//! One message's path:
//!
//! ```text
//!  send / post ──► Inbox (sharded rows) ──► Delivery (a worker's turn on a shard)
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
//! The stable API is the `shardbox` facade; items marked `#[doc(hidden)]` here serve the
//! other crates of the workspace and may change.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod catch_up;
pub(crate) mod cluster;
pub mod databases;
pub(crate) mod entity;
pub mod memory;
pub(crate) mod model;
pub mod operator;
pub(crate) mod runner;
pub(crate) mod send;
pub(crate) mod stage;
pub mod storage;
#[doc(hidden)]
pub mod sync;
pub(crate) mod telemetry;

pub use catch_up::{CatchUp, CatchUpProgress};
pub use cluster::relay::{Relay, RelayStep};
pub use cluster::reshard::{reshard, ReshardOptions, ReshardReport};
pub use cluster::seat::NodeSeat;
pub use entity::addressing::Addressing;
#[doc(hidden)]
pub use entity::aggregate_handler::AggregateHandler;
pub use entity::context::Context;
pub use entity::handler::{BatchResult, BatchRun, EntityHandler, MessageOutcome, StoredState};
pub use entity::handler_error::HandlerError;
pub use entity::in_transaction::{InTransactionApply, RebuildScope, TransactionalApply};
pub use entity::kind::{family as entity_family, EntityKind};
pub use entity::process::{ProcessActions, ProcessManager};
#[doc(hidden)]
pub use entity::process_handler::ProcessManagerHandler;
#[doc(hidden)]
pub use entity::projection_handler::ProjectionHandler;
#[doc(hidden)]
pub use entity::reactor_handler::ReactorHandler;
pub use entity::registry::EntityRegistry;
pub use entity::services::Services;
pub use entity::trace::TracePropagator;
pub use entity::traits::{Aggregate, EventSet, Message, Outgoing, Projection, Reactor};
pub use entity::transactional_projection::{
    TransactionalProjection, TransactionalProjectionHandler,
};
pub use entity::upcast::{Shape, UpcastError, UpcastStep, Upcasters, FIRST_VERSION};
pub use model::attempt_errors::{AttemptError, ErrorHistory};
pub use model::backoff::ExponentialBackoff;
pub use model::clock::{Clock, ManualClock, SystemClock};
pub use model::config::{DeliveryConfig, DeliveryConfigBuilder, DEFAULT_LEASE_LINGER, MAX_SHARDS};
pub use model::error::{Cause, ConfigError, DeliveryError, PayloadError, StorageError};
pub use model::event::{EventSource, NewEvent, StoredEvent};
pub use model::failure::{Backoff, ExhaustedOutcome, FailureDecision, FailurePolicy, NextAttempt};
pub use model::ids::validate as validate_id;
pub use model::ids::{
    Emitter, IdField, IdProblem, InvalidId, LeaseEpoch, NodeId, ShardIndex, SignalId, WorkerId,
    MAX_ID_BYTES, MAX_NODE_ID_BYTES,
};
pub use model::kind_controls::{
    exhausted_name, exhausted_of, KindControl, KindControls, KindLimits, KindSettings,
};
pub use model::kind_role::{
    decode_kinds, encode_kinds, is_internal_kind, KindRole, RegisteredKind, INTERNAL_KIND_PREFIX,
};
pub use model::message::{
    DedupKey, InboxMessage, InboxWrite, MessageKind, MessageStatus, Metadata, NewMessage,
};
pub use model::outcome::{handled_events, CommandOutcome, OutcomeLookup, OutcomeRecord};
pub use model::payload_limit::{
    check_payload, PayloadTooLarge, DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_LIMIT, MIN_PAYLOAD_LIMIT,
};
pub use model::strategy::{ShardStrategy, StableHashStrategy, StrategyRecord};
pub use model::time_limits::{InvalidTime, TimeField, MAX_SPAN};
#[doc(hidden)]
pub use runner::delivery::Delivery;
pub use runner::delivery::{DeliveryReport, MAX_DELIVER_STAGES};
#[doc(hidden)]
pub use runner::env::DeliveryEnv;
pub use runner::liveness::{Liveness, NodeLiveness};
pub use runner::local::{LocalRunner, RunnerHandle};
pub use send::inbox::{Inbox, SendReceipt};
pub use send::options::SendOptions;
pub use send::outcome::OutcomeWait;
pub use stage::context::StationContext;
pub use stage::conveyor::{settle_rows, AfterCommit, Conveyor, Intent, EXPIRED_REASON};
pub use stage::station::Station;
pub use storage::{
    CatchUpStore, DeadLetterStore, EntityStore, EventStore, InboxStore, KindControlStore, Lease,
    ListenerHandle, ListenerStats, OutboxStore, ShardObserver, Storage, WorkRegistry,
    WriteListener,
};
pub use telemetry::describe::{describe_metrics, metric_help, STAGE_SECONDS};
pub use telemetry::gauges::{publish_kind_controls, GaugeSample};
pub use telemetry::metrics::{
    DeliveryMetrics, LatencySummary, MetricsSnapshot, STAGE_BUCKETS, STAGE_BUCKETS_US,
};
pub use telemetry::monitor::{
    DeliveryMonitor, FailureAction, FailureInfo, NoopMonitor, StageInfo, StageReport,
};

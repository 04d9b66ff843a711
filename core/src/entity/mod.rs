//! Entities: what application developers implement, and how delivery sees it.
//!
//! ```text
//!  traits   Aggregate, Projection, Reactor (typed, serde)      ◄── the application
//!  context  Context: what a handler is told of its message     ◄── handlers
//!  handler_error HandlerError: how a handler fails             ◄── handlers, the failure policy
//!  event_set EventSet: the event types a subscriber follows    ◄── the application, the registry
//!  kind     EntityKind: a type's KIND, whichever trait says it ◄── settings keyed by kind
//!  process  ProcessManager (saga), ProcessActions             ◄── the application
//!  handler  EntityHandler: the type-erased face of a kind     ◄── the live and catch-up stations
//!  guard    a handler call under its timeout and panic guard  ◄── the adapters, the runner's turn
//!  target_batch the per-target rules every adapter shares     ◄── the adapters
//!  aggregate_handler, projection_handler, reactor_handler,
//!  process_handler  the adapter of each kind, on those rules   ◄── the application's builder
//!  in_transaction writes a handling leaves for the commit's transaction ◄── handler, stations
//!  transactional_projection a projection writing the application's tables inside the
//!           stage's transaction (SQL projections build on it)  ◄── the SQL backends
//!  registry EntityRegistry: kinds, subscriptions, routing     ◄── send path and stations
//!  addressing Addressing: strategy + shard count, readdressing ◄── the registry, operator actions
//!  services Services: the application's own objects, by type  ◄── handlers, via Context
//!  payload  typed reads of stored payloads (messages, events, dead letters)  ◄── operators, tests
//!  upcast   Upcasters: stored payloads of older versions to the current shape ◄── every read
//! ```
//!
//! This layer owns the per-target handling rules (a target's batch in `seq` order, the first
//! failure stops it, what a handler emits gets ids derived from its message). It does no I/O
//! and knows nothing of shards' leases, pages or commits.

pub mod addressing;
pub mod aggregate_handler;
pub mod context;
pub mod event_set;
pub mod guard;
pub mod handler;
pub mod handler_error;
pub mod in_transaction;
pub mod kind;
pub mod kind_gate;
pub mod payload;
pub mod process;
pub mod process_handler;
pub mod projection_handler;
pub mod reactor_handler;
pub mod registry;
pub mod services;
pub mod target_batch;
pub mod trace;
pub mod traits;
pub mod transactional_projection;
pub mod upcast;

//! Entities: what application developers implement, and how delivery sees it.
//!
//! ```text
//!  traits   Aggregate, Projection, Reactor (typed, serde)      ◄── the application
//!  event_set EventSet: the event types a subscriber follows    ◄── the application, the registry
//!  process  ProcessManager (saga), ProcessActions             ◄── the application
//!  process_handler  its adapter, on the handler machinery     ◄── the live station
//!  handler  EntityHandler: the type-erased adapter per kind   ◄── the live and catch-up stations
//!  registry EntityRegistry: kinds, subscriptions, routing     ◄── send path and stations
//!  addressing Addressing: strategy + shard count, readdressing ◄── the registry, operator actions
//!  services Services: the application's own objects, by type  ◄── handlers, via Context
//!  payload  typed reads of stored payloads (messages, events, dead letters)  ◄── operators, tests
//! ```
//!
//! This layer owns the per-target handling rules (a target's batch in `seq` order, the first
//! failure stops it, what a handler emits gets ids derived from its message). It does no I/O
//! and knows nothing of shards' leases, pages or commits.

pub mod addressing;
pub mod event_set;
pub mod handler;
pub mod payload;
pub mod process;
pub mod process_handler;
pub mod registry;
pub mod services;
pub mod traits;

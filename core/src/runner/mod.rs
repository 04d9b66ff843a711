//! The runner: the node-side machinery that serves shards.
//!
//! ```text
//!  local/    LocalRunner / RunnerHandle: workers, poller, lease watch, listener; every task
//!            it spawns is owned by the handle and awaited at shutdown
//!  liveness  whether those tasks still run (readiness probes)
//!  turn      one worker's turn on a shard: keeps, parks and releases its lease
//!  delivery/ Delivery: stages over a held lease (read page, stations, fenced commit)
//!  wake_queue the shards waiting for a worker, in order (the node's queue of work)
//!  wake_state the per-shard wake state: woken, held elsewhere, idle (pure)
//!  cycle      who serves which shard next (pure decisions)
//!  due, expiry                  timers for delayed rows, TTL sweep requests
//!  sweep     the periodic TTL sweep and the purge of idle shards
//!  outcomes  wakes the senders waiting for their commands' outcomes
//!  worker    a worker task under a supervisor that restarts and counts it if it dies
//!  env       DeliveryEnv: the runtime services (storage, timers, observers, stop flag)
//! ```
//!
//! What several nodes agree on through the lock table — membership, assignment, lease
//! renewal and loss, re-sharding, the storage clock — is `cluster/`; this folder is how one
//! node schedules its own work over it. Stations never see this folder: they get a
//! [`StationContext`](crate::stage::context::StationContext).

pub mod cycle;
pub mod delivery;
pub(crate) mod due;
pub mod env;
pub mod expiry;
mod kind_controls;
pub mod liveness;
pub mod local;
pub mod outcomes;
pub(crate) mod sweep;
pub(crate) mod tasks;
mod turn;
mod wake_queue;
pub mod wake_state;
mod worker;

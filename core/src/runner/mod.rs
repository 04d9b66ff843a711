//! The runner: the node-side machinery that serves shards.
//!
//! ```text
//!  local     LocalRunner / RunnerHandle: workers, poller, lease watch, listener; every task
//!            it spawns is owned by the handle and awaited at shutdown
//!  liveness  whether those tasks still run (readiness probes)
//!  turn      one worker's turn on a shard: keeps, parks and releases its lease
//!  delivery  Delivery: stages over a held lease (read page, stations, fenced commit)
//!  heartbeat renews the lease while a stage runs
//!  lease_loss  a lost lease: a takeover (WARN) or a catch-up's re-fence (DEBUG)
//!  wake_queue, wakeups, cycle   who serves which shard next (pure decisions in cycle/wakeups)
//!  due, expiry                  timers for delayed rows, TTL sweep requests
//!  sweep     the periodic TTL sweep and the purge of idle shards
//!  unreleased leases whose release failed, released again by a retry
//!  outcomes  wakes the senders waiting for their commands' outcomes
//!  reshard   online re-sharding, the operator's side: announce, gather every lease, switch
//!  worker    a worker task under a supervisor that restarts and counts it if it dies
//!  env       DeliveryEnv: the runtime services (storage, timers, observers, stop flag)
//!  storage_clock  the node's clock read off the storage's clock (leases on one time line)
//! ```
//!
//! Stations never see this folder: they get a [`StationContext`](crate::stage::context::StationContext).

pub mod assign;
pub mod cycle;
pub mod delivery;
pub(crate) mod due;
pub mod env;
pub mod expiry;
pub(crate) mod heartbeat;
pub(crate) mod lease_loss;
pub mod liveness;
pub mod local;
mod membership;
pub mod outcomes;
pub mod reshard;
pub mod storage_clock;
pub(crate) mod sweep;
pub(crate) mod tasks;
mod turn;
pub(crate) mod unreleased;
mod wake_queue;
pub mod wakeups;
mod worker;

//! Telemetry: the hooks and counters of a delivery.
//!
//! ```text
//!  monitor  DeliveryMonitor: hooks into the loop (stage started/finished, failures, stop)
//!  metrics  DeliveryMetrics: counters and latencies, also exported via the `metrics` crate
//!  gauges   inbox depth, lag per shard, leases, dead letters, catch-ups: read periodically
//!  describe the help text and unit of every exported metric
//!  fates    the messages a stage settled otherwise than by delivery, logged after its commit
//! ```
//!
//! Both only observe: they never write to storage and never decide what is delivered (the
//! monitor's answer to a handler failure is the one exception, obeyed by the live station).
//!
//! **Latency trace points.** A message's way from its send to its handler is marked by
//! `TRACE` events of target `shardbox::latency`, each with `point`, `node`, `shard` and `key`
//! (the message's `received_at` in µs since the epoch; 0 for a point of a whole shard):
//! `write` and `written` (its send's group write starts, and has committed), `notify` and
//! `notified` (a commit hands the shard to the notifier, which has sent it; PostgreSQL), `heard` (a
//! listener heard the shard; PostgreSQL), `woken` (a write woke the shard on a node), `turn`
//! (a worker took the shard), `picked_up`, `read` (its page was read), `committed` (a stage
//! of the shard committed). They cost nothing unless a subscriber enables the target; the
//! benchmark's `latency` workload records them with `SHARDBOX_BENCH_TIMELINE` (see
//! docs/performance.md).

pub mod describe;
pub mod fates;
pub mod gauges;
pub mod metrics;
pub mod monitor;

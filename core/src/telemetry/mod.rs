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

pub mod describe;
pub mod fates;
pub mod gauges;
pub mod metrics;
pub mod monitor;

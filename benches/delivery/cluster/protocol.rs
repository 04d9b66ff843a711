//! What the parent and its node processes agree on: the lines they exchange, the pool each
//! opens, how long each side waits for the other, and how often the parent asks.
//!
//! ```text
//!  node ─► parent   "ready"                      serving, its listener connected
//!  parent ─► node   "count"  ─► "count delivered=N"
//!  parent ─► node   "stop" (then stdin closes) ─► "stopped delivered=N stages=… cpu_s=…"
//! ```

use std::time::Duration;

/// Pooled connections per node process, and for the parent's sender.
pub(super) const POOL: u32 = 4;
/// The line a node process prints once it serves the schema and hears other processes' writes.
pub(super) const READY: &str = "ready";
/// The first word of a node process's answer to `count`.
pub(super) const COUNT: &str = "count";
/// The first word of the line a node process prints after its clean shutdown.
pub(super) const STOPPED: &str = "stopped";
/// How long a node process may take to start, and to stop once told to.
pub(super) const START_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the nodes may take to deliver everything.
pub(super) const DELIVERY_LIMIT: Duration = Duration::from_secs(3600);
/// How often the parent asks the node processes for their delivered counts.
pub(super) const POLL: Duration = Duration::from_millis(5);
/// How often the parent prints how many messages were delivered while it waits.
pub(super) const PROGRESS: Duration = Duration::from_secs(5);

//! Hearing writes made by other processes: an optional storage capability.
//!
//! ```text
//!  node A: write ─► commit (+ NOTIFY in the same transaction, on PostgreSQL)
//!                                   │
//!  node B: WriteListener thread ◄───┘  ─► ShardObserver::on_write(shards) ─► a worker wakes
//!          connection lost ─► reconnect with back-off ─► ShardObserver::on_missed_writes
//! ```
//!
//! A backend that can tell other processes about its writes (PostgreSQL `LISTEN`/`NOTIFY`)
//! returns a [`WriteListener`] from [`Storage::write_listener`](crate::Storage::write_listener);
//! the runner starts it with the node's wake queue as observer. Notifications only save time:
//! the runner's poller remains the fallback, so a notification that is lost (a dropped
//! connection, a node that was not listening yet) delays a message by at most a poll interval
//! and never loses it.
//!
//! Core does no I/O here: it defines the trait and the handle through which the backend's
//! listening thread reports and is stopped.

use crate::model::error::StorageError;
use crate::model::ids::{NodeId, ShardIndex};
use crate::storage::observer::ShardObserver;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A storage capability: hear the writes of every process sharing the database.
pub trait WriteListener: Send + Sync {
    /// Starts listening for writes to `0..shard_count` on behalf of node `node_id`; every
    /// notified shard goes to `observer.on_write`, and after every (re)connection
    /// `observer.on_missed_writes` is called (writes made while not listening were missed).
    ///
    /// Returns at once: connecting and listening happen in the background (never on an async
    /// runtime's worker thread), reconnecting with back-off when the connection drops, until
    /// the returned handle is stopped or dropped.
    fn listen(
        &self,
        node_id: &NodeId,
        shard_count: u32,
        observer: Arc<dyn ShardObserver>,
    ) -> Result<ListenerHandle, StorageError>;
}

#[derive(Debug)]
struct Shared {
    node: String,
    stopped: AtomicBool,
    connected: AtomicBool,
    connects: AtomicU64,
    disconnects: AtomicU64,
    notifications: AtomicU64,
}

/// What a listener has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// Whether it is listening now.
    pub connected: bool,
    /// Successful connections (1 + reconnections).
    pub connects: u64,
    /// Connections lost.
    pub disconnects: u64,
    /// Notifications received.
    pub notifications: u64,
}

/// The owner's side of a running listener: read its counters, stop it (dropping stops it
/// too).
#[derive(Debug)]
pub struct ListenerHandle {
    shared: Arc<Shared>,
    /// The listeners it stands for (one per database of a storage over several), if any.
    parts: Vec<ListenerHandle>,
}

/// The listening thread's side: report what happens, learn when to stop.
#[derive(Debug, Clone)]
pub struct ListenerControl {
    shared: Arc<Shared>,
}

impl ListenerHandle {
    /// A handle and the control to hand to the listening thread of `node_id`.
    pub fn new(node_id: &NodeId) -> (ListenerHandle, ListenerControl) {
        let shared = Arc::new(Shared {
            node: node_id.0.clone(),
            stopped: AtomicBool::new(false),
            connected: AtomicBool::new(false),
            connects: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            notifications: AtomicU64::new(0),
        });
        (
            ListenerHandle {
                shared: shared.clone(),
                parts: Vec::new(),
            },
            ListenerControl { shared },
        )
    }

    /// One handle for several listeners (one per database): its counters are their sums, it
    /// is connected while every one is, and stopping it stops them all.
    pub fn joined(node_id: &NodeId, parts: Vec<ListenerHandle>) -> ListenerHandle {
        let (mut handle, _) = ListenerHandle::new(node_id);
        handle.parts = parts;
        handle
    }

    /// The counters now.
    pub fn stats(&self) -> ListenerStats {
        if !self.parts.is_empty() {
            let each: Vec<ListenerStats> = self.parts.iter().map(|p| p.stats()).collect();
            return ListenerStats {
                connected: each.iter().all(|s| s.connected),
                connects: each.iter().map(|s| s.connects).sum(),
                disconnects: each.iter().map(|s| s.disconnects).sum(),
                notifications: each.iter().map(|s| s.notifications).sum(),
            };
        }
        let s = &self.shared;
        ListenerStats {
            connected: s.connected.load(Ordering::SeqCst),
            connects: s.connects.load(Ordering::SeqCst),
            disconnects: s.disconnects.load(Ordering::SeqCst),
            notifications: s.notifications.load(Ordering::SeqCst),
        }
    }

    /// Asks the listener to stop; it closes its connection shortly after.
    pub fn stop(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for part in &self.parts {
            part.stop();
        }
    }
}

impl Drop for ListenerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

impl ListenerControl {
    /// Whether the owner asked to stop.
    pub fn is_stopped(&self) -> bool {
        self.shared.stopped.load(Ordering::SeqCst)
    }

    /// The node the listener works for.
    pub fn node(&self) -> &str {
        &self.shared.node
    }

    /// A connection is listening (exported as `shardbox_listener_connects_total`).
    pub fn connected(&self) {
        self.shared.connected.store(true, Ordering::SeqCst);
        self.shared.connects.fetch_add(1, Ordering::SeqCst);
        metrics::counter!("shardbox_listener_connects_total", "node" => self.shared.node.clone())
            .increment(1);
    }

    /// The connection was lost (exported as `shardbox_listener_disconnects_total`).
    pub fn disconnected(&self) {
        self.shared.connected.store(false, Ordering::SeqCst);
        self.shared.disconnects.fetch_add(1, Ordering::SeqCst);
        metrics::counter!("shardbox_listener_disconnects_total", "node" => self.shared.node.clone())
            .increment(1);
    }

    /// `n` notifications arrived.
    pub fn notified(&self, n: u64) {
        self.shared.notifications.fetch_add(n, Ordering::SeqCst);
    }
}

/// Parses a notification payload — shard indexes separated by commas — appending the
/// shards below `shard_count` to `out`. Returns false if some part was not a shard index
/// (the valid parts are still appended).
///
/// ```
/// use shardbox_core::storage::listener::parse_shards;
/// use shardbox_core::ShardIndex;
/// let mut out = Vec::new();
/// assert!(parse_shards("3,17", 64, &mut out));
/// assert_eq!(out, [ShardIndex(3), ShardIndex(17)]);
/// ```
pub fn parse_shards(payload: &str, shard_count: u32, out: &mut Vec<ShardIndex>) -> bool {
    let mut clean = true;
    for part in payload.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u32>() {
            Ok(s) if s < shard_count => out.push(ShardIndex(s)),
            _ => clean = false,
        }
    }
    clean
}

/// Formats shard indexes as notification payloads of at most `max_len` bytes each, sorted
/// and without repeats: the inverse of [`parse_shards`].
///
/// ```
/// use shardbox_core::storage::listener::shard_payloads;
/// use shardbox_core::ShardIndex;
/// let shards = [ShardIndex(9), ShardIndex(2), ShardIndex(9)];
/// assert_eq!(shard_payloads(&shards, 100), ["2,9"]);
/// ```
pub fn shard_payloads(shards: &[ShardIndex], max_len: usize) -> Vec<String> {
    let mut sorted: Vec<u32> = shards.iter().map(|s| s.0).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut payloads = Vec::new();
    let mut current = String::new();
    for s in sorted {
        let part = s.to_string();
        if !current.is_empty() && current.len() + 1 + part.len() > max_len {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(',');
        }
        current.push_str(&part);
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

/// A fresh origin for the notifications of one storage instance (32 random hex digits), so
/// that its own listener can tell them from other processes' (see [`split_origin`]).
pub fn new_origin() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Notification payloads for writes to `shards` made through the storage instance `origin`:
/// `origin;3,17,40`, each at most `max_len` bytes (see [`shard_payloads`]).
///
/// ```
/// use shardbox_core::storage::listener::{origin_payloads, split_origin};
/// use shardbox_core::ShardIndex;
/// let payloads = origin_payloads("a1", &[ShardIndex(4), ShardIndex(2)], 100);
/// assert_eq!(payloads, ["a1;2,4"]);
/// assert_eq!(split_origin(&payloads[0]), (Some("a1"), "2,4"));
/// ```
pub fn origin_payloads(origin: &str, shards: &[ShardIndex], max_len: usize) -> Vec<String> {
    let room = max_len.saturating_sub(origin.len() + 1).max(1);
    shard_payloads(shards, room)
        .into_iter()
        .map(|list| format!("{origin};{list}"))
        .collect()
}

/// What starts the shard list of a notification of command outcomes (see
/// [`outcome_payloads`]).
pub const OUTCOMES_MARK: char = '!';

/// Notification payloads for command outcomes decided in `shards` by stages committed
/// through the storage instance `origin`: `origin;!3,17`, each at most `max_len` bytes. A
/// listener hands them to `ShardObserver::on_outcomes`, not `on_write`.
///
/// ```
/// use shardbox_core::storage::listener::{outcome_payloads, outcome_shards, split_origin};
/// use shardbox_core::ShardIndex;
/// let payloads = outcome_payloads("a1", &[ShardIndex(4)], 100);
/// assert_eq!(payloads, ["a1;!4"]);
/// assert_eq!(outcome_shards(split_origin(&payloads[0]).1), Some("4"));
/// assert_eq!(outcome_shards("4"), None);
/// ```
pub fn outcome_payloads(origin: &str, shards: &[ShardIndex], max_len: usize) -> Vec<String> {
    let room = max_len.saturating_sub(origin.len() + 2).max(1);
    shard_payloads(shards, room)
        .into_iter()
        .map(|list| format!("{origin};{OUTCOMES_MARK}{list}"))
        .collect()
}

/// The shard list of a notification of command outcomes (`!3,17` ─► `3,17`), or `None` for
/// a notification of writes.
pub fn outcome_shards(list: &str) -> Option<&str> {
    list.strip_prefix(OUTCOMES_MARK)
}

/// A notification payload's origin (the storage instance that wrote, if it says) and its
/// list of shards. A payload without an origin (`3,17`) is all shards.
///
/// ```
/// use shardbox_core::storage::listener::split_origin;
/// assert_eq!(split_origin("x;1,2"), (Some("x"), "1,2"));
/// assert_eq!(split_origin("1,2"), (None, "1,2"));
/// ```
pub fn split_origin(payload: &str) -> (Option<&str>, &str) {
    match payload.split_once(';') {
        Some((origin, shards)) => (Some(origin), shards),
        None => (None, payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_respect_the_size_limit() {
        let shards: Vec<_> = (0..2000).rev().map(ShardIndex).collect();
        let payloads = shard_payloads(&shards, 100);
        assert!(payloads.len() > 1);
        let mut back = Vec::new();
        for p in &payloads {
            assert!(p.len() <= 100, "{p}");
            assert!(parse_shards(p, 2000, &mut back));
        }
        let want: Vec<_> = (0..2000).map(ShardIndex).collect();
        assert_eq!(back, want, "every shard once, in order");
        assert!(shard_payloads(&[], 100).is_empty());
    }

    #[test]
    fn origin_payloads_keep_the_size_limit_and_name_their_origin() {
        let origin = new_origin();
        assert_eq!(origin.len(), 32);
        assert_ne!(origin, new_origin(), "each storage instance its own");
        let shards: Vec<_> = (0..2000).map(ShardIndex).collect();
        let payloads = origin_payloads(&origin, &shards, 100);
        let mut back = Vec::new();
        for p in &payloads {
            assert!(p.len() <= 100, "{p}");
            let (from, list) = split_origin(p);
            assert_eq!(from, Some(origin.as_str()));
            assert!(parse_shards(list, 2000, &mut back));
        }
        assert_eq!(back, shards);
    }

    #[test]
    fn junk_and_out_of_range_shards_are_skipped() {
        let mut out = Vec::new();
        assert!(!parse_shards("1,x,70,,2", 64, &mut out));
        assert_eq!(out, [ShardIndex(1), ShardIndex(2)]);
        assert!(parse_shards("", 64, &mut out), "an empty payload is clean");
    }

    #[test]
    fn the_handle_sees_what_the_thread_reports_and_stops_it() {
        let (handle, control) = ListenerHandle::new(&NodeId("n".into()));
        assert_eq!(handle.stats(), ListenerStats::default());
        control.connected();
        control.notified(3);
        control.disconnected();
        control.connected();
        assert_eq!(
            handle.stats(),
            ListenerStats {
                connected: true,
                connects: 2,
                disconnects: 1,
                notifications: 3
            }
        );
        assert!(!control.is_stopped());
        drop(handle);
        assert!(control.is_stopped(), "dropping the handle stops the thread");
        assert_eq!(control.node(), "n");
    }
}

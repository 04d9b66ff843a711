//! Identifiers of the delivery domain: shards, lease epochs, nodes, workers, signals.
//!
//! Each is a newtype so that a shard number is never confused with an epoch or a count.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The index of one shard of the Inbox, in `0..shard_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShardIndex(pub u32);

impl ShardIndex {
    /// The index as a signed database integer.
    pub fn as_i32(self) -> i32 {
        // Shard counts are validated to fit in i32 (see `DeliveryConfig`), so this never wraps.
        self.0 as i32
    }
}

impl fmt::Display for ShardIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Fencing token of a shard lease: it grows by one at every pick-up of the shard.
///
/// A commit carries the epoch it was read under and is refused when the stored epoch moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseEpoch(pub i64);

impl fmt::Display for LeaseEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The name of one node (process) taking part in delivery.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub String);

impl NodeId {
    /// A fresh random node id, `node-` followed by 8 hex digits.
    pub fn generate() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        NodeId(format!("node-{}", &id[..8]))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The number of a worker within its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkerId(pub u32);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The identity of one signal (a command or an event). A second write of the same signal to the
/// same target is a duplicate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SignalId(pub String);

impl SignalId {
    /// A fresh signal id: a UUID v7, time-ordered (48 bits of milliseconds, then random
    /// bits), so that ids written together sort together and an index keyed by them grows at
    /// its end instead of touching a random page per row (the event store's `id` index, the
    /// inbox's deduplication key within a target).
    pub fn generate() -> Self {
        SignalId(uuid::Uuid::now_v7().to_string())
    }

    /// A signal id derived from a parent signal, stable across redeliveries of the parent, so
    /// that what a handler emits is deduplicated if the parent is handled twice.
    pub fn derived(parent: &SignalId, part: &str, n: usize) -> Self {
        SignalId(format!("{}/{}/{}", parent.0, part, n))
    }
}

impl fmt::Display for SignalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SignalId {
    fn from(s: &str) -> Self {
        SignalId(s.to_owned())
    }
}

impl From<String> for SignalId {
    fn from(s: String) -> Self {
        SignalId(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_signal_ids_are_stable_and_distinct() {
        let parent = SignalId::from("p");
        assert_eq!(SignalId::derived(&parent, "event", 0).0, "p/event/0");
        assert_ne!(
            SignalId::derived(&parent, "event", 0),
            SignalId::derived(&parent, "event", 1)
        );
    }

    #[test]
    fn generated_node_ids_differ() {
        let a = NodeId::generate();
        assert!(a.0.starts_with("node-") && a.0.len() == 13, "{a}");
        assert_ne!(a, NodeId::generate());
    }
}

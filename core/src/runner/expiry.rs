//! TTL expiry of messages that no page reads: delayed, backed off, or waiting behind their
//! target when their time to live runs out, possibly in shards nobody is serving.
//!
//! ```text
//!  due rows            ─► read by a page ─► live delivery records Expired (no sweep needed)
//!  not-due rows        ─► sweep, every ttl_sweep_interval:
//!                           expired_shards(now) ─► ExpiryRequests.request(S) ─► notify(S)
//!                           worker serving S, drained ─► take(S)? ─► read_expired(S)
//!                           ─► Intent::Expired ─► one fenced stage commit under S's lease
//! ```
//!
//! The sweep only asks: rows are removed (or dead-lettered) by the worker that holds the
//! shard's lease, in a normal stage commit, never outside one. A shard held by another node
//! is left to that node, whose own sweep asks its workers the same.

use crate::model::ids::ShardIndex;
use crate::sync::lock;
use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

/// Shards a sweep found expired rows in, waiting for a worker to expire them; and which
/// periodic sweep is the current one.
#[derive(Debug, Default)]
pub(crate) struct ExpiryRequests {
    shards: Mutex<BTreeSet<ShardIndex>>,
    pub(crate) sweeper: AtomicU64,
}

impl ExpiryRequests {
    fn lock(&self) -> MutexGuard<'_, BTreeSet<ShardIndex>> {
        // One set operation per critical section: nothing half done to recover from.
        lock(&self.shards)
    }

    /// Asks for `shards` to be swept at their next serve.
    pub(crate) fn request(&self, shards: &[ShardIndex]) {
        self.lock().extend(shards.iter().copied());
    }

    /// Whether `shard` was asked for (and forgets the request).
    pub(crate) fn take(&self, shard: ShardIndex) -> bool {
        self.lock().remove(&shard)
    }

    /// Puts a request back (the sweep of `shard` did not commit).
    pub(crate) fn restore(&self, shard: ShardIndex) {
        self.lock().insert(shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_taken_once_and_can_be_restored() {
        let r = ExpiryRequests::default();
        r.request(&[ShardIndex(1), ShardIndex(3), ShardIndex(1)]);
        assert!(r.take(ShardIndex(1)));
        assert!(!r.take(ShardIndex(1)));
        assert!(!r.take(ShardIndex(2)));
        r.restore(ShardIndex(2));
        assert!(r.take(ShardIndex(2)));
        assert!(r.take(ShardIndex(3)));
    }
}

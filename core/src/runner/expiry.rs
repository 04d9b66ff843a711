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

/// What the periodic sweeps asked the workers for, and which sweep is the current one.
#[derive(Debug, Default)]
pub(crate) struct SweepRequests {
    /// Shards holding rows whose TTL has passed: expired at their next serve.
    pub(crate) expire: ShardRequests,
    /// Shards holding forgotten outcome records or delivered rows past their window: one
    /// purging stage at their next serve, even when the page read finds no delivered row to
    /// purge (a shard whose commands only dead-letter has none). A request whose stage
    /// fails is not restored: the next sweep asks again.
    pub(crate) purge: ShardRequests,
    pub(crate) sweeper: AtomicU64,
}

/// A set of shards asked for, each taken by the worker that serves it next.
#[derive(Debug, Default)]
pub(crate) struct ShardRequests {
    shards: Mutex<BTreeSet<ShardIndex>>,
}

impl ShardRequests {
    fn lock(&self) -> MutexGuard<'_, BTreeSet<ShardIndex>> {
        // One set operation per critical section: nothing half done to recover from.
        lock(&self.shards)
    }

    /// Asks for `shards` at their next serve.
    pub(crate) fn request(&self, shards: &[ShardIndex]) {
        self.lock().extend(shards.iter().copied());
    }

    /// Whether `shard` was asked for (and forgets the request).
    pub(crate) fn take(&self, shard: ShardIndex) -> bool {
        self.lock().remove(&shard)
    }

    /// Puts a request back (the work on `shard` did not commit).
    pub(crate) fn restore(&self, shard: ShardIndex) {
        self.lock().insert(shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_taken_once_and_can_be_restored() {
        let r = ShardRequests::default();
        r.request(&[ShardIndex(1), ShardIndex(3), ShardIndex(1)]);
        assert!(r.take(ShardIndex(1)));
        assert!(!r.take(ShardIndex(1)));
        assert!(!r.take(ShardIndex(2)));
        r.restore(ShardIndex(2));
        assert!(r.take(ShardIndex(2)));
        assert!(r.take(ShardIndex(3)));
    }
}

//! The cache of recent deliveries: which (tenant, target, signal) was delivered, as which row,
//! within the deduplication window.
//!
//! The cache maps a key to the `seq` of the row that was delivered. A row is a duplicate only
//! if its key is cached under a *different* `seq`: the same row seen again (after a lost lease,
//! its first delivery never committed) is redelivered, never dropped. The cache is bounded by
//! `cache_capacity` entries and forgets entries after the window.
//!
//! Keys are not stored as such (four strings, a few hundred bytes with their allocations) but
//! as a 128-bit digest: two SipHash values of the key under independent random keys chosen
//! when the cache is made. A row would be taken for a duplicate of another key only if both
//! 64-bit halves collided, which neither chance (about 2^-128 per pair) nor a client that
//! chooses its signal ids (the hash keys are secret) can bring about.
//!
//! ```text
//!  remember(key, seq) ─► map[digest] = (seq, now, n)   order.push_back((digest, now, n))
//!                        then forget from the front: entries past the window, and the oldest
//!                        while more than `capacity` are kept
//!  is_duplicate       ─► map[digest] under another seq, and not past the window
//! ```
//!
//! Insertion order is the order of expiry (every entry lives for the same window), so one
//! queue serves both bounds, each step O(1). A general-purpose cache (moka, which this
//! replaced) spent about 9 % of the CPU of the `live` benchmark on admission, frequency
//! sketches and its hash table's rehashing; deliveries need none of that.

use shardbox_core::DedupKey;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Hashes a digest by its low 64 bits: digests are already uniform and secret.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u128` is used; fold anything else in, should it ever be.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u128(&mut self, digest: u128) {
        self.0 = digest as u64;
    }
}

/// A remembered delivery.
#[derive(Debug, Clone, Copy)]
struct Delivered {
    seq: i64,
    at: Instant,
    /// Which push of `order` this entry belongs to (a key remembered again moves on).
    n: u64,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<u128, Delivered, BuildHasherDefault<DigestHasher>>,
    /// Digests in the order they were remembered, with the push number of each.
    order: VecDeque<(u128, Instant, u64)>,
    pushes: u64,
}

impl Entries {
    /// Forgets the oldest entries: those past `window` at `now`, and more while over
    /// `capacity` (or while `order` holds twice that, counting keys remembered again).
    fn trim(&mut self, now: Instant, window: Duration, capacity: usize) {
        while let Some(&(digest, at, n)) = self.order.front() {
            let expired = now.saturating_duration_since(at) >= window;
            let over = self.map.len() > capacity || self.order.len() > capacity.saturating_mul(2);
            if !expired && !over {
                break;
            }
            self.order.pop_front();
            if self.map.get(&digest).is_some_and(|d| d.n == n) {
                self.map.remove(&digest);
            }
        }
    }
}

#[derive(Debug)]
struct Inner {
    entries: Mutex<Entries>,
    capacity: usize,
    window: Duration,
    hashers: (RandomState, RandomState),
}

/// A bounded, expiring map of recently delivered keys to the row that carried them.
#[derive(Clone)]
pub struct RecentDeliveries {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for RecentDeliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentDeliveries")
            .field("enabled", &self.inner.is_some())
            .finish()
    }
}

impl RecentDeliveries {
    /// A cache of at most `capacity` keys, each remembered for `window`. A zero capacity or a
    /// zero window disables it.
    pub fn new(capacity: u64, window: Duration) -> Self {
        let inner = (capacity > 0 && !window.is_zero()).then(|| {
            Arc::new(Inner {
                entries: Mutex::new(Entries::default()),
                capacity: usize::try_from(capacity).unwrap_or(usize::MAX),
                window,
                hashers: (RandomState::new(), RandomState::new()),
            })
        });
        RecentDeliveries { inner }
    }

    /// Whether a row `seq` with `key` duplicates a delivery remembered from another row.
    pub fn is_duplicate(&self, key: &DedupKey, seq: i64) -> bool {
        let Some(inner) = &self.inner else {
            return false;
        };
        let digest = inner.digest(key);
        let now = Instant::now();
        inner
            .lock()
            .map
            .get(&digest)
            .is_some_and(|d| d.seq != seq && now.saturating_duration_since(d.at) < inner.window)
    }

    /// Remembers that row `seq` delivered `key`.
    pub fn remember(&self, key: DedupKey, seq: i64) {
        let Some(inner) = &self.inner else {
            return;
        };
        let digest = inner.digest(&key);
        let now = Instant::now();
        let mut entries = inner.lock();
        entries.pushes += 1;
        let n = entries.pushes;
        entries.map.insert(digest, Delivered { seq, at: now, n });
        entries.order.push_back((digest, now, n));
        entries.trim(now, inner.window, inner.capacity);
    }

    /// Keys remembered now (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.lock().map.len())
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// The key's 128-bit digest.
    fn digest(&self, key: &DedupKey) -> u128 {
        let (a, b) = &self.hashers;
        (u128::from(a.hash_one(key)) << 64) | u128::from(b.hash_one(key))
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Plain data, consistent after any panic while held (at worst an entry too many).
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(signal: &str) -> DedupKey {
        DedupKey {
            tenant: String::new(),
            target_kind: "k".into(),
            target_id: "t".into(),
            signal_id: signal.into(),
        }
    }

    #[test]
    fn another_row_with_a_remembered_key_is_a_duplicate() {
        let c = RecentDeliveries::new(100, Duration::from_secs(60));
        assert!(!c.is_duplicate(&key("a"), 1));
        c.remember(key("a"), 1);
        assert!(c.is_duplicate(&key("a"), 2));
        assert!(
            !c.is_duplicate(&key("a"), 1),
            "the same row is a redelivery"
        );
        assert!(!c.is_duplicate(&key("b"), 2));
    }

    #[test]
    fn keys_differing_in_any_field_are_told_apart() {
        let c = RecentDeliveries::new(100, Duration::from_secs(60));
        let base = key("a");
        c.remember(base.clone(), 1);
        let mut others = Vec::new();
        for f in 0..4 {
            let mut k = base.clone();
            match f {
                0 => k.tenant = "x".into(),
                1 => k.target_kind = "x".into(),
                2 => k.target_id = "x".into(),
                _ => k.signal_id = "x".into(),
            }
            others.push(k);
        }
        // The same characters split differently between fields.
        others.push(DedupKey {
            tenant: String::new(),
            target_kind: "kt".into(),
            target_id: String::new(),
            signal_id: "a".into(),
        });
        for k in others {
            assert!(!c.is_duplicate(&k, 2), "{k:?}");
        }
        assert!(c.is_duplicate(&base, 2));
    }

    #[test]
    fn a_zero_window_or_capacity_disables_the_cache() {
        for c in [
            RecentDeliveries::new(0, Duration::from_secs(60)),
            RecentDeliveries::new(100, Duration::ZERO),
        ] {
            c.remember(key("a"), 1);
            assert!(!c.is_duplicate(&key("a"), 2));
        }
    }

    #[test]
    fn the_oldest_keys_go_first_beyond_the_capacity() {
        let c = RecentDeliveries::new(100, Duration::from_secs(60));
        for i in 0..250 {
            c.remember(key(&format!("k{i}")), i);
        }
        assert_eq!(c.len(), 100);
        assert!(!c.is_duplicate(&key("k149"), -1), "forgotten");
        assert!(c.is_duplicate(&key("k150"), -1), "kept");
        assert!(c.is_duplicate(&key("k249"), -1), "kept");
        // A key remembered again over and over keeps one entry, and the queue stays bounded.
        for i in 0..1_000 {
            c.remember(key("again"), 1_000 + i);
        }
        assert!(c.len() <= 100);
        assert!(c.is_duplicate(&key("again"), 0));
        assert!(
            !c.is_duplicate(&key("again"), 1_999),
            "the row it was last remembered as"
        );
        let queued = c.inner.as_ref().map(|i| i.lock().order.len());
        assert!(queued.is_some_and(|q| q <= 200), "{queued:?}");
    }

    #[test]
    fn entries_are_forgotten_after_the_window() {
        let c = RecentDeliveries::new(100, Duration::from_millis(50));
        c.remember(key("a"), 1);
        assert!(c.is_duplicate(&key("a"), 2));
        std::thread::sleep(Duration::from_millis(120));
        assert!(!c.is_duplicate(&key("a"), 2));
        c.remember(key("b"), 3);
        assert_eq!(c.len(), 1, "expired entries are dropped as new ones come");
    }
}

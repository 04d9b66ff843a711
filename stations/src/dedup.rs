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

use moka::sync::Cache;
use shardbox_core::DedupKey;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

/// A bounded, expiring map of recently delivered keys to the row that carried them.
#[derive(Clone)]
pub struct RecentDeliveries {
    cache: Option<Cache<u128, i64>>,
    hashers: Arc<(RandomState, RandomState)>,
}

impl std::fmt::Debug for RecentDeliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentDeliveries")
            .field("enabled", &self.cache.is_some())
            .finish()
    }
}

impl RecentDeliveries {
    /// A cache of at most `capacity` keys, each remembered for `window`. A zero capacity or a
    /// zero window disables it.
    pub fn new(capacity: u64, window: Duration) -> Self {
        let cache = (capacity > 0 && !window.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(capacity)
                .time_to_live(window)
                .build()
        });
        RecentDeliveries {
            cache,
            hashers: Arc::new((RandomState::new(), RandomState::new())),
        }
    }

    /// The key's 128-bit digest.
    fn digest(&self, key: &DedupKey) -> u128 {
        let (a, b) = &*self.hashers;
        (u128::from(a.hash_one(key)) << 64) | u128::from(b.hash_one(key))
    }

    /// Whether a row `seq` with `key` duplicates a delivery remembered from another row.
    pub fn is_duplicate(&self, key: &DedupKey, seq: i64) -> bool {
        self.cache
            .as_ref()
            .and_then(|c| c.get(&self.digest(key)))
            .is_some_and(|delivered| delivered != seq)
    }

    /// Remembers that row `seq` delivered `key`.
    pub fn remember(&self, key: DedupKey, seq: i64) {
        if let Some(c) = &self.cache {
            c.insert(self.digest(&key), seq);
        }
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
    fn entries_are_forgotten_after_the_window() {
        let c = RecentDeliveries::new(100, Duration::from_millis(50));
        c.remember(key("a"), 1);
        assert!(c.is_duplicate(&key("a"), 2));
        std::thread::sleep(Duration::from_millis(120));
        assert!(!c.is_duplicate(&key("a"), 2));
    }
}

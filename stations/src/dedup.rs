//! The cache of recent deliveries: which (tenant, target, signal) was delivered, as which row,
//! within the deduplication window.
//!
//! The cache maps a key to the `seq` of the row that was delivered. A row is a duplicate only
//! if its key is cached under a *different* `seq`: the same row seen again (after a lost lease,
//! its first delivery never committed) is redelivered, never dropped. The cache is bounded by
//! `cache_capacity` entries and forgets entries after the window.

use moka::sync::Cache;
use shardbox_core::DedupKey;
use std::time::Duration;

/// A bounded, expiring map of recently delivered keys to the row that carried them.
#[derive(Clone)]
pub struct RecentDeliveries {
    cache: Option<Cache<DedupKey, i64>>,
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
        RecentDeliveries { cache }
    }

    /// Whether a row `seq` with `key` duplicates a delivery remembered from another row.
    pub fn is_duplicate(&self, key: &DedupKey, seq: i64) -> bool {
        self.cache
            .as_ref()
            .and_then(|c| c.get(key))
            .is_some_and(|delivered| delivered != seq)
    }

    /// Remembers that row `seq` delivered `key`.
    pub fn remember(&self, key: DedupKey, seq: i64) {
        if let Some(c) = &self.cache {
            c.insert(key, seq);
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

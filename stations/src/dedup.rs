//! The cache of recent deliveries: which (tenant, target, signal) was delivered, as which row,
//! within the deduplication window.
//!
//! The cache maps a key to the `seq` of the row that was delivered. A row is a duplicate only
//! if its key is cached under a *different* `seq`: the same row seen again (after a lost lease,
//! its first delivery never committed) is redelivered, never dropped. The cache is bounded by
//! `cache_capacity` entries.
//!
//! The window is measured on the delivery's configured clock, as everywhere else: each entry
//! carries the `keep_until` of its delivered row (the stage's `now` plus the window) and is a
//! hit only while `keep_until > now` of the stage asking. So a node whose cache holds a key
//! decides exactly as a node that never saw it once the window has passed, whatever the clock
//! (a `ManualClock` moved on, a clock running ahead of the wall). The cache's own time to live,
//! on wall time, only bounds memory: it is the window, so an entry outlives its window on
//! neither clock when both run together; when the wall runs ahead of the configured clock the
//! entry is forgotten early, which is what a cold node would decide (the delivered row, kept
//! until `keep_until`, still refuses the duplicate at write).
//!
//! Keys are not stored as such (four strings, a few hundred bytes with their allocations) but
//! as a 128-bit digest: two SipHash values of the key under independent random keys chosen
//! when the cache is made. A row would be taken for a duplicate of another key only if both
//! 64-bit halves collided, which neither chance (about 2^-128 per pair) nor a client that
//! chooses its signal ids (the hash keys are secret) can bring about.

use chrono::{DateTime, Utc};
use moka::sync::Cache;
use shardbox_core::DedupKey;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

/// What the cache remembers of one delivery.
#[derive(Debug, Clone, Copy)]
struct Delivered {
    /// The row that delivered the key.
    seq: i64,
    /// The end of the key's window, on the configured clock.
    keep_until: DateTime<Utc>,
}

/// A bounded, expiring map of recently delivered keys to the row that carried them.
#[derive(Clone)]
pub struct RecentDeliveries {
    cache: Option<Cache<u128, Delivered>>,
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
    /// A cache of at most `capacity` keys, each held for at most `window` of wall time (a
    /// memory bound; hits are decided by each entry's `keep_until`). A zero capacity or a zero
    /// window disables it.
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

    /// Whether a row `seq` with `key` duplicates a delivery remembered from another row whose
    /// window has not passed at `now` (the configured clock's time).
    pub fn is_duplicate(&self, key: &DedupKey, seq: i64, now: DateTime<Utc>) -> bool {
        self.cache
            .as_ref()
            .and_then(|c| c.get(&self.digest(key)))
            .is_some_and(|d| d.seq != seq && d.keep_until > now)
    }

    /// Remembers that row `seq` delivered `key`, a duplicate until `keep_until` (the end of
    /// its window on the configured clock).
    pub fn remember(&self, key: DedupKey, seq: i64, keep_until: DateTime<Utc>) {
        if let Some(c) = &self.cache {
            c.insert(self.digest(&key), Delivered { seq, keep_until });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time")
    }

    /// Within the window of a delivery at `t0`.
    fn soon() -> DateTime<Utc> {
        t0() + chrono::Duration::seconds(1)
    }

    fn until() -> DateTime<Utc> {
        t0() + chrono::Duration::seconds(60)
    }

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
        assert!(!c.is_duplicate(&key("a"), 1, soon()));
        c.remember(key("a"), 1, until());
        assert!(c.is_duplicate(&key("a"), 2, soon()));
        assert!(
            !c.is_duplicate(&key("a"), 1, soon()),
            "the same row is a redelivery"
        );
        assert!(!c.is_duplicate(&key("b"), 2, soon()));
    }

    #[test]
    fn keys_differing_in_any_field_are_told_apart() {
        let c = RecentDeliveries::new(100, Duration::from_secs(60));
        let base = key("a");
        c.remember(base.clone(), 1, until());
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
            assert!(!c.is_duplicate(&k, 2, soon()), "{k:?}");
        }
        assert!(c.is_duplicate(&base, 2, soon()));
    }

    #[test]
    fn a_zero_window_or_capacity_disables_the_cache() {
        for c in [
            RecentDeliveries::new(0, Duration::from_secs(60)),
            RecentDeliveries::new(100, Duration::ZERO),
        ] {
            c.remember(key("a"), 1, until());
            assert!(!c.is_duplicate(&key("a"), 2, soon()));
        }
    }

    /// A hit counts only before the entry's `keep_until` on the clock the caller reads, with no
    /// wall time passing.
    #[test]
    fn a_remembered_key_is_no_duplicate_once_its_keep_until_has_passed() {
        let c = RecentDeliveries::new(100, Duration::from_secs(60));
        c.remember(key("a"), 1, until());
        assert!(c.is_duplicate(&key("a"), 2, until() - chrono::Duration::milliseconds(1)));
        assert!(!c.is_duplicate(&key("a"), 2, until()), "the window is over");
        assert!(!c.is_duplicate(&key("a"), 2, until() + chrono::Duration::hours(1)));
    }

    #[test]
    fn entries_are_forgotten_after_the_window() {
        let c = RecentDeliveries::new(100, Duration::from_millis(50));
        c.remember(key("a"), 1, until());
        assert!(c.is_duplicate(&key("a"), 2, soon()));
        std::thread::sleep(Duration::from_millis(120));
        assert!(!c.is_duplicate(&key("a"), 2, soon()));
    }
}

//! [`DatabaseStrategy`]: the application's shard strategy, made to place every target in its
//! database's shards.
//!
//! ```text
//!  shard_of(kind, id, S) = global(database, inner.shard_of(kind, id, share of S))
//!                          where database = database_of_slice(inner.shard_of(kind, id, 1,024))
//! ```
//!
//! The slice comes from the application's own strategy, so targets it co-locates (an order
//! and its saga) share a slice, hence a database, as well as a shard.

use super::map::{DatabaseMap, SLICES};
use crate::model::ids::ShardIndex;
use crate::model::strategy::{ShardStrategy, StrategyRecord};
use std::sync::Arc;

/// A shard strategy over the databases of a [`super::Databases`] storage.
pub struct DatabaseStrategy {
    inner: Arc<dyn ShardStrategy>,
    map: DatabaseMap,
}

impl DatabaseStrategy {
    /// `inner` placed over the databases of `map`.
    pub fn new(inner: Arc<dyn ShardStrategy>, map: DatabaseMap) -> Self {
        DatabaseStrategy { inner, map }
    }

    /// `strategy` as `storage` places targets: over its databases if it spans several (the
    /// storage then finds targets' states and outcomes by it too), as it is otherwise. What
    /// the builder and every tool place rows by.
    pub fn over<S>(strategy: Arc<dyn ShardStrategy>, storage: &S) -> Arc<dyn ShardStrategy>
    where
        S: crate::storage::Storage + ?Sized,
    {
        match super::Databases::of(storage) {
            Some(dbs) if dbs.map().count() > 1 => {
                dbs.place_by(strategy.clone());
                Arc::new(DatabaseStrategy::new(strategy, dbs.map()))
            }
            _ => strategy,
        }
    }

    /// The database a target lives in. A catch-up job's ticks live in the home database, with
    /// the job: its steps store it in their commit.
    pub fn database_of(&self, target_kind: &str, target_id: &str) -> u32 {
        if target_kind == crate::catch_up::TICK_KIND {
            return 0;
        }
        let slice = self.inner.shard_of(target_kind, target_id, SLICES);
        self.map.database_of_slice(slice.0)
    }
}

impl ShardStrategy for DatabaseStrategy {
    fn shard_of(&self, target_kind: &str, target_id: &str, shard_count: u32) -> ShardIndex {
        let database = self.database_of(target_kind, target_id);
        let share = self.map.shard_count_of(database, shard_count).max(1);
        let local = self.inner.shard_of(target_kind, target_id, share);
        self.map.global(database, local)
    }

    fn record(&self) -> StrategyRecord {
        self.inner.record()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::strategy::StableHashStrategy;

    #[test]
    fn a_target_keeps_its_database_across_shard_counts_and_stays_in_range() {
        let map = DatabaseMap::new(3).unwrap();
        let s = DatabaseStrategy::new(Arc::new(StableHashStrategy::new()), map);
        let mut per_db = [0usize; 3];
        for i in 0..3000 {
            let id = format!("t-{i}");
            let d = s.database_of("order", &id);
            per_db[d as usize] += 1;
            for count in [3, 4, 8, 12, 31, 64] {
                let shard = s.shard_of("order", &id, count);
                assert!(shard.0 < count, "{id}: shard {shard} of {count}");
                assert_eq!(map.database_of(shard), d, "{id} moved database at {count}");
            }
        }
        for n in per_db {
            assert!((850..=1150).contains(&n), "databases got {per_db:?}");
        }
    }

    #[test]
    fn catch_up_ticks_live_in_the_home_database() {
        let s = DatabaseStrategy::new(
            Arc::new(StableHashStrategy::new()),
            DatabaseMap::new(3).unwrap(),
        );
        for job in 1..200 {
            let shard = s.shard_of(crate::catch_up::TICK_KIND, &job.to_string(), 12);
            assert_eq!(shard.0 % 3, 0, "job {job}: shard {shard}");
        }
    }

    #[test]
    fn co_located_kinds_share_database_and_shard() {
        let inner = StableHashStrategy::new().colocate("order", ["order", "payment"]);
        let s = DatabaseStrategy::new(Arc::new(inner), DatabaseMap::new(3).unwrap());
        for i in 0..200 {
            let id = format!("o-{i}");
            assert_eq!(s.shard_of("order", &id, 9), s.shard_of("payment", &id, 9));
        }
    }
}

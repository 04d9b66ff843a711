//! [`DatabaseMap`]: where a target, a shard, a row and an event live when the storage spans
//! several databases — plain arithmetic, no I/O.
//!
//! ```text
//!  target ─► strategy.shard_of(kind, id, 1,024) = slice ─► database = slice × N ÷ 1,024
//!  global shard g  = local × N + database      (database = g mod N, local = g div N)
//!  global seq / id = local × N + database      (Inbox seqs, event seqs, dead-letter ids)
//!  global count S  ─► database d has the shards g < S with g mod N = d: ⌈(S − d) ÷ N⌉ of them
//! ```
//!
//! The slice space never changes, so a target's database does not change when a database is
//! re-sharded: only its shard within that database does. Shards are interleaved rather than
//! cut in ranges so that a shard's database does not depend on the shard count either: a
//! node that has not yet heard of a re-sharding still routes every shard to its database.

use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;

/// The fixed number of slices of the target hash that are mapped to databases.
pub const SLICES: u32 = 1024;

/// The most databases one storage spans (every database needs a slice of its own, and a
/// global index is `local × N + database`).
pub const MAX_DATABASES: u32 = 64;

/// How global shards, seqs and ids map to the databases of a storage over `N` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatabaseMap {
    databases: u32,
}

impl DatabaseMap {
    /// The map of `databases` databases (1 to [`MAX_DATABASES`]).
    pub fn new(databases: usize) -> Result<Self, StorageError> {
        match u32::try_from(databases) {
            Ok(n) if (1..=MAX_DATABASES).contains(&n) => Ok(DatabaseMap { databases: n }),
            _ => Err(StorageError::Unsupported {
                what: format!("a storage over {databases} databases"),
                reason: format!("give between 1 and {MAX_DATABASES} database URLs"),
            }),
        }
    }

    /// How many databases.
    pub fn count(&self) -> u32 {
        self.databases
    }

    /// The database that holds the targets of `slice` (`0..SLICES`): contiguous ranges.
    pub fn database_of_slice(&self, slice: u32) -> u32 {
        let slice = u64::from(slice.min(SLICES - 1));
        (slice * u64::from(self.databases) / u64::from(SLICES)) as u32
    }

    /// The database of a global shard.
    pub fn database_of(&self, shard: ShardIndex) -> u32 {
        shard.0 % self.databases
    }

    /// A global shard's index inside its database.
    pub fn local(&self, shard: ShardIndex) -> ShardIndex {
        ShardIndex(shard.0 / self.databases)
    }

    /// The global shard of `local` in `database`.
    pub fn global(&self, database: u32, local: ShardIndex) -> ShardIndex {
        ShardIndex(local.0 * self.databases + database)
    }

    /// How many of `global_count` shards `database` has.
    pub fn shard_count_of(&self, database: u32, global_count: u32) -> u32 {
        (global_count + self.databases - 1 - database.min(self.databases - 1)) / self.databases
    }

    /// The global count whose share of each database is `counts` (one per database, in
    /// order); `None` if no global count gives exactly these (the databases disagree: a
    /// re-sharding stopped half way).
    pub fn global_count(&self, counts: &[u32]) -> Option<u32> {
        let total: u32 = counts.iter().sum();
        let agrees = counts.len() == self.databases as usize
            && counts
                .iter()
                .enumerate()
                .all(|(d, c)| *c == self.shard_count_of(d as u32, total));
        agrees.then_some(total)
    }

    /// Refuses a global shard count that leaves a database without a shard.
    pub fn check_count(&self, global_count: u32) -> Result<(), StorageError> {
        if global_count < self.databases {
            return Err(StorageError::Unsupported {
                what: format!("shard_count {global_count}"),
                reason: format!(
                    "a storage over {} databases needs at least one shard per database: set shard_count to {} or more",
                    self.databases, self.databases
                ),
            });
        }
        Ok(())
    }

    /// The global form of seq (or id) `local` of `database`: unique across databases and, in
    /// one database, in the same order as its own.
    pub fn global_seq(&self, database: u32, local: i64) -> i64 {
        local * i64::from(self.databases) + i64::from(database)
    }

    /// The database and local seq (or id) of a global one.
    pub fn split_seq(&self, global: i64) -> (u32, i64) {
        let n = i64::from(self.databases);
        (global.rem_euclid(n) as u32, global.div_euclid(n))
    }

    /// The local cursor of `database` that reads exactly its seqs whose global form is above
    /// `after`: its local seqs above the result.
    pub fn local_after(&self, database: u32, after: i64) -> i64 {
        (after - i64::from(database)).div_euclid(i64::from(self.databases))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_round_trip_and_each_database_gets_its_share() {
        let map = DatabaseMap::new(3).unwrap();
        for g in 0..50 {
            let shard = ShardIndex(g);
            let (d, local) = (map.database_of(shard), map.local(shard));
            assert_eq!(map.global(d, local), shard);
        }
        for total in 3..40 {
            let counts: Vec<u32> = (0..3).map(|d| map.shard_count_of(d, total)).collect();
            let owned: Vec<u32> = (0..3)
                .map(|d| (0..total).filter(|g| g % 3 == d).count() as u32)
                .collect();
            assert_eq!(counts, owned, "count {total}");
            assert_eq!(map.global_count(&counts), Some(total));
        }
        assert_eq!(
            map.global_count(&[4, 2, 2]),
            None,
            "a half-done re-sharding"
        );
        assert!(map.check_count(2).is_err());
        assert!(map.check_count(3).is_ok());
    }

    #[test]
    fn slices_cut_into_contiguous_ranges_that_cover_every_database() {
        let map = DatabaseMap::new(3).unwrap();
        let dbs: Vec<u32> = (0..SLICES).map(|s| map.database_of_slice(s)).collect();
        assert!(dbs.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!((dbs[0], dbs[SLICES as usize - 1]), (0, 2));
        for d in 0..3 {
            let n = dbs.iter().filter(|x| **x == d).count();
            assert!((341..=342).contains(&n), "database {d} has {n} slices");
        }
    }

    #[test]
    fn seqs_round_trip_and_local_cursors_read_exactly_what_is_after() {
        let map = DatabaseMap::new(3).unwrap();
        for local in 0..20 {
            for d in 0..3 {
                assert_eq!(map.split_seq(map.global_seq(d, local)), (d, local));
            }
        }
        for after in -2..40 {
            for d in 0..3 {
                let cursor = map.local_after(d, after);
                for local in 0..20 {
                    assert_eq!(
                        local > cursor,
                        map.global_seq(d, local) > after,
                        "after {after}, database {d}, local {local}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_database_or_too_many_is_refused_by_name() {
        let err = DatabaseMap::new(0).unwrap_err().to_string();
        assert!(err.contains("0 databases"), "{err}");
        assert!(DatabaseMap::new(65).is_err());
        assert_eq!(
            DatabaseMap::new(1).unwrap().global(0, ShardIndex(7)),
            ShardIndex(7)
        );
    }
}

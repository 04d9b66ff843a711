//! Which shard a target belongs to.
//!
//! The default, [`StableHashStrategy`], hashes the target with 64-bit FNV-1a: a fixed,
//! documented function, so the same target maps to the same shard on every platform, build
//! and version (unlike `std`'s `DefaultHasher`, which may change between releases). Kinds that
//! must share shards (an order and its payment saga, say) are put in one *co-location group*:
//! the group's name is hashed instead of the kind, so equal ids of those kinds land together.
//!
//! A node records its strategy in the database ([`StrategyRecord`], the `shard_strategy`
//! setting) so that a tool without the application (the `shardbox` command line, a
//! standalone admin server) places rows as the application does — or refuses to:
//!
//! ```text
//!  Shardbox::build ─► ShardStrategy::record() ─► WorkRegistry::record_shard_strategy
//!  a tool ─► WorkRegistry::recorded_shard_strategy ─► StrategyRecord::strategy()
//!             StableHash { groups } ─► the same StableHashStrategy: rows placed as the app does
//!             Custom { name }       ─► None: the tool refuses to place rows by hashing
//! ```
//!
//! The record is data, not code: only the stock strategy can be rebuilt from it. An
//! application's own strategy is recorded by its type name, which tells an operator why a
//! tool refuses and what to use instead (the application's own calls).

pub use crate::model::hash::fnv1a64;
use crate::model::ids::ShardIndex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Maps a target (entity kind + id) to a shard.
pub trait ShardStrategy: Send + Sync + 'static {
    /// The shard of `target_kind`/`target_id` among `shard_count` shards (`shard_count >= 1`).
    fn shard_of(&self, target_kind: &str, target_id: &str, shard_count: u32) -> ShardIndex;

    /// How the database records this strategy (see [`StrategyRecord`]), so that tools without
    /// the application place rows as it does or refuse to. The default records an
    /// application's own strategy by its type name: tools then refuse to place rows by
    /// hashing, and the application's own calls (`Shardbox::requeue_dead_letters`,
    /// `Shardbox::catch_up`, `Shardbox::reshard`, the admin surface mounted in it) do it.
    fn record(&self) -> StrategyRecord {
        StrategyRecord::Custom {
            name: std::any::type_name::<Self>().to_owned(),
        }
    }
}

/// The default strategy: a stable FNV-1a hash of (kind or co-location group, id).
#[derive(Debug, Clone, Default)]
pub struct StableHashStrategy {
    groups: HashMap<String, String>,
}

impl StableHashStrategy {
    /// The strategy with no co-location groups.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `kinds` in one co-location group named `group`: a target of any of these kinds
    /// lands in the same shard as the targets of the other kinds with the same id.
    ///
    /// ```
    /// use shardbox_core::{ShardStrategy, StableHashStrategy};
    /// let s = StableHashStrategy::new().colocate("order", ["order", "payment"]);
    /// assert_eq!(s.shard_of("order", "o-1", 64), s.shard_of("payment", "o-1", 64));
    /// ```
    pub fn colocate<I, S>(mut self, group: &str, kinds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for kind in kinds {
            self.groups.insert(kind.into(), group.to_owned());
        }
        self
    }
}

impl ShardStrategy for StableHashStrategy {
    fn shard_of(&self, target_kind: &str, target_id: &str, shard_count: u32) -> ShardIndex {
        let key = self
            .groups
            .get(target_kind)
            .map(String::as_str)
            .unwrap_or(target_kind);
        let hash = fnv1a64(&[key.as_bytes(), target_id.as_bytes()]);
        ShardIndex((hash % u64::from(shard_count.max(1))) as u32)
    }

    fn record(&self) -> StrategyRecord {
        StrategyRecord::StableHash {
            groups: self
                .groups
                .iter()
                .map(|(kind, group)| (kind.clone(), group.clone()))
                .collect(),
        }
    }
}

/// A shard strategy as the database records it (the `shard_strategy` setting).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StrategyRecord {
    /// The stock [`StableHashStrategy`] with its co-location groups (kind → group name).
    StableHash {
        /// Each co-located kind and the group it hashes as.
        groups: BTreeMap<String, String>,
    },
    /// An application's own strategy, named by its Rust type: only the application can
    /// place rows by it.
    Custom {
        /// The strategy's type name (or, for a setting that could not be read, its text).
        name: String,
    },
}

impl StrategyRecord {
    /// The setting's text.
    pub fn to_setting(&self) -> String {
        // A map of strings and a plain enum: serializing cannot fail (say why we may ignore).
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// The record a setting's text holds. A text this version cannot read (written by a
    /// later one) is taken for a custom strategy: a tool then refuses to place rows rather
    /// than place them by a guess.
    pub fn from_setting(text: &str) -> Self {
        serde_json::from_str(text).unwrap_or_else(|_| StrategyRecord::Custom {
            name: format!("unreadable record {text:?}"),
        })
    }

    /// The strategy this record rebuilds, if a tool can rebuild it (the stock one), else
    /// `None`.
    pub fn strategy(&self) -> Option<Arc<dyn ShardStrategy>> {
        match self {
            StrategyRecord::StableHash { groups } => {
                let mut strategy = StableHashStrategy::new();
                for (kind, group) in groups {
                    strategy = strategy.colocate(group, [kind.as_str()]);
                }
                Some(Arc::new(strategy))
            }
            StrategyRecord::Custom { .. } => None,
        }
    }

    /// A short description for messages: `the stable hash` or `the custom strategy X`.
    pub fn describe(&self) -> String {
        match self {
            StrategyRecord::StableHash { groups } if groups.is_empty() => "the stable hash".into(),
            StrategyRecord::StableHash { groups } => {
                format!("the stable hash with {} co-located kinds", groups.len())
            }
            StrategyRecord::Custom { name } => format!("the application's own strategy `{name}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(&[b"foobar"]), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn fixed_targets_map_to_fixed_shards() {
        // Values computed independently (a Python FNV-1a). These literals pin the mapping: if they change, every deployed Inbox would be
        // re-sharded, so a change here is a breaking change of the data format.
        let s = StableHashStrategy::new();
        let got: Vec<u32> = ["acc-1", "acc-2", "acc-3", "user-42", ""]
            .iter()
            .map(|id| s.shard_of("account", id, 16).0)
            .collect();
        assert_eq!(got, vec![0, 9, 6, 7, 9]);
        assert_eq!(s.shard_of("account", "acc-1", 1024).0, 592);
        assert_eq!(s.shard_of("balances", "acc-1", 16).0, 12);
    }

    #[test]
    fn parts_are_separated() {
        assert_ne!(fnv1a64(&[b"ab", b"c"]), fnv1a64(&[b"a", b"bc"]));
    }

    #[test]
    fn colocated_kinds_share_shards_and_others_do_not_move() {
        let plain = StableHashStrategy::new();
        let s = StableHashStrategy::new().colocate("order", ["order", "payment"]);
        for id in ["o-1", "o-2", "o-3", "o-77"] {
            assert_eq!(s.shard_of("order", id, 64), s.shard_of("payment", id, 64));
            assert_eq!(s.shard_of("order", id, 64), plain.shard_of("order", id, 64));
            assert_eq!(
                s.shard_of("account", id, 64),
                plain.shard_of("account", id, 64)
            );
        }
    }

    #[test]
    fn every_shard_is_in_range_and_used() {
        let s = StableHashStrategy::new();
        let mut seen = [false; 16];
        for i in 0..1000 {
            let shard = s.shard_of("k", &format!("id-{i}"), 16).0 as usize;
            seen[shard] = true;
        }
        assert!(seen.iter().all(|x| *x));
        assert_eq!(
            s.shard_of("k", "x", 0).0,
            0,
            "zero shards is treated as one"
        );
    }

    struct EverythingInShardZero;
    impl ShardStrategy for EverythingInShardZero {
        fn shard_of(&self, _: &str, _: &str, _: u32) -> ShardIndex {
            ShardIndex(0)
        }
    }

    #[test]
    fn the_stable_hash_is_rebuilt_with_its_groups() {
        let original = StableHashStrategy::new().colocate("order", ["order", "payment"]);
        let record = StrategyRecord::from_setting(&original.record().to_setting());
        let rebuilt = record.strategy().expect("the stock strategy is rebuilt");
        for id in ["o-1", "o-2", "o-77"] {
            for kind in ["order", "payment", "account"] {
                assert_eq!(
                    rebuilt.shard_of(kind, id, 64),
                    original.shard_of(kind, id, 64),
                    "{kind}/{id}"
                );
            }
        }
        assert_eq!(
            StableHashStrategy::new().record(),
            StrategyRecord::StableHash {
                groups: BTreeMap::new()
            }
        );
    }

    #[test]
    fn a_custom_strategy_is_named_and_never_rebuilt() {
        let record = EverythingInShardZero.record();
        let StrategyRecord::Custom { name } = &record else {
            panic!("a custom strategy is recorded as custom: {record:?}");
        };
        assert!(name.contains("EverythingInShardZero"), "{name}");
        let read = StrategyRecord::from_setting(&record.to_setting());
        assert_eq!(read, record);
        assert!(read.strategy().is_none());
        assert!(read.describe().contains("EverythingInShardZero"));
    }

    #[test]
    fn an_unreadable_setting_is_never_taken_for_the_stable_hash() {
        let read = StrategyRecord::from_setting("{\"rendezvous\":{}}");
        assert!(read.strategy().is_none(), "{read:?}");
        assert!(read.describe().contains("rendezvous"));
    }
}

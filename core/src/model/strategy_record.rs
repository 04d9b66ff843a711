//! How an application's shard strategy is recorded in the database, so that a tool without
//! the application (the `shardbox` command line, a standalone admin server) places rows as
//! the application does — or refuses to.
//!
//! ```text
//!  Shardbox::build ─► ShardStrategy::record() ─► WorkRegistry::record_shard_strategy
//!                                                   (the `shard_strategy` setting)
//!  a tool ─► WorkRegistry::recorded_shard_strategy ─► StrategyRecord::strategy()
//!             StableHash { groups } ─► the same StableHashStrategy: rows placed as the app does
//!             Custom { name }       ─► None: the tool refuses to place rows by hashing
//! ```
//!
//! The record is data, not code: only the stock strategy can be rebuilt from it. An
//! application's own strategy is recorded by its type name, which tells an operator why a
//! tool refuses and what to use instead (the application's own calls).

use crate::model::strategy::{ShardStrategy, StableHashStrategy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

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

    struct EverythingInShardZero;
    impl ShardStrategy for EverythingInShardZero {
        fn shard_of(&self, _: &str, _: &str, _: u32) -> crate::model::ids::ShardIndex {
            crate::model::ids::ShardIndex(0)
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

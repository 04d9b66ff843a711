//! [`ConfigError`]: a configuration value rejected when the delivery is built.

use super::kind_list;
use crate::model::ids::{IdField, IdProblem, InvalidId};
use thiserror::Error;

/// A configuration value was rejected when the delivery was built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field holds a value outside its valid range.
    #[error("invalid configuration: `{field}` = {value}: {reason}")]
    Invalid {
        /// Name of the configuration field, as in the builder method.
        field: &'static str,
        /// The rejected value, printed.
        value: String,
        /// What the valid range is.
        reason: &'static str,
    },
    /// Something required was not given.
    #[error("invalid configuration: `{field}` is missing: {reason}")]
    Missing {
        /// Name of the missing piece.
        field: &'static str,
        /// How to give it.
        reason: &'static str,
    },
    /// The database's Inbox was set up with another shard count than this node's.
    #[error("the database's Inbox has {recorded} shards, but this node is configured with {configured}: start every node with .shards({recorded}). A node with another count would send one target's messages to two shards; to change the count, re-shard the running cluster (`shardbox reshard --shards N` or `Shardbox::reshard`), then configure the new count")]
    ShardCountMismatch {
        /// The count recorded in the database by the first node.
        recorded: u32,
        /// This node's configured count.
        configured: u32,
    },
    /// A setting keyed by entity kind (`kind_policy`, `kind_handler_timeout`) names a kind
    /// no entity registers: the setting would apply to nothing.
    #[error("`{setting}(\"{kind}\", …)` names entity kind `{kind}`, which is not registered (registered kinds: {}); fix the name, or register the entity (`.aggregate::<T>()`, `.projection::<T>()`, `.reactor(r)`, `.process_manager::<T>()`). `{setting}_of::<T, _>(…)` takes the type instead, checked by the compiler", kind_list(.registered))]
    UnknownKind {
        /// The builder method of the setting.
        setting: &'static str,
        /// The kind it names.
        kind: String,
        /// The kinds that are registered, sorted.
        registered: Vec<String>,
    },
    /// A kind action (pause, resume, run-time settings) names one of Shardbox's own kinds
    /// (see [`crate::INTERNAL_KIND_PREFIX`]).
    #[error("`{kind}` is one of Shardbox's own kinds (names starting `shardbox.`; it carries the catch-ups' steps): it cannot be paused, resumed or given settings. Steer a catch-up with `shardbox catch-up cancel` (or `Shardbox::cancel_catch_up`), or pause the projection it rebuilds")]
    InternalKind {
        /// The kind.
        kind: String,
    },
    /// The same entity kind was registered twice.
    #[error("entity kind `{kind}` is registered twice; give each entity type its own KIND")]
    DuplicateKind {
        /// The kind.
        kind: String,
    },
}

impl ConfigError {
    /// An id the configuration gives (the node id, an entity `KIND`) refused by the id rules
    /// when the delivery is built, naming `field` as the user wrote it.
    pub fn invalid_id(e: InvalidId, field: &'static str, value: &str) -> ConfigError {
        let reason = match (e.problem, e.field) {
            (IdProblem::Empty, _) => "must not be empty",
            (IdProblem::TooLong { .. }, IdField::NodeId) => {
                "must be at most 128 bytes (MAX_NODE_ID_BYTES)"
            }
            (IdProblem::TooLong { .. }, _) => {
                "must be at most 512 bytes (MAX_ID_BYTES, the limit of every id)"
            }
            (IdProblem::Nul { .. }, _) => {
                "must not contain a NUL byte (PostgreSQL text cannot store one)"
            }
        };
        ConfigError::Invalid {
            field,
            value: format!("{value:?}"),
            reason,
        }
    }
}

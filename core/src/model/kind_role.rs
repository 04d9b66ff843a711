//! What a registered entity kind is — aggregate, projection, reactor or process manager — as
//! the nodes record it in the membership, so that a tool without the application (the CLI,
//! the admin surface) can tell which kinds the running nodes serve.
//!
//! ```text
//!  EntityRegistry ─► registered_kinds() ─► NodeSeat ─► every membership beat
//!     ─► shardbox_nodes.kinds (JSON) ─► Member::kinds ─► e.g. a catch-up start's check
//! ```
//!
//! Plain data; the stored form is a JSON array of `{"kind": …, "role": …}`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The role of an entity kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KindRole {
    /// Takes commands, keeps state, emits events.
    Aggregate,
    /// Follows events into state (a read model); rebuilt by a catch-up.
    Projection,
    /// Follows events, keeps no state, sends commands.
    Reactor,
    /// Follows events and takes its own commands, keeps state (a saga).
    ProcessManager,
}

impl KindRole {
    /// The role of a kind that takes commands or not, subscribes to events or not, and keeps
    /// state or not: exactly the four shapes of the stock handlers. A kind that takes
    /// commands and subscribes to events is a process manager; commands alone, an aggregate;
    /// events with state, a projection; events without, a reactor.
    pub fn of(takes_commands: bool, follows_events: bool, stateful: bool) -> KindRole {
        match (takes_commands, follows_events, stateful) {
            (true, true, _) => KindRole::ProcessManager,
            (true, false, _) => KindRole::Aggregate,
            (false, _, true) => KindRole::Projection,
            (false, _, false) => KindRole::Reactor,
        }
    }

    /// Its name in the stored form and in messages.
    pub fn as_str(&self) -> &'static str {
        match self {
            KindRole::Aggregate => "aggregate",
            KindRole::Projection => "projection",
            KindRole::Reactor => "reactor",
            KindRole::ProcessManager => "process_manager",
        }
    }
}

impl fmt::Display for KindRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The prefix of the kinds Shardbox registers for its own work (today the catch-up's ticks,
/// [`crate::catch_up::TICK_KIND`]). The operator views leave them out (the kinds list, the
/// by-kind counts) and the kind actions refuse them: pausing one would stall every
/// catch-up, and none of them has settings an operator should change.
pub const INTERNAL_KIND_PREFIX: &str = "shardbox.";

/// Whether `kind` is one of Shardbox's own (see [`INTERNAL_KIND_PREFIX`]).
///
/// ```
/// assert!(shardbox_core::is_internal_kind(shardbox_core::catch_up::TICK_KIND));
/// assert!(!shardbox_core::is_internal_kind("account"));
/// ```
pub fn is_internal_kind(kind: &str) -> bool {
    kind.starts_with(INTERNAL_KIND_PREFIX)
}

/// One kind a node has registered, and its role.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RegisteredKind {
    /// The kind's stable name (`KIND`).
    pub kind: String,
    /// What it is.
    pub role: KindRole,
}

/// The stored form of `kinds`: a JSON array.
pub fn encode_kinds(kinds: &[RegisteredKind]) -> String {
    // A list of plain structs of strings always serializes; the fallback is never taken.
    serde_json::to_string(kinds).unwrap_or_else(|_| "[]".to_owned())
}

/// Reads the stored form back: empty for an empty string (a row of a node from before kinds
/// were recorded); `Err` names what is wrong.
pub fn decode_kinds(stored: &str) -> Result<Vec<RegisteredKind>, String> {
    if stored.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(stored).map_err(|e| format!("registered kinds {stored:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_follows_the_handlers_shape() {
        assert_eq!(KindRole::of(true, false, true), KindRole::Aggregate);
        assert_eq!(KindRole::of(false, true, true), KindRole::Projection);
        assert_eq!(KindRole::of(false, true, false), KindRole::Reactor);
        assert_eq!(KindRole::of(true, true, true), KindRole::ProcessManager);
    }

    #[test]
    fn kinds_round_trip_through_their_stored_form() {
        let kinds = vec![
            RegisteredKind {
                kind: "balance".into(),
                role: KindRole::Projection,
            },
            RegisteredKind {
                kind: "order-fulfilment".into(),
                role: KindRole::ProcessManager,
            },
        ];
        let stored = encode_kinds(&kinds);
        assert_eq!(
            stored,
            r#"[{"kind":"balance","role":"projection"},{"kind":"order-fulfilment","role":"process_manager"}]"#
        );
        assert_eq!(decode_kinds(&stored), Ok(kinds));
        assert_eq!(decode_kinds(""), Ok(vec![]));
        assert!(decode_kinds("{").unwrap_err().contains("registered kinds"));
    }
}

//! What needs an operator's attention, decided once from a status: `shardbox status` prints
//! each as an `attention:` line, the dashboard as its banner, `GET /api/status` serves them
//! (`attention`), so the three say the same.
//!
//! ```text
//!  Status ─► re-sharding in progress            (delivery pauses until it switches)
//!         ─► dead letters > 0                   shardbox dead-letters list
//!         ─► blocked targets > 0                shardbox blocked list
//!         ─► rows pending, no live node and no lease held
//!         ─► the oldest due row waits past SLOW_LAG_MS
//! ```
//!
//! Pure: no I/O, tested alone below.

use crate::views::since::human;
use crate::views::status::{DepthView, NodeView, ShardView};
use serde::Serialize;

/// Lag past which the oldest due message asks for attention.
pub const SLOW_LAG_MS: i64 = 60_000;

/// One thing that needs attention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attention {
    /// What it is about, for scripts: `resharding`, `dead_letters`, `blocked_targets`,
    /// `no_node`, `slow`.
    pub topic: &'static str,
    /// What needs attention, in words.
    pub message: String,
    /// The `shardbox` command that shows more, if one does.
    pub command: Option<&'static str>,
}

impl Attention {
    /// The line `shardbox status` prints (without its `attention: ` prefix).
    pub fn line(&self) -> String {
        match self.command {
            Some(c) => format!("{}: `{c}`", self.message),
            None => self.message.clone(),
        }
    }
}

/// Nodes alive in the membership table (the summary's "live nodes"; the dashboard's node
/// count).
pub fn live_nodes(nodes: &[NodeView]) -> usize {
    nodes.iter().filter(|n| n.member).count()
}

/// Shards whose lease a node holds now.
pub fn leases_held(shards: &[ShardView]) -> usize {
    shards.iter().filter(|s| s.held).count()
}

/// The facts attention is decided from.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The depths of all shards added up.
    pub totals: &'a DepthView,
    /// Live nodes.
    pub live_nodes: usize,
    /// Leases held.
    pub leases_held: usize,
    /// Dead letters stored.
    pub dead_letters: u64,
    /// Blocked targets.
    pub blocked_targets: u64,
    /// A re-sharding in progress: to how many shards, by whom.
    pub resharding: Option<(u32, &'a str)>,
}

/// What needs attention, most urgent first; empty when nothing does.
pub fn of(f: Facts<'_>) -> Vec<Attention> {
    let t = f.totals;
    let mut out = Vec::new();
    if let Some((to, by)) = f.resharding {
        out.push(Attention {
            topic: "resharding",
            message: format!(
                "re-sharding to {to} shards in progress (by {by}): delivery pauses until it switches"
            ),
            command: None,
        });
    }
    if f.dead_letters > 0 {
        out.push(Attention {
            topic: "dead_letters",
            message: format!("{} dead letter(s)", f.dead_letters),
            command: Some("shardbox dead-letters list"),
        });
    }
    if f.blocked_targets > 0 {
        out.push(Attention {
            topic: "blocked_targets",
            message: format!("{} blocked target(s)", f.blocked_targets),
            command: Some("shardbox blocked list"),
        });
    }
    if t.pending() > 0 && f.live_nodes == 0 && f.leases_held == 0 {
        out.push(Attention {
            topic: "no_node",
            message: "messages wait but no node is running to deliver them".into(),
            command: None,
        });
    }
    if t.due > 0 && t.lag_ms > SLOW_LAG_MS {
        out.push(Attention {
            topic: "slow",
            message: format!(
                "the oldest due message waits for {}",
                human(chrono::TimeDelta::milliseconds(t.lag_ms))
            ),
            command: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(due: u64, lag_ms: i64) -> DepthView {
        DepthView {
            due,
            delayed: 0,
            retrying: 0,
            parked: 0,
            replay: 0,
            blocked: 0,
            delivered: 0,
            oldest_due_at: None,
            lag_ms,
        }
    }

    fn facts(totals: &DepthView) -> Facts<'_> {
        Facts {
            totals,
            live_nodes: 1,
            leases_held: 0,
            dead_letters: 0,
            blocked_targets: 0,
            resharding: None,
        }
    }

    #[test]
    fn nothing_needs_attention_on_a_quiet_system() {
        assert_eq!(of(facts(&depth(0, 0))), vec![]);
        assert_eq!(
            of(facts(&depth(5, SLOW_LAG_MS))),
            vec![],
            "not past the lag"
        );
    }

    #[test]
    fn each_fact_is_said_once_with_its_command() {
        let totals = depth(2, 90_000);
        let said = of(Facts {
            live_nodes: 0,
            dead_letters: 3,
            blocked_targets: 1,
            resharding: Some((8, "op-1")),
            ..facts(&totals)
        });
        let lines: Vec<String> = said.iter().map(Attention::line).collect();
        assert_eq!(
            lines,
            [
                "re-sharding to 8 shards in progress (by op-1): delivery pauses until it switches",
                "3 dead letter(s): `shardbox dead-letters list`",
                "1 blocked target(s): `shardbox blocked list`",
                "messages wait but no node is running to deliver them",
                "the oldest due message waits for 1m30s",
            ]
        );
    }

    #[test]
    fn a_held_lease_counts_as_a_node_running() {
        let totals = depth(2, 0);
        let f = Facts {
            live_nodes: 0,
            leases_held: 1,
            ..facts(&totals)
        };
        assert_eq!(of(f), vec![]);
    }
}

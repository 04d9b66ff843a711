//! The node's relay task, on a storage over several databases: it runs its relays round
//! after round while rows come, and otherwise waits for this node's next stage that wrote
//! outbox rows, or a tenth of a second (other nodes' stages), or the stop. Its relays are
//! the pairs the membership places on it (see [`Placement`]), read again every few seconds.
//!
//! ```text
//!  loop: its pairs' relay round ─► copied rows' shards ─► the node's observer (their workers wake)
//!        a pair failed (a database down) ─► warned once, retried every round until it copies
//!        a batch full ─► at once; rows, none full ─► 20 ms (rows gather into batches)
//!        nothing to copy ─► wait: outbox_written | 100 ms | stop
//! ```

use crate::runner::env::DeliveryEnv;
use crate::runner::tasks::stopped;
use crate::storage::ShardObserver;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long the task waits for a stage of this node before it looks at the outboxes again.
const RELAY_POLL: Duration = Duration::from_millis(100);

/// How long the task lets rows gather after a round that copied less than a batch.
const RELAY_GATHER: Duration = Duration::from_millis(20);

/// How often the task reads the membership to learn its pairs.
const PLACEMENT_EVERY: Duration = Duration::from_secs(2);

/// Which relay pairs a node runs: pair k (in (from, to) order, from ≠ to) goes to the live
/// member k mod M of the M members sorted by node id. Every node computes the same from the
/// same membership; while it changes, a pair may run on two nodes (safe: each copy is a
/// compare-and-set) or, for a moment, on none (its rows wait for the next placement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// This node's position among the members, and how many there are; `None`: run every
    /// pair (the membership could not be read, or does not list this node yet).
    slot: Option<(usize, usize)>,
    databases: u32,
}

impl Placement {
    /// The placement of `me` among `members` (node ids), over `databases` databases.
    pub(crate) fn new(me: &str, members: &[String], databases: u32) -> Self {
        let mut sorted: Vec<&String> = members.iter().collect();
        sorted.sort();
        sorted.dedup();
        let slot = sorted
            .iter()
            .position(|m| m.as_str() == me)
            .map(|i| (i, sorted.len()));
        Placement { slot, databases }
    }

    /// Whether this node runs the relay from `from` to `to`.
    pub(crate) fn runs(&self, from: u32, to: u32) -> bool {
        let Some((me, of)) = self.slot else {
            return true;
        };
        let n = self.databases as usize;
        let k = from as usize * n.saturating_sub(1) + (to as usize - usize::from(to > from));
        k % of == me
    }
}

/// Runs the relays of `env`'s storage until `stop` (returns at once on one database).
pub(super) async fn relay_outboxes(
    env: Arc<DeliveryEnv>,
    observer: Arc<dyn ShardObserver>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(dbs) = crate::databases::Databases::of(env.storage.as_ref()) else {
        return;
    };
    let node = env.config.node_id.0.clone();
    let databases = dbs.map().count();
    let mut failing: BTreeSet<(u32, u32)> = BTreeSet::new();
    let mut placement = Placement::new(&node, &[], databases);
    let mut placed_at: Option<std::time::Instant> = None;
    loop {
        if *stop.borrow() || env.is_stopping() {
            return;
        }
        if placed_at.is_none_or(|at| at.elapsed() >= PLACEMENT_EVERY) {
            placed_at = Some(std::time::Instant::now());
            let members = env.storage.members(env.clock.now()).await;
            let ids: Vec<String> = match members {
                // Tools (the CLI, an admin server) beat without kinds and run no relays.
                Ok(m) => m
                    .into_iter()
                    .filter(|m| !m.kinds.is_empty())
                    .map(|m| m.node_id.0)
                    .collect(),
                Err(_) => Vec::new(),
            };
            let next = Placement::new(&node, &ids, databases);
            if next != placement {
                tracing::debug!(?next, "relay pairs placed anew");
                placement = next;
            }
        }
        let round = dbs
            .relay_round_of(|from, to| placement.runs(from, to))
            .await;
        if !round.shards.is_empty() {
            observer.on_write(&round.shards);
        }
        if round.copied > 0 {
            metrics::counter!("shardbox_relayed_rows_total", "node" => node.clone())
                .increment(round.copied as u64);
        }
        let failed: BTreeSet<(u32, u32)> = round.failed.iter().map(|(f, t, _)| (*f, *t)).collect();
        for (from, to, error) in &round.failed {
            if !failing.contains(&(*from, *to)) {
                tracing::warn!(from, to, %error, "relay step failed; retrying every round until it copies again");
            }
        }
        for (from, to) in failing.difference(&failed) {
            tracing::info!(from, to, "relay copying again");
        }
        failing = failed;
        if round.full {
            continue;
        }
        if round.busy() {
            // Rows came but no batch was full: let a few more stages commit theirs, so that
            // a steady trickle is copied in batches rather than a transaction a row.
            tokio::select! {
                biased;
                _ = stopped(&mut stop) => return,
                _ = tokio::time::sleep(RELAY_GATHER) => {}
            }
            continue;
        }
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            _ = dbs.outbox_written() => {}
            _ = tokio::time::sleep(RELAY_POLL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_pair_runs_on_exactly_one_member_and_unknown_membership_runs_all() {
        let members = ids(&["node-c", "node-a", "node-b"]);
        for databases in [2u32, 3, 4] {
            let placements: Vec<Placement> = members
                .iter()
                .map(|m| Placement::new(m, &members, databases))
                .collect();
            let mut per_node = vec![0; members.len()];
            for from in 0..databases {
                for to in (0..databases).filter(|t| *t != from) {
                    let runners: Vec<usize> = (0..members.len())
                        .filter(|i| placements[*i].runs(from, to))
                        .collect();
                    assert_eq!(runners.len(), 1, "{databases} dbs: pair {from}->{to}");
                    per_node[runners[0]] += 1;
                }
            }
            let pairs = (databases * (databases - 1)) as usize;
            assert!(per_node.iter().all(|n| *n >= pairs / 3), "{per_node:?}");
        }
        let alone = Placement::new("node-z", &members, 3);
        assert!((0..3).all(|f| (0..3).filter(|t| *t != f).all(|t| alone.runs(f, t))));
    }
}

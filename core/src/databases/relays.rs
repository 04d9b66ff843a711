//! The relays between the databases of a [`Databases`] storage: one [`Relay`] per ordered
//! pair, each copying its source's outbox rows for its target in id order (see
//! `cluster::relay`), and the signal that a stage just wrote outbox rows.
//!
//! ```text
//!  relay_round ─► every pair (from ≠ to): one Relay::step ─► copied rows' shards (global)
//!  a node's relay task: round; rows copied? round again : wait for outbox_written or the poll
//! ```
//!
//! A node runs the pairs the membership gives it (`runner/local/relays.rs`: pair k of the
//! N·(N − 1) goes to the live member k mod M, in node-id order). Safety does not rest on that
//! placement: the compare-and-set of each copy keeps two relays of one pair from copying a
//! row twice (tests/relay_kill.rs races them), so while members come and go, or when the
//! membership cannot be read, a pair run twice costs only a wasted read.

use super::Databases;
use crate::cluster::relay::Relay;
use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::storage::Storage;
use std::sync::Arc;

/// What one round of every relay did.
#[derive(Debug, Default)]
pub struct RelayRound {
    /// Rows written into target Inboxes.
    pub copied: usize,
    /// Rows a target already had.
    pub duplicates: usize,
    /// Steps another relay beat to the copy.
    pub raced: usize,
    /// Outbox rows deleted after their copy.
    pub trimmed: usize,
    /// A step copied a whole batch: its outbox may hold more at once.
    pub full: bool,
    /// The (global) shards that received rows, sorted, each once.
    pub shards: Vec<ShardIndex>,
    /// The pairs whose step failed (a database unreachable), with the error.
    pub failed: Vec<(u32, u32, StorageError)>,
}

impl RelayRound {
    /// Whether another round at once may find more (a step copied or lost a race).
    pub fn busy(&self) -> bool {
        self.copied > 0 || self.duplicates > 0 || self.raced > 0 || self.trimmed > 0
    }
}

impl Databases {
    /// The relay of every ordered pair of databases.
    pub(super) fn make_relays(dbs: &[Arc<dyn super::Database>], batch: usize) -> Vec<Relay> {
        let mut relays = Vec::new();
        for (from, source) in dbs.iter().enumerate() {
            for (to, target) in dbs.iter().enumerate() {
                if from != to {
                    let source: Arc<dyn Storage> = source.clone();
                    let target: Arc<dyn Storage> = target.clone();
                    relays.push(Relay::new(source, from as u32, target, to as u32, batch));
                }
            }
        }
        relays
    }

    /// One step of every relay.
    pub async fn relay_round(&self) -> RelayRound {
        self.relay_round_of(|_, _| true).await
    }

    /// One step of the relays of the pairs (from, to) `mine` picks.
    pub async fn relay_round_of(&self, mine: impl Fn(u32, u32) -> bool) -> RelayRound {
        let mut round = RelayRound::default();
        for relay in &self.relays {
            let (from, to) = relay.pair();
            if !mine(from, to) {
                continue;
            }
            match relay.step().await {
                Ok(step) => {
                    round.copied += step.copied;
                    round.duplicates += step.duplicates;
                    round.raced += usize::from(step.raced);
                    round.trimmed += step.trimmed;
                    round.full |= step.copied + step.duplicates >= relay.batch();
                    round
                        .shards
                        .extend(self.map.shards_to_global(to, step.shards));
                }
                Err(e) => round.failed.push((from, to, e)),
            }
        }
        round.shards.sort_unstable();
        round.shards.dedup();
        round
    }

    /// Copies every outbox row there is, round after round, until a round finds nothing;
    /// returns how many rows were copied. The first failure is returned.
    pub async fn drain_outboxes(&self) -> Result<usize, StorageError> {
        let mut copied = 0;
        loop {
            let mut round = self.relay_round().await;
            if let Some((_, _, e)) = round.failed.pop() {
                return Err(e);
            }
            copied += round.copied;
            if !round.busy() {
                return Ok(copied);
            }
        }
    }

    /// Resolves once a stage committed outbox rows through this storage since the last
    /// wake-up (or at once if one did meanwhile): what a relay task waits on beside its poll.
    pub async fn outbox_written(&self) {
        self.outbox_written.notified().await;
    }
}

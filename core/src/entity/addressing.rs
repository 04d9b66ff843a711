//! How a message finds its shard: the application's shard strategy and the Inbox's shard
//! count as this process last learned it.
//!
//! ```text
//!  address(message) ─► strategy.shard_of(kind, id, shard_count) ─► InboxWrite { shard, … }
//!  addressed(write) ─► write by this count ─► refused: ShardCountChanged { recorded }
//!                                              └─► learn `recorded`, address again
//! ```
//!
//! A running application's [`EntityRegistry`](crate::EntityRegistry) holds one; an operator
//! tool without the application builds one from what the database records (see
//! `operator::placement`). Every writer outside a stage — the send path, a catch-up start, a
//! requeue — addresses through it, so all of them follow a re-sharding alike.

use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::model::message::{InboxWrite, NewMessage};
use crate::model::strategy::ShardStrategy;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// How many times [`Addressing::addressed`] addresses a write anew.
const READDRESS_LIMIT: usize = 3;

/// A shard strategy and the shard count it places by.
pub struct Addressing {
    strategy: Arc<dyn ShardStrategy>,
    /// The Inbox's shard count as this process last learned it: set when built, and again
    /// when a re-sharding is seen (see `cluster::reshard`).
    shard_count: AtomicU32,
}

impl std::fmt::Debug for Addressing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Addressing")
            .field("strategy", &self.strategy.record())
            .field("shard_count", &self.shard_count())
            .finish()
    }
}

impl Addressing {
    /// Places targets by `strategy` among `shard_count` shards.
    pub fn new(strategy: Arc<dyn ShardStrategy>, shard_count: u32) -> Self {
        Addressing {
            strategy,
            shard_count: AtomicU32::new(shard_count),
        }
    }

    /// Number of shards.
    pub fn shard_count(&self) -> u32 {
        self.shard_count.load(Ordering::Acquire)
    }

    /// Learns that the Inbox has `shard_count` shards now (it was re-sharded): rows addressed
    /// from now on go by it. Returns whether the count changed.
    pub fn set_shard_count(&self, shard_count: u32) -> bool {
        self.shard_count.swap(shard_count, Ordering::AcqRel) != shard_count
    }

    /// The shard strategy.
    pub fn strategy(&self) -> &Arc<dyn ShardStrategy> {
        &self.strategy
    }

    /// The shard of a target.
    pub fn shard_of(&self, target_kind: &str, target_id: &str) -> ShardIndex {
        self.strategy
            .shard_of(target_kind, target_id, self.shard_count())
    }

    /// Runs `attempt` — a write that addresses rows by the shard count it is given and is
    /// refused whole ([`StorageError::ShardCountChanged`]) if another count is recorded — with
    /// this count; after such a refusal, learns the recorded count and runs it again with
    /// that one. The one way every writer outside a stage (the send path, a catch-up start, a
    /// requeue) follows a re-sharding without its caller seeing an error. A count changes
    /// only by an operator's re-sharding, so a second change within one write is all but
    /// impossible: after three the refusal is returned.
    pub async fn addressed<T, F, Fut>(&self, mut attempt: F) -> Result<T, StorageError>
    where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, StorageError>>,
    {
        let mut readdressed = 0;
        loop {
            match attempt(self.shard_count()).await {
                Err(StorageError::ShardCountChanged { expected, recorded })
                    if readdressed < READDRESS_LIMIT =>
                {
                    readdressed += 1;
                    self.set_shard_count(recorded);
                    tracing::info!(
                        from = expected,
                        to = recorded,
                        "the Inbox was re-sharded; addressing the write anew"
                    );
                }
                done => return done,
            }
        }
    }

    /// Addresses `rows` by `shard_count` shards (the count a write is about to claim, see
    /// [`Addressing::addressed`]).
    pub fn address_by(&self, rows: &mut [InboxWrite], shard_count: u32) {
        for row in rows {
            let m = &row.message;
            row.shard = self
                .strategy
                .shard_of(&m.target_kind, &m.target_id, shard_count);
        }
    }

    /// Addresses a message to its shard.
    pub fn address(&self, message: NewMessage) -> InboxWrite {
        InboxWrite {
            shard: self.shard_of(&message.target_kind, &message.target_id),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::strategy::StableHashStrategy;

    #[tokio::test]
    async fn a_refused_write_is_addressed_again_by_the_recorded_count() {
        let addressing = Addressing::new(Arc::new(StableHashStrategy::new()), 4);
        let mut counts = Vec::new();
        let done = addressing
            .addressed(|n| {
                counts.push(n);
                async move {
                    if n == 4 {
                        Err(StorageError::ShardCountChanged {
                            expected: 4,
                            recorded: 8,
                        })
                    } else {
                        Ok(n)
                    }
                }
            })
            .await
            .expect("written by the new count");
        assert_eq!((done, counts), (8, vec![4, 8]));
        assert_eq!(addressing.shard_count(), 8);
    }

    #[tokio::test]
    async fn a_count_that_keeps_changing_is_refused_after_three_tries() {
        let addressing = Addressing::new(Arc::new(StableHashStrategy::new()), 1);
        let mut tries = 0;
        let refused = addressing
            .addressed(|n| {
                tries += 1;
                async move {
                    Err::<(), _>(StorageError::ShardCountChanged {
                        expected: n,
                        recorded: n + 1,
                    })
                }
            })
            .await;
        assert!(matches!(
            refused,
            Err(StorageError::ShardCountChanged { .. })
        ));
        assert_eq!(tries, 1 + READDRESS_LIMIT);
    }
}

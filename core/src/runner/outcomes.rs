//! Waking the senders that wait for a command's outcome.
//!
//! ```text
//!  stage commit with outcomes in shard S ─► DeliveryEnv::outcomes_decided(S) ─┐
//!  other node's commit ─► NOTIFY ─► this node's WriteListener::on_outcomes(S) ┤
//!                                                                             ▼
//!                              OutcomeSignals: shard S's generation + 1 (only if someone waits)
//!  waiter: subscribe to S ─► read the outcome ─► pending? wait for S to move (or a slow poll)
//! ```
//!
//! A waiter subscribes before it reads, so a commit between its read and its wait still
//! wakes it. A signal only says "read again": the storage read decides, so a spurious or
//! missed signal costs a read or a poll interval, never a wrong answer. With nobody waiting
//! a commit costs one atomic read per shard it decided outcomes in.

use crate::model::ids::ShardIndex;
use crate::storage::{ListenerHandle, ShardObserver};
use std::sync::{Mutex, OnceLock};
use tokio::sync::watch;

/// One generation counter per shard, bumped when outcomes of that shard were committed.
#[derive(Debug)]
pub struct OutcomeSignals {
    shards: Vec<watch::Sender<u64>>,
    /// The listener that hears other nodes' outcomes, started by the first waiter (if the
    /// storage has one); kept for the life of the environment.
    listener: OnceLock<Mutex<Option<ListenerHandle>>>,
}

impl OutcomeSignals {
    /// Signals for shards `0..shard_count`.
    pub fn new(shard_count: u32) -> Self {
        OutcomeSignals {
            shards: (0..shard_count).map(|_| watch::channel(0).0).collect(),
            listener: OnceLock::new(),
        }
    }

    /// A receiver that sees every signal of `shard` from now on (`None` for a shard out of
    /// range).
    pub fn subscribe(&self, shard: ShardIndex) -> Option<watch::Receiver<u64>> {
        self.slot(shard).map(watch::Sender::subscribe)
    }

    /// The signal of `shard`. Shards share signals modulo the count this node started with,
    /// so a re-sharding to more shards needs no new ones: a shared signal only wakes a waiter
    /// for a read that finds nothing new.
    fn slot(&self, shard: ShardIndex) -> Option<&watch::Sender<u64>> {
        let n = self.shards.len();
        (n > 0).then(|| &self.shards[shard.0 as usize % n])
    }

    /// Outcomes of `shards` were committed: wakes their waiters.
    pub fn decided(&self, shards: &[ShardIndex]) {
        for shard in shards {
            if let Some(tx) = self.slot(*shard) {
                if tx.receiver_count() > 0 {
                    tx.send_modify(|g| *g = g.wrapping_add(1));
                }
            }
        }
    }

    /// Wakes every waiter (outcomes may have been missed).
    fn all(&self) {
        for tx in &self.shards {
            if tx.receiver_count() > 0 {
                tx.send_modify(|g| *g = g.wrapping_add(1));
            }
        }
    }

    /// Runs `start` once, keeping the listener it returns for the life of the signals.
    pub(crate) fn listen_once(&self, start: impl FnOnce() -> Option<ListenerHandle>) {
        self.listener.get_or_init(|| Mutex::new(start()));
    }
}

impl ShardObserver for OutcomeSignals {
    fn on_write(&self, _shards: &[ShardIndex]) {}

    fn on_missed_writes(&self) {
        self.all();
    }

    fn on_outcomes(&self, shards: &[ShardIndex]) {
        self.decided(shards);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_sees_the_signals_of_its_shard_only() {
        let signals = OutcomeSignals::new(4);
        let mut rx = signals.subscribe(ShardIndex(2)).expect("in range");
        // A shard beyond the count the node started with (the Inbox was re-sharded to more)
        // shares a signal modulo that count: a spurious wake costs a read, never an answer.
        let beyond = signals.subscribe(ShardIndex(6)).expect("shares shard 2's");
        signals.decided(&[ShardIndex(1)]);
        assert!(!rx.has_changed().unwrap(), "another shard's signal");
        assert!(!beyond.has_changed().unwrap(), "another shard's signal");
        signals.on_outcomes(&[ShardIndex(2)]);
        assert!(rx.has_changed().unwrap());
        assert!(beyond.has_changed().unwrap());
        rx.borrow_and_update();
        signals.on_missed_writes();
        assert!(rx.has_changed().unwrap(), "missed writes wake everyone");
    }
}

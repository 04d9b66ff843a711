//! The node's clock read off the storage's clock, so that leases and membership beats are judged on
//! one time line whatever the nodes' clocks say.
//!
//! ```text
//!  node clock ──► + offset ──► StorageClock::now   (every lease end, pick-up, beat…)
//!                    ▲
//!   sync: offset = storage clock − node clock at the middle of the round trip
//!         (at build, then before every membership beat: once a poll interval)
//! ```
//!
//! A lease's end is written by one node and judged by others: `lease_until = now + lease`
//! when picked up or renewed, "free" when `lease_until <= now` at another node's pick-up.
//! With each node's own clock, a node 30 s ahead takes every live lease (to it they have all
//! ended) and a node 30 s behind writes leases that ended before they were written. Reading
//! every node's time off the database's clock (the server's `clock_timestamp()` on
//! PostgreSQL, the machine's clock on SQLite) leaves one clock: a node's skew cancels out,
//! and what is left is half a round trip to the database plus the node's drift over one
//! poll interval.
//!
//! Not corrected: a [`Clock::is_manual`] clock (it is the simulated world's time, the
//! database's included), and a store with no clock of its own (the memory backend).
//! The offset moves only by a real change (more than [`JITTER`]), so that round-trip noise
//! does not move time back and forth.

use crate::model::clock::Clock;
use crate::model::error::StorageError;
use crate::storage::WorkRegistry;
use chrono::{DateTime, Duration, Utc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Offset changes smaller than this are round-trip noise and kept out of the clock.
pub const JITTER: Duration = Duration::milliseconds(20);

/// A node's clock plus the offset to the storage's clock (see the module doc).
pub struct StorageClock {
    node: Arc<dyn Clock>,
    /// Storage clock minus node clock, µs.
    offset_micros: AtomicI64,
}

impl StorageClock {
    /// `node` with no offset until the first [`StorageClock::sync`].
    pub fn new(node: Arc<dyn Clock>) -> Self {
        StorageClock {
            node,
            offset_micros: AtomicI64::new(0),
        }
    }

    /// The offset now applied: storage clock minus node clock.
    pub fn offset(&self) -> Duration {
        Duration::microseconds(self.offset_micros.load(Ordering::Relaxed))
    }

    /// Reads the storage's clock and sets the offset to it (unless it moved by less than
    /// [`JITTER`], or the store has no clock). Returns the offset applied.
    pub async fn sync<S: WorkRegistry + ?Sized>(
        &self,
        storage: &S,
    ) -> Result<Duration, StorageError> {
        let before = self.node.now();
        let Some(storage_now) = storage.clock_now().await? else {
            return Ok(self.offset());
        };
        let after = self.node.now();
        let measured = offset_of(before, storage_now, after);
        Ok(self.apply(measured))
    }

    /// Sets the offset to `measured` unless it is within [`JITTER`] of the current one.
    fn apply(&self, measured: Duration) -> Duration {
        let current = self.offset();
        if (measured - current).abs() > JITTER {
            let us = measured.num_microseconds().unwrap_or(0);
            self.offset_micros.store(us, Ordering::Relaxed);
            tracing::info!(
                offset_ms = measured.num_milliseconds(),
                "node clock read off the storage's clock"
            );
            return measured;
        }
        current
    }
}

/// The storage clock minus the node clock, with the storage read at `storage_now` between
/// node readings `before` and `after`: taken at the middle of the round trip.
fn offset_of(before: DateTime<Utc>, storage_now: DateTime<Utc>, after: DateTime<Utc>) -> Duration {
    let middle = before + (after - before) / 2;
    storage_now - middle
}

impl Clock for StorageClock {
    fn now(&self) -> DateTime<Utc> {
        self.node.now() + self.offset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStorage;
    use crate::model::clock::ManualClock;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::milliseconds(ms)
    }

    #[test]
    fn offset_is_taken_at_the_middle_of_the_round_trip() {
        // A node 30 s ahead: it read 30.000 s and 30.010 s around the storage's 0.005 s.
        assert_eq!(
            offset_of(t(30_000), t(5), t(30_010)),
            Duration::milliseconds(-30_000)
        );
        assert_eq!(
            offset_of(t(-30_000), t(0), t(-30_000)),
            Duration::seconds(30)
        );
    }

    #[test]
    fn a_skewed_node_reads_the_storage_time_and_noise_does_not_move_it() {
        let node = Arc::new(ManualClock::new(t(30_000)));
        let clock = StorageClock::new(node.clone());
        assert_eq!(clock.apply(Duration::seconds(-30)), Duration::seconds(-30));
        assert_eq!(clock.now(), t(0));
        // 5 ms of round-trip noise: kept out.
        assert_eq!(
            clock.apply(Duration::milliseconds(-29_995)),
            Duration::seconds(-30)
        );
        node.advance(Duration::seconds(1));
        assert_eq!(clock.now(), t(1_000));
        // The node's clock was stepped back 60 s: the next sync follows it.
        node.advance(Duration::seconds(-60));
        assert_eq!(clock.apply(Duration::seconds(30)), Duration::seconds(30));
        assert_eq!(clock.now(), t(1_000));
    }

    #[tokio::test]
    async fn a_store_without_a_clock_leaves_the_node_clock_as_it_is() {
        let node = Arc::new(ManualClock::new(t(0)));
        let clock = StorageClock::new(node);
        let offset = clock.sync(&MemoryStorage::new()).await.expect("sync");
        assert_eq!((offset, clock.now()), (Duration::zero(), t(0)));
    }
}

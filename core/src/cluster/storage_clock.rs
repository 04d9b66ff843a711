//! The node's clock read off the storage's clock, so that leases and membership beats are judged on
//! one time line whatever the nodes' clocks say.
//!
//! ```text
//!  node clock ──► + offset ──► StorageClock::now   (every lease end, pick-up, beat…)
//!                    ▲
//!   sync: SAMPLES round trips; the shortest one's
//!         offset = storage clock − node clock at the middle of the round trip
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
//! The error of one sample is at most half its round trip (the storage read its clock
//! somewhere within it), so a sync takes [`SAMPLES`] and keeps the shortest: one slow round
//! trip (a busy pool, a loaded server) no longer moves the clock by half of it. A sync whose
//! shortest round trip is over [`MAX_ROUND_TRIP`] is not applied (the offset stays, logged),
//! except the first one, when any offset is better than none; [`StorageClock::error`] is the
//! bound of the offset in force.
//!
//! Not corrected: a [`Clock::is_manual`] clock (it is the simulated world's time, the
//! database's included), and a store with no clock of its own (the memory backend).
//! The offset moves only by a real change (more than [`JITTER`]), so that round-trip noise
//! does not move time back and forth.

use crate::model::clock::Clock;
use crate::model::error::StorageError;
use crate::storage::WorkRegistry;
use chrono::{DateTime, Duration, Utc};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Offset changes smaller than this are round-trip noise and kept out of the clock.
pub const JITTER: Duration = Duration::milliseconds(20);

/// Round trips to the storage's clock per sync; the shortest is kept.
pub const SAMPLES: usize = 5;

/// A sync whose shortest round trip took longer is not applied (but the first): its error
/// could be up to half of it.
pub const MAX_ROUND_TRIP: Duration = Duration::milliseconds(200);

/// One reading of the storage's clock between two of the node's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// The node's clock before the read.
    pub before: DateTime<Utc>,
    /// The storage's clock, read somewhere in the round trip.
    pub storage: DateTime<Utc>,
    /// The node's clock after the read.
    pub after: DateTime<Utc>,
}

impl ClockSample {
    /// How long the read took on the node's clock.
    pub fn round_trip(&self) -> Duration {
        self.after - self.before
    }

    /// The storage clock minus the node clock, taken at the middle of the round trip; wrong
    /// by at most [`ClockSample::error`].
    pub fn offset(&self) -> Duration {
        let middle = self.before + self.round_trip() / 2;
        self.storage - middle
    }

    /// The bound of the offset's error: half the round trip.
    pub fn error(&self) -> Duration {
        self.round_trip() / 2
    }
}

/// The sample with the shortest round trip (the first of equals), if any.
pub fn best_sample(samples: &[ClockSample]) -> Option<ClockSample> {
    samples.iter().copied().min_by_key(ClockSample::round_trip)
}

/// A node's clock plus the offset to the storage's clock (see the module doc).
pub struct StorageClock {
    node: Arc<dyn Clock>,
    /// Storage clock minus node clock, µs.
    offset_micros: AtomicI64,
    /// The bound of the offset's error, µs; negative before the first sync applied one.
    error_micros: AtomicI64,
}

impl StorageClock {
    /// `node` with no offset until the first [`StorageClock::sync`].
    pub fn new(node: Arc<dyn Clock>) -> Self {
        StorageClock {
            node,
            offset_micros: AtomicI64::new(0),
            error_micros: AtomicI64::new(-1),
        }
    }

    /// The offset now applied: storage clock minus node clock.
    pub fn offset(&self) -> Duration {
        Duration::microseconds(self.offset_micros.load(Ordering::Relaxed))
    }

    /// The bound of the applied offset's error (half the round trip it was measured in),
    /// or `None` before the first sync.
    pub fn error(&self) -> Option<Duration> {
        let us = self.error_micros.load(Ordering::Relaxed);
        (us >= 0).then(|| Duration::microseconds(us))
    }

    /// Reads the storage's clock [`SAMPLES`] times and applies the offset of the shortest
    /// round trip (see [`StorageClock::apply`]); nothing for a store without a clock. Returns
    /// the offset in force.
    pub async fn sync<S: WorkRegistry + ?Sized>(
        &self,
        storage: &S,
    ) -> Result<Duration, StorageError> {
        self.sync_by(|| storage.clock_now()).await
    }

    /// [`StorageClock::sync`] with `read` reading the storage's clock (`None`: it has none).
    pub async fn sync_by<F, R>(&self, mut read: F) -> Result<Duration, StorageError>
    where
        F: FnMut() -> R,
        R: Future<Output = Result<Option<DateTime<Utc>>, StorageError>>,
    {
        let mut samples = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let before = self.node.now();
            let Some(storage_now) = read().await? else {
                return Ok(self.offset());
            };
            let after = self.node.now();
            samples.push(ClockSample {
                before,
                storage: storage_now,
                after,
            });
        }
        Ok(self.apply(&samples))
    }

    /// Applies the offset of the best of `samples` (the shortest round trip): kept out when
    /// that round trip is over [`MAX_ROUND_TRIP`] (unless no offset was applied yet), or when
    /// the offset moved by less than [`JITTER`]. Returns the offset in force.
    pub fn apply(&self, samples: &[ClockSample]) -> Duration {
        let current = self.offset();
        let Some(best) = best_sample(samples) else {
            return current;
        };
        let first = self.error().is_none();
        if best.round_trip() > MAX_ROUND_TRIP && !first {
            tracing::warn!(
                round_trip_ms = best.round_trip().num_milliseconds(),
                samples = samples.len(),
                offset_ms = current.num_milliseconds(),
                "the storage's clock answered too slowly to be trusted; the node keeps its offset to it"
            );
            return current;
        }
        let measured = best.offset();
        if first || (measured - current).abs() > JITTER {
            let us = measured.num_microseconds().unwrap_or(0);
            self.offset_micros.store(us, Ordering::Relaxed);
            let error = best.error().num_microseconds().unwrap_or(i64::MAX);
            self.error_micros.store(error.max(0), Ordering::Relaxed);
            if measured.abs() > JITTER || !first {
                tracing::info!(
                    offset_ms = measured.num_milliseconds(),
                    error_ms = best.error().num_milliseconds(),
                    "node clock read off the storage's clock"
                );
            }
            return measured;
        }
        current
    }
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
    use std::sync::Mutex;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::milliseconds(ms)
    }

    /// A sample of a round trip without delay that read `storage` at node time `node`.
    fn instant(node: DateTime<Utc>, storage: DateTime<Utc>) -> ClockSample {
        ClockSample {
            before: node,
            storage,
            after: node,
        }
    }

    #[test]
    fn offset_is_taken_at_the_middle_of_the_round_trip() {
        // A node 30 s ahead: it read 30.000 s and 30.010 s around the storage's 0.005 s.
        let ahead = ClockSample {
            before: t(30_000),
            storage: t(5),
            after: t(30_010),
        };
        assert_eq!(ahead.offset(), Duration::milliseconds(-30_000));
        assert_eq!(ahead.error(), Duration::milliseconds(5));
        assert_eq!(instant(t(-30_000), t(0)).offset(), Duration::seconds(30));
    }

    #[test]
    fn the_shortest_round_trip_is_the_best_sample() {
        let slow = ClockSample {
            before: t(0),
            storage: t(0),
            after: t(2_000),
        };
        let fast = ClockSample {
            before: t(3_000),
            storage: t(3_001),
            after: t(3_002),
        };
        assert_eq!(best_sample(&[slow, fast, slow]), Some(fast));
        assert_eq!(best_sample(&[]), None);
    }

    #[test]
    fn a_skewed_node_reads_the_storage_time_and_noise_does_not_move_it() {
        let node = Arc::new(ManualClock::new(t(30_000)));
        let clock = StorageClock::new(node.clone());
        assert_eq!(clock.error(), None);
        assert_eq!(
            clock.apply(&[instant(t(30_000), t(0))]),
            Duration::seconds(-30)
        );
        assert_eq!(clock.now(), t(0));
        assert_eq!(clock.error(), Some(Duration::zero()));
        // 5 ms of round-trip noise: kept out.
        assert_eq!(
            clock.apply(&[instant(t(30_000), t(5))]),
            Duration::seconds(-30)
        );
        node.advance(Duration::seconds(1));
        assert_eq!(clock.now(), t(1_000));
        // The node's clock was stepped back 60 s: the next sync follows it.
        node.advance(Duration::seconds(-60));
        assert_eq!(
            clock.apply(&[instant(t(-29_000), t(1_000))]),
            Duration::seconds(30)
        );
        assert_eq!(clock.now(), t(1_000));
    }

    #[test]
    fn a_sync_of_slow_round_trips_is_kept_out_but_the_first() {
        let node = Arc::new(ManualClock::new(t(0)));
        let clock = StorageClock::new(node);
        let slow = |offset_ms: i64| ClockSample {
            before: t(0),
            storage: t(500 + offset_ms),
            after: t(1_000),
        };
        // The first: better than none, with its error bound.
        assert_eq!(clock.apply(&[slow(10_000)]), Duration::seconds(10));
        assert_eq!(clock.error(), Some(Duration::milliseconds(500)));
        // Later ones over MAX_ROUND_TRIP: not applied.
        assert_eq!(clock.apply(&[slow(-5_000)]), Duration::seconds(10));
        // A fast one is.
        assert_eq!(
            clock.apply(&[instant(t(0), t(2_000))]),
            Duration::seconds(2)
        );
        assert_eq!(clock.error(), Some(Duration::zero()));
    }

    /// Regression (issue 37, defect 2): a sync took one round trip, whose time had no bound,
    /// so one slow round trip moved the node's clock by half of it. With the storage 30 s
    /// ahead, a first read answered at once but took 2 s to come back (the offset measured
    /// 1 s short); the later reads took 2 ms. The clock is now within a millisecond.
    #[tokio::test]
    async fn one_slow_round_trip_does_not_move_the_clock() {
        let node = Arc::new(ManualClock::new(t(0)));
        let clock = StorageClock::new(node.clone());
        let truth = Duration::seconds(30);
        let reads = Mutex::new(0);
        let offset = clock
            .sync_by(|| {
                let n = {
                    let mut reads = reads.lock().unwrap();
                    *reads += 1;
                    *reads
                };
                let (there, back) = if n == 1 { (0, 2_000) } else { (1, 1) };
                node.advance(Duration::milliseconds(there));
                let storage_now = node.now() + truth;
                node.advance(Duration::milliseconds(back));
                async move { Ok(Some(storage_now)) }
            })
            .await
            .expect("sync");
        assert_eq!(*reads.lock().unwrap(), SAMPLES);
        assert!(
            (offset - truth).abs() <= Duration::milliseconds(1),
            "offset {offset} (truth {truth})"
        );
        assert_eq!(clock.error(), Some(Duration::milliseconds(1)));
    }

    #[tokio::test]
    async fn a_store_without_a_clock_leaves_the_node_clock_as_it_is() {
        let node = Arc::new(ManualClock::new(t(0)));
        let clock = StorageClock::new(node);
        let offset = clock.sync(&MemoryStorage::new()).await.expect("sync");
        assert_eq!((offset, clock.now()), (Duration::zero(), t(0)));
    }
}

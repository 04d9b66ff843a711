//! Time as delivery sees it. Production uses [`SystemClock`]; tests drive a [`ManualClock`]
//! so that back-off, delays and windows are checked without sleeping.
//!
//! A node does not use its clock as it is: it reads it off the storage's clock (see
//! [`StorageClock`](crate::cluster::storage_clock::StorageClock)), so that leases and
//! membership beats written by nodes with skewed clocks are judged on one time line. A
//! [`ManualClock`] is the exception: it stands for the whole world's time, the database's
//! included ([`Clock::is_manual`]).

use crate::sync::lock;
use chrono::{DateTime, Duration, Utc};
use std::sync::Mutex;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Whether this clock is the time of the whole (simulated) world, the storage's included,
    /// so that a node takes it as it is instead of reading it off the storage's clock. `false`
    /// for a real clock, right or skewed; `true` for [`ManualClock`].
    fn is_manual(&self) -> bool {
        false
    }
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = lock(&self.now);
        *now += by;
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: DateTime<Utc>) {
        *lock(&self.now) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *lock(&self.now)
    }

    fn is_manual(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::seconds(5));
        assert_eq!(clock.now(), start + Duration::seconds(5));
        clock.set(start);
        assert_eq!(clock.now(), start);
    }
}

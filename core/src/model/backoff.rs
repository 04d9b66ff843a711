//! Exponential back-off: how long to wait after the n-th failure in a row.
//!
//! ```text
//!  delay(n) = base × 2^min(n-1, max_doublings), at most cap      (n ≥ 1; 0 counts as 1)
//!  base 25 ms, cap 1 s:  25, 50, 100, 200, 400, 800, 1000, 1000, …
//! ```
//!
//! One pure computation for every place that waits longer after each failure: the failure
//! policy's exponential [`Backoff`](crate::Backoff), the runner's retry of a failed turn and
//! its restart of a dead worker, a storage listener's reconnect and SQLite's retried switch
//! to WAL. It holds no count and no clock: the caller keeps the number of failures (in a
//! row, since a success, or in the database) and sleeps however it sleeps.
//!
//! There is no jitter: every caller's delays are exactly the ones above, as its docs and
//! tests state (docs/failures.md promises `base * 2^(n-1)` up to `cap` and nothing random).

use std::time::Duration;

/// The most doublings by default: the largest shift of a `u32` multiplier. The failure
/// policy's delays have always stopped growing there (`base × 2^31`), whatever the cap.
const MAX_DOUBLINGS: u32 = 31;

/// Delays that start at `base` and double with each failure, at most `cap`.
///
/// The cap wins over the base: a cap shorter than the base makes every delay the cap. A
/// product past what a [`Duration`] holds is the cap too, never a panic.
///
/// ```
/// use shardbox_core::ExponentialBackoff;
/// use std::time::Duration;
/// let backoff = ExponentialBackoff::new(Duration::from_secs(1), Duration::from_secs(10));
/// let delays: Vec<u64> = (1..=6).map(|n| backoff.delay(n).as_secs()).collect();
/// assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExponentialBackoff {
    base: Duration,
    cap: Duration,
    max_doublings: u32,
}

impl ExponentialBackoff {
    /// Delays from `base`, doubling, at most `cap` (and at most 31 doublings: see
    /// [`ExponentialBackoff::max_doublings`]).
    pub const fn new(base: Duration, cap: Duration) -> Self {
        ExponentialBackoff {
            base,
            cap,
            max_doublings: MAX_DOUBLINGS,
        }
    }

    /// Stops doubling after `doublings` (at most 31): the delay then stays at
    /// `base × 2^doublings`, if the cap is longer.
    ///
    /// ```
    /// use shardbox_core::ExponentialBackoff;
    /// use std::time::Duration;
    /// let backoff = ExponentialBackoff::new(Duration::from_millis(10), Duration::from_secs(60))
    ///     .max_doublings(2);
    /// assert_eq!(backoff.delay(9), Duration::from_millis(40));
    /// ```
    pub const fn max_doublings(mut self, doublings: u32) -> Self {
        self.max_doublings = if doublings < MAX_DOUBLINGS {
            doublings
        } else {
            MAX_DOUBLINGS
        };
        self
    }

    /// The delay after the first failure (before the cap applies).
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The longest delay.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The delay after `failures` failures (`>= 1`; 0 is taken as 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(self.max_doublings);
        self.base
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.cap)
            .min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_from_the_base_up_to_the_cap() {
        let b = ExponentialBackoff::new(ms(25), ms(1000));
        let got: Vec<u128> = (1..=8).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(got, [25, 50, 100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn no_failure_counts_as_the_first() {
        let b = ExponentialBackoff::new(ms(25), ms(1000));
        assert_eq!(b.delay(0), ms(25));
    }

    #[test]
    fn a_cap_below_the_base_wins() {
        let b = ExponentialBackoff::new(ms(25), ms(10));
        assert_eq!(b.delay(1), ms(10));
        assert_eq!(b.delay(5), ms(10));
    }

    #[test]
    fn many_failures_or_a_huge_base_give_the_cap_without_overflow() {
        let b = ExponentialBackoff::new(ms(1), Duration::from_secs(3600));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(3600));
        let huge = ExponentialBackoff::new(Duration::MAX / 2, Duration::MAX);
        assert_eq!(
            huge.delay(3),
            Duration::MAX,
            "an overflowing product is the cap"
        );
    }

    #[test]
    fn doubling_stops_after_the_limit_even_below_the_cap() {
        let b = ExponentialBackoff::new(ms(10), Duration::from_secs(3600)).max_doublings(10);
        assert_eq!(b.delay(11), ms(10_240));
        assert_eq!(b.delay(12), ms(10_240));
        assert_eq!(b.delay(u32::MAX), ms(10_240));
    }

    #[test]
    fn the_default_limit_is_31_doublings() {
        let b = ExponentialBackoff::new(Duration::from_nanos(1), Duration::from_secs(3600));
        assert_eq!(b.delay(32), Duration::from_nanos(1 << 31));
        assert_eq!(b.delay(40), Duration::from_nanos(1 << 31));
        assert_eq!(b.max_doublings(99), b, "a larger limit is held at 31");
    }

    #[test]
    fn a_zero_base_never_waits() {
        let b = ExponentialBackoff::new(Duration::ZERO, ms(50));
        assert_eq!(b.delay(7), Duration::ZERO);
    }
}

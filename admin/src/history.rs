//! The history the dashboard plots, kept by the server: a bounded ring of status samples,
//! so that a page opened (or reloaded) now shows the last hour, not only what it saw itself.
//!
//! ```text
//!  sampler task, every SAMPLE_EVERY       ─┐
//!    (Sample::read: depths, dead letters)  │
//!  GET /api/status (the page's polls)     ─┴─► History::record(Sample)   at most one per
//!                                               MIN_SPACING, none older than KEEP: fixed memory
//!  GET /api/history ◄─ History::view(after): depth, lag, dead letters, and the rates
//!                      delivered/s and failed/s between consecutive samples (a page
//!                      asks for the samples after its last one)
//! ```
//!
//! Where the rates come from: mounted beside a node, from the node's counters
//! (`RunningNode::metrics`: delivered; failed = retries + dead-lettered + dropped + blocked —
//! this node's deliveries only); standalone (`shardbox serve`), from the database's totals:
//! the growth of the delivered rows kept for deduplication (a purge in the same interval
//! hides some) and of the dead letters and blocked rows — every node's, but a lower bound.
//!
//! Pure but for the lock and [`Sample::read`]: what is kept and how rates are derived is
//! tested below.

use crate::views::status::{DepthView, Status};
use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use shardbox_core::storage::{DeadLetterFilter, ShardDepth, StorageReads};
use shardbox_core::{MetricsSnapshot, ShardIndex, StorageError};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// How long samples are kept.
pub const KEEP: Duration = Duration::from_secs(3600);
/// How often the sampler reads the status.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The least time between two kept samples (a little under [`SAMPLE_EVERY`], so that the
/// sampler's jitter does not skip a tick).
pub const MIN_SPACING: Duration = Duration::from_secs(4);
/// The most samples kept: an hour at the least spacing.
pub const CAPACITY: usize = (KEEP.as_secs() / MIN_SPACING.as_secs()) as usize + 1;

/// A node's cumulative counters at a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Messages delivered.
    pub delivered: u64,
    /// Failed attempts: retries scheduled, dead-lettered, dropped, blocked.
    pub failed: u64,
}

impl Counters {
    /// The counters of `m`.
    pub fn of(m: &MetricsSnapshot) -> Self {
        Counters {
            delivered: m.delivered,
            failed: m.retries + m.dead_lettered + m.dropped + m.blocked,
        }
    }
}

/// One sample of the status.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When the status was read.
    pub at: DateTime<Utc>,
    /// Rows due.
    pub due: u64,
    /// Rows waiting for a delay, a retry, a catch-up or behind a block.
    pub waiting: u64,
    /// Blocked rows.
    pub blocked: u64,
    /// The lag of the oldest due row, in milliseconds.
    pub lag_ms: i64,
    /// Delivered rows kept for deduplication.
    pub delivered_rows: u64,
    /// Dead letters stored.
    pub dead_letters: u64,
    /// The mounted node's counters, if the surface runs beside one.
    pub counters: Option<Counters>,
}

impl Sample {
    /// The sample of `status`, with the node's `counters` when mounted.
    pub fn of(status: &Status, counters: Option<Counters>) -> Self {
        Self::of_totals(status.now, &status.totals, status.dead_letters, counters)
    }

    /// The sample of the Inbox's `totals` and the dead-letter count at `at`.
    pub fn of_totals(
        at: DateTime<Utc>,
        t: &DepthView,
        dead_letters: u64,
        counters: Option<Counters>,
    ) -> Self {
        Sample {
            at,
            due: t.due,
            waiting: t.delayed + t.retrying + t.parked + t.replay,
            blocked: t.blocked,
            lag_ms: t.lag_ms,
            delivered_rows: t.delivered,
            dead_letters,
            counters,
        }
    }

    /// Reads a sample at `now`: the Inbox's depths and the dead-letter count only, what the
    /// sampler needs — lighter than the whole status (no lock table, no reads by kind).
    pub async fn read(
        reads: &StorageReads,
        now: DateTime<Utc>,
        counters: Option<Counters>,
    ) -> Result<Self, StorageError> {
        let mut totals = ShardDepth::empty(ShardIndex(0));
        for d in reads.depths(now).await? {
            totals.absorb(&d);
        }
        let dead_letters = reads.count_dead_letters(&DeadLetterFilter::all()).await?;
        Ok(Self::of_totals(
            now,
            &DepthView::of(&totals, now),
            dead_letters,
            counters,
        ))
    }

    /// Delivered and failed per second from `earlier` to this one.
    fn rates_since(&self, earlier: &Sample) -> (f64, f64) {
        let secs = (self.at - earlier.at).num_milliseconds().max(1) as f64 / 1000.0;
        let (delivered, failed) = match (self.counters, earlier.counters) {
            (Some(now), Some(then)) => (
                now.delivered.saturating_sub(then.delivered),
                now.failed.saturating_sub(then.failed),
            ),
            _ => (
                self.delivered_rows.saturating_sub(earlier.delivered_rows),
                (self.dead_letters + self.blocked)
                    .saturating_sub(earlier.dead_letters + earlier.blocked),
            ),
        };
        (delivered as f64 / secs, failed as f64 / secs)
    }
}

/// The kept samples.
#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

/// One point of the plots.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Point {
    /// When.
    pub t: DateTime<Utc>,
    /// Rows due.
    pub due: u64,
    /// Rows waiting for a delay, a retry, a catch-up or behind a block.
    pub waiting: u64,
    /// Blocked rows.
    pub blocked: u64,
    /// Lag of the oldest due row, in seconds.
    pub lag_s: f64,
    /// Dead letters stored.
    pub dead_letters: u64,
    /// Delivered per second since the previous point (none for the first).
    pub delivered_per_s: Option<f64>,
    /// Failed attempts per second since the previous point (none for the first).
    pub failed_per_s: Option<f64>,
}

/// What `GET /api/history` answers.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryView {
    /// How often the server samples, in milliseconds.
    pub every_ms: u64,
    /// How far back it keeps samples, in milliseconds.
    pub keep_ms: u64,
    /// Where the rates come from: `node counters` (mounted) or `database totals`.
    pub rates_from: &'static str,
    /// The points, oldest first.
    pub points: Vec<Point>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    fn samples(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        // A panic while holding the lock cannot leave the ring half-changed (each change is
        // one push or pop), so a poisoned lock is still a good ring.
        self.samples.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a sample taken at `at` would be kept (the last is [`MIN_SPACING`] old).
    pub fn wants(&self, at: DateTime<Utc>) -> bool {
        self.samples()
            .back()
            .is_none_or(|last| at - last.at >= spacing())
    }

    /// Keeps `sample` unless the last kept one is less than [`MIN_SPACING`] before it (or
    /// after it); forgets samples more than [`KEEP`] before it. Returns whether it was kept.
    pub fn record(&self, sample: Sample) -> bool {
        let mut samples = self.samples();
        if samples
            .back()
            .is_some_and(|last| sample.at - last.at < spacing())
        {
            return false;
        }
        let oldest = sample.at - TimeDelta::from_std(KEEP).unwrap_or(TimeDelta::MAX);
        while samples.front().is_some_and(|s| s.at < oldest) || samples.len() >= CAPACITY {
            samples.pop_front();
        }
        samples.push_back(sample);
        true
    }

    /// How many samples are kept.
    pub fn len(&self) -> usize {
        self.samples().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.samples().is_empty()
    }

    /// The points to plot: every kept one, or those taken after `after` (a page that has
    /// the earlier ones asks for the rest; their rates are still from the sample before).
    pub fn view(&self, after: Option<DateTime<Utc>>) -> HistoryView {
        let samples = self.samples();
        let mut points = Vec::with_capacity(samples.len());
        let mut previous: Option<&Sample> = None;
        for s in samples.iter() {
            let rates = previous.map(|p| s.rates_since(p));
            previous = Some(s);
            if after.is_some_and(|after| s.at <= after) {
                continue;
            }
            points.push(Point {
                t: s.at,
                due: s.due,
                waiting: s.waiting,
                blocked: s.blocked,
                lag_s: s.lag_ms as f64 / 1000.0,
                dead_letters: s.dead_letters,
                delivered_per_s: rates.map(|r| r.0),
                failed_per_s: rates.map(|r| r.1),
            });
        }
        let mounted = samples.back().is_some_and(|s| s.counters.is_some());
        HistoryView {
            every_ms: SAMPLE_EVERY.as_millis() as u64,
            keep_ms: KEEP.as_millis() as u64,
            rates_from: if mounted {
                "node counters"
            } else {
                "database totals"
            },
            points,
        }
    }
}

fn spacing() -> TimeDelta {
    TimeDelta::from_std(MIN_SPACING).unwrap_or(TimeDelta::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_000_000 + secs, 0).unwrap()
    }

    fn sample(secs: i64) -> Sample {
        Sample {
            at: at(secs),
            due: 0,
            waiting: 0,
            blocked: 0,
            lag_ms: 0,
            delivered_rows: 0,
            dead_letters: 0,
            counters: None,
        }
    }

    #[test]
    fn samples_closer_than_the_spacing_are_not_kept() {
        let h = History::new();
        assert!(h.wants(at(0)));
        assert!(h.record(sample(0)));
        assert!(!h.wants(at(3)));
        assert!(!h.record(sample(3)));
        assert!(!h.record(sample(-10)), "an older sample is refused");
        assert!(h.record(sample(4)));
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn an_hour_is_kept_and_no_more() {
        let h = History::new();
        for i in 0..2_000 {
            h.record(sample(i * 5));
        }
        let points = h.view(None).points;
        let span = points.last().unwrap().t - points[0].t;
        assert_eq!(span, TimeDelta::seconds(3600), "the last hour exactly");
        assert_eq!(points.len(), 721);
        // At the least spacing the ring is full before an hour passes: still bounded.
        let dense = History::new();
        for i in 0..5_000 {
            dense.record(sample(i * 4));
        }
        assert_eq!(dense.len(), CAPACITY);
    }

    #[test]
    fn rates_come_from_counters_when_mounted_else_from_totals() {
        let h = History::new();
        let mut first = sample(0);
        first.delivered_rows = 10;
        first.dead_letters = 1;
        h.record(first);
        let mut second = sample(5);
        second.delivered_rows = 20; // +10 in 5 s
        second.dead_letters = 2; // +1
        second.blocked = 1; // +1
        h.record(second);
        let mut purged = sample(10);
        purged.delivered_rows = 0; // a purge: no negative rate
        h.record(purged);
        let view = h.view(None);
        assert_eq!(view.rates_from, "database totals");
        let rates: Vec<_> = view
            .points
            .iter()
            .map(|p| (p.delivered_per_s, p.failed_per_s))
            .collect();
        assert_eq!(
            rates,
            [(None, None), (Some(2.0), Some(0.4)), (Some(0.0), Some(0.0))]
        );

        let mounted = History::new();
        for (secs, delivered, failed) in [(0, 100, 5), (10, 150, 6)] {
            let mut s = sample(secs);
            s.counters = Some(Counters { delivered, failed });
            mounted.record(s);
        }
        let view = mounted.view(None);
        assert_eq!(view.rates_from, "node counters");
        assert_eq!(view.points[1].delivered_per_s, Some(5.0));
        assert_eq!(view.points[1].failed_per_s, Some(0.1));
    }

    #[test]
    fn a_page_gets_only_the_samples_after_its_last_with_their_rates() {
        let h = History::new();
        for (secs, delivered_rows) in [(0, 0), (5, 10), (10, 30)] {
            let mut s = sample(secs);
            s.delivered_rows = delivered_rows;
            h.record(s);
        }
        let rest = h.view(Some(at(5))).points;
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].t, at(10));
        assert_eq!(rest[0].delivered_per_s, Some(4.0), "from the sample before");
        assert!(h.view(Some(at(10))).points.is_empty());
        assert_eq!(h.view(None).points.len(), 3);
    }
}

//! Delivery metrics: counters and a stage-latency histogram kept by every delivery, readable
//! as a [`MetricsSnapshot`] and exported through the `metrics` crate facade (install any
//! `metrics` recorder — Prometheus, StatsD — to scrape them).
//!
//! Exported names (all labelled with `node`): `shardbox_delivered_total`,
//! `shardbox_duplicates_total` (dropped by stations) and `shardbox_write_duplicates_total`
//! (ignored at write), `shardbox_retries_total`, `shardbox_dead_lettered_total`,
//! `shardbox_dropped_total`, `shardbox_expired_total`, `shardbox_held_total`,
//! `shardbox_blocked_total` (targets blocked by a message), `shardbox_unblocked_total`
//! (blocked messages an operator requeued, dropped or dead-lettered),
//! `shardbox_requeued_total` (dead letters put back into the Inbox),
//! `shardbox_stages_total`, `shardbox_purged_total`, `shardbox_written_total`,
//! `shardbox_lease_pick_ups_total`, `shardbox_lease_takeovers_total` (pick-ups of a lease
//! that had expired without a release), `shardbox_lease_refusals_total`,
//! `shardbox_lease_losses_total`, `shardbox_worker_restarts_total`, and the histogram `shardbox_stage_seconds`.
//!
//! An expired message that is also dead-lettered (`dead_letter_expired`) counts in both
//! `expired` and `dead_lettered`: the first counts what happened to messages, the second
//! what was written to the dead letters.

use crate::model::ids::NodeId;
use crate::storage::WriteReport;
use crate::telemetry::monitor::StageReport;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (µs) of the stage-latency buckets; one more bucket, unbounded, follows.
pub const STAGE_BUCKETS_US: [u64; 16] = BUCKETS_US;

/// The stage-latency buckets kept: one per bound of [`STAGE_BUCKETS_US`], and the unbounded.
pub const STAGE_BUCKETS: usize = BUCKETS_US.len() + 1;

const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Messages handled and marked delivered.
    pub delivered: u64,
    /// Duplicates dropped by the stations.
    pub duplicates: u64,
    /// Duplicate writes ignored by the Inbox's unique key.
    pub write_duplicates: u64,
    /// Rows written by sends, posts and fan-out.
    pub written: u64,
    /// Transactions that wrote sends and posts: concurrent ones are grouped into one (group
    /// commit), so under concurrent sends this grows slower than the sends.
    pub write_groups: u64,
    /// Failed attempts scheduled for a retry.
    pub retries: u64,
    /// Messages moved to the dead letters.
    pub dead_lettered: u64,
    /// Messages dropped by policy.
    pub dropped: u64,
    /// Messages expired by TTL.
    pub expired: u64,
    /// Messages held behind a failure or a catch-up.
    pub held: u64,
    /// Messages that blocked their target.
    pub blocked: u64,
    /// Blocked messages an operator requeued, dropped or dead-lettered through this node.
    pub unblocked: u64,
    /// Dead letters requeued through this node.
    pub requeued: u64,
    /// Stages committed.
    pub stages: u64,
    /// Delivered rows purged after their window.
    pub purged: u64,
    /// Shard leases picked up.
    pub lease_pick_ups: u64,
    /// Pick-ups that took over a lease which had expired without a release.
    pub lease_takeovers: u64,
    /// Pick-ups refused because another worker held the shard.
    pub lease_refusals: u64,
    /// Leases lost before a commit.
    pub lease_losses: u64,
    /// Worker tasks that died (a panic outside the handlers, e.g. in a user station) and were
    /// restarted, and take-overs' turns that panicked alike (their shard retried).
    pub worker_restarts: u64,
    /// Stage latency: count and the bucket bounds of the 50th and 99th percentiles.
    pub stage_latency: LatencySummary,
}

/// Percentiles of a histogram, as bucket upper bounds, and the buckets themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// Observations.
    pub count: u64,
    /// Upper bound of the bucket holding the median.
    pub p50: Duration,
    /// Upper bound of the bucket holding the 99th percentile.
    pub p99: Duration,
    /// Observations per bucket: at most [`STAGE_BUCKETS_US`]`[i]` µs (and above the bound
    /// before), the last one above every bound.
    pub buckets: [u64; STAGE_BUCKETS],
    /// The observations of each bucket added up, in µs: with the counts, an exporter
    /// renders the histogram's sum exactly.
    pub bucket_sums_us: [u64; STAGE_BUCKETS],
}

impl MetricsSnapshot {
    /// Every counter with its exported name (`shardbox_*_total`), in the catalog's order
    /// ([`crate::telemetry::describe::COUNTERS`]): what an exporter reading a snapshot
    /// (the admin surface's `/metrics`) sets.
    pub fn counters(&self) -> [(&'static str, u64); 20] {
        [
            ("shardbox_delivered_total", self.delivered),
            ("shardbox_duplicates_total", self.duplicates),
            ("shardbox_write_duplicates_total", self.write_duplicates),
            ("shardbox_written_total", self.written),
            ("shardbox_write_groups_total", self.write_groups),
            ("shardbox_retries_total", self.retries),
            ("shardbox_dead_lettered_total", self.dead_lettered),
            ("shardbox_dropped_total", self.dropped),
            ("shardbox_expired_total", self.expired),
            ("shardbox_held_total", self.held),
            ("shardbox_blocked_total", self.blocked),
            ("shardbox_unblocked_total", self.unblocked),
            ("shardbox_requeued_total", self.requeued),
            ("shardbox_stages_total", self.stages),
            ("shardbox_purged_total", self.purged),
            ("shardbox_lease_pick_ups_total", self.lease_pick_ups),
            ("shardbox_lease_takeovers_total", self.lease_takeovers),
            ("shardbox_lease_refusals_total", self.lease_refusals),
            ("shardbox_lease_losses_total", self.lease_losses),
            ("shardbox_worker_restarts_total", self.worker_restarts),
        ]
    }
}

/// The live counters of one delivery.
#[derive(Debug)]
pub struct DeliveryMetrics {
    node: String,
    delivered: AtomicU64,
    duplicates: AtomicU64,
    write_duplicates: AtomicU64,
    written: AtomicU64,
    write_groups: AtomicU64,
    retries: AtomicU64,
    dead_lettered: AtomicU64,
    dropped: AtomicU64,
    expired: AtomicU64,
    held: AtomicU64,
    blocked: AtomicU64,
    unblocked: AtomicU64,
    requeued: AtomicU64,
    stages: AtomicU64,
    purged: AtomicU64,
    lease_pick_ups: AtomicU64,
    lease_takeovers: AtomicU64,
    lease_refusals: AtomicU64,
    lease_losses: AtomicU64,
    worker_restarts: AtomicU64,
    latency: [AtomicU64; STAGE_BUCKETS],
    latency_sums_us: [AtomicU64; STAGE_BUCKETS],
}

fn add(counter: &AtomicU64, name: &'static str, node: &str, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(name, "node" => node.to_owned()).increment(n);
    }
}

impl DeliveryMetrics {
    /// Zeroed counters for `node`.
    pub fn new(node: &NodeId) -> Self {
        crate::telemetry::describe::describe_metrics();
        DeliveryMetrics {
            node: node.0.clone(),
            delivered: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            write_duplicates: AtomicU64::new(0),
            written: AtomicU64::new(0),
            write_groups: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            held: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
            unblocked: AtomicU64::new(0),
            requeued: AtomicU64::new(0),
            stages: AtomicU64::new(0),
            purged: AtomicU64::new(0),
            lease_pick_ups: AtomicU64::new(0),
            lease_takeovers: AtomicU64::new(0),
            lease_refusals: AtomicU64::new(0),
            lease_losses: AtomicU64::new(0),
            worker_restarts: AtomicU64::new(0),
            latency: Default::default(),
            latency_sums_us: Default::default(),
        }
    }

    /// Counts a committed stage.
    pub fn record_stage(&self, r: &StageReport) {
        let n = &self.node;
        add(
            &self.delivered,
            "shardbox_delivered_total",
            n,
            r.delivered as u64,
        );
        add(
            &self.duplicates,
            "shardbox_duplicates_total",
            n,
            r.duplicates as u64,
        );
        add(&self.retries, "shardbox_retries_total", n, r.retried as u64);
        add(
            &self.dead_lettered,
            "shardbox_dead_lettered_total",
            n,
            r.dead_lettered as u64,
        );
        add(&self.dropped, "shardbox_dropped_total", n, r.dropped as u64);
        add(&self.expired, "shardbox_expired_total", n, r.expired as u64);
        add(&self.held, "shardbox_held_total", n, r.held as u64);
        add(&self.blocked, "shardbox_blocked_total", n, r.blocked as u64);
        add(&self.purged, "shardbox_purged_total", n, r.purged as u64);
        add(&self.stages, "shardbox_stages_total", n, 1);
        let us = u64::try_from(r.elapsed.as_micros()).unwrap_or(u64::MAX);
        let bucket = BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(BUCKETS_US.len());
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
        self.latency_sums_us[bucket].fetch_add(us, Ordering::Relaxed);
        metrics::histogram!("shardbox_stage_seconds", "node" => n.clone())
            .record(r.elapsed.as_secs_f64());
    }

    /// Counts a write (send, post or a stage's fan-out).
    pub fn record_write(&self, w: &WriteReport) {
        let n = &self.node;
        add(&self.written, "shardbox_written_total", n, w.written as u64);
        add(
            &self.write_duplicates,
            "shardbox_write_duplicates_total",
            n,
            w.duplicates as u64,
        );
    }

    /// Counts one group of sends and posts written in one transaction.
    pub fn record_write_group(&self) {
        add(
            &self.write_groups,
            "shardbox_write_groups_total",
            &self.node,
            1,
        );
    }

    /// Counts a lease picked up, and a takeover if it had expired without a release.
    pub fn record_pick_up(&self, taken_over: bool) {
        add(
            &self.lease_pick_ups,
            "shardbox_lease_pick_ups_total",
            &self.node,
            1,
        );
        if taken_over {
            add(
                &self.lease_takeovers,
                "shardbox_lease_takeovers_total",
                &self.node,
                1,
            );
        }
    }

    /// Counts blocked messages an operator requeued, dropped or dead-lettered.
    pub fn record_unblocked(&self, n: usize) {
        add(
            &self.unblocked,
            "shardbox_unblocked_total",
            &self.node,
            n as u64,
        );
    }

    /// Counts dead letters put back into the Inbox.
    pub fn record_requeued(&self, n: usize) {
        add(
            &self.requeued,
            "shardbox_requeued_total",
            &self.node,
            n as u64,
        );
    }

    /// Counts a refused pick-up.
    pub fn record_refusal(&self) {
        add(
            &self.lease_refusals,
            "shardbox_lease_refusals_total",
            &self.node,
            1,
        );
    }

    /// Counts a lost lease.
    pub fn record_lease_lost(&self) {
        add(
            &self.lease_losses,
            "shardbox_lease_losses_total",
            &self.node,
            1,
        );
    }

    /// Counts a worker task restarted after it died.
    pub fn record_worker_restart(&self) {
        add(
            &self.worker_restarts,
            "shardbox_worker_restarts_total",
            &self.node,
            1,
        );
    }

    /// A copy of the counters now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let buckets = self.latency.each_ref().map(get);
        let sums = self.latency_sums_us.each_ref().map(get);
        MetricsSnapshot {
            delivered: get(&self.delivered),
            duplicates: get(&self.duplicates),
            write_duplicates: get(&self.write_duplicates),
            written: get(&self.written),
            write_groups: get(&self.write_groups),
            retries: get(&self.retries),
            dead_lettered: get(&self.dead_lettered),
            dropped: get(&self.dropped),
            expired: get(&self.expired),
            held: get(&self.held),
            blocked: get(&self.blocked),
            unblocked: get(&self.unblocked),
            requeued: get(&self.requeued),
            stages: get(&self.stages),
            purged: get(&self.purged),
            lease_pick_ups: get(&self.lease_pick_ups),
            lease_takeovers: get(&self.lease_takeovers),
            lease_refusals: get(&self.lease_refusals),
            lease_losses: get(&self.lease_losses),
            worker_restarts: get(&self.worker_restarts),
            stage_latency: summarize(buckets, sums),
        }
    }
}

/// Percentiles from bucket counts (bucket upper bounds; the overflow bucket reports the
/// largest bound).
fn summarize(buckets: [u64; STAGE_BUCKETS], sums: [u64; STAGE_BUCKETS]) -> LatencySummary {
    let count: u64 = buckets.iter().sum();
    let at = |q: f64| {
        let rank = ((count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let us = BUCKETS_US
                    .get(i)
                    .copied()
                    .unwrap_or(BUCKETS_US[BUCKETS_US.len() - 1]);
                return Duration::from_micros(us);
            }
        }
        Duration::ZERO
    };
    if count == 0 {
        return LatencySummary::default();
    }
    LatencySummary {
        count,
        p50: at(0.5),
        p99: at(0.99),
        buckets,
        bucket_sums_us: sums,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_add_up_and_latency_lands_in_buckets() {
        let m = DeliveryMetrics::new(&NodeId("n".into()));
        for ms in [1u64, 1, 1, 40] {
            m.record_stage(&StageReport {
                delivered: 3,
                duplicates: 1,
                retried: 2,
                blocked: 1,
                elapsed: Duration::from_millis(ms),
                ..StageReport::default()
            });
        }
        m.record_pick_up(false);
        m.record_pick_up(true);
        m.record_unblocked(2);
        m.record_requeued(3);
        m.record_refusal();
        m.record_lease_lost();
        m.record_write(&WriteReport {
            written: 5,
            duplicates: 2,
            ..WriteReport::default()
        });
        let s = m.snapshot();
        assert_eq!(
            (s.delivered, s.duplicates, s.retries, s.stages),
            (12, 4, 8, 4)
        );
        assert_eq!(
            (s.lease_pick_ups, s.lease_refusals, s.lease_losses),
            (2, 1, 1)
        );
        assert_eq!(s.lease_takeovers, 1);
        assert_eq!((s.blocked, s.unblocked, s.requeued), (4, 2, 3));
        assert_eq!((s.written, s.write_duplicates), (5, 2));
        assert_eq!(s.stage_latency.count, 4);
        assert_eq!(s.stage_latency.p50, Duration::from_millis(1));
        assert_eq!(s.stage_latency.p99, Duration::from_millis(50));
        // 1 ms in the 1 ms bucket (three), 40 ms in the 50 ms one: counts and exact sums.
        let ms1 = BUCKETS_US.iter().position(|b| *b == 1_000).unwrap();
        let ms50 = BUCKETS_US.iter().position(|b| *b == 50_000).unwrap();
        assert_eq!(s.stage_latency.buckets[ms1], 3);
        assert_eq!(s.stage_latency.bucket_sums_us[ms1], 3_000);
        assert_eq!(s.stage_latency.buckets[ms50], 1);
        assert_eq!(s.stage_latency.bucket_sums_us[ms50], 40_000);
        assert_eq!(s.stage_latency.buckets.iter().sum::<u64>(), 4);
    }

    #[test]
    fn the_snapshot_s_counters_are_the_catalog_s() {
        let names: Vec<&str> = MetricsSnapshot::default()
            .counters()
            .iter()
            .map(|(n, _)| *n)
            .collect();
        let catalog: Vec<&str> = crate::telemetry::describe::COUNTERS
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(names, catalog);
    }

    #[test]
    fn an_empty_histogram_summarizes_to_zero() {
        let m = DeliveryMetrics::new(&NodeId("n".into()));
        assert_eq!(m.snapshot().stage_latency, LatencySummary::default());
    }
}

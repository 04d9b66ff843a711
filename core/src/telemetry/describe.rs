//! The help text and unit of every metric Shardbox exports through the `metrics` facade, so
//! that an exporter (Prometheus' `# HELP` and `# TYPE` lines) can show them.
//!
//! Described when a delivery is built and again when a node starts (an exporter installed in
//! between still gets them); describing twice is harmless.
//!
//! This catalog is the one definition of the names and help texts: the admin surface's own
//! `/metrics` (which renders the gauges from the database without a recorder) takes them
//! from here through [`metric_help`], so a scrape of either shows the same names and words.

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

/// Counters: (name, help).
pub const COUNTERS: [(&str, &str); 20] = [
    ("shardbox_delivered_total", "Messages handled and marked delivered."),
    ("shardbox_duplicates_total", "Duplicate messages dropped by the stations (same target and signal within the dedup window)."),
    ("shardbox_write_duplicates_total", "Duplicate writes ignored by the Inbox's unique key."),
    ("shardbox_written_total", "Inbox rows written by sends, posts and fan-out."),
    ("shardbox_write_groups_total", "Transactions that wrote sends and posts (concurrent ones are committed together, so this grows slower than the sends under load)."),
    ("shardbox_retries_total", "Failed attempts scheduled for a retry."),
    ("shardbox_dead_lettered_total", "Messages moved to the dead letters."),
    ("shardbox_dropped_total", "Messages dropped by the failure policy."),
    ("shardbox_expired_total", "Messages expired by their TTL."),
    ("shardbox_held_total", "Messages held behind a failure of their target or by a catch-up."),
    ("shardbox_blocked_total", "Messages that blocked their target (exhausted under a block policy)."),
    ("shardbox_unblocked_total", "Blocked messages an operator requeued, dropped or dead-lettered."),
    ("shardbox_requeued_total", "Dead letters put back into the Inbox."),
    ("shardbox_stages_total", "Delivery stages committed."),
    ("shardbox_purged_total", "Delivered rows purged after their dedup window."),
    ("shardbox_lease_pick_ups_total", "Shard leases picked up."),
    ("shardbox_lease_takeovers_total", "Pick-ups of a lease that had expired without a release (its node died or stalled)."),
    ("shardbox_lease_refusals_total", "Pick-ups refused because another worker held the shard."),
    ("shardbox_lease_losses_total", "Leases lost before a commit (taken over, or re-fenced by a catch-up)."),
    ("shardbox_worker_restarts_total", "Worker tasks that died (a panic outside the handlers) and were restarted, and take-overs' turns that panicked alike."),
];

/// Gauges: (name, unit, help).
pub const GAUGES: [(&str, Unit, &str); 10] = [
    ("shardbox_inbox_depth", Unit::Count, "Inbox rows by what they wait for (state: due, delayed, retrying, parked, replay, blocked, delivered), over all shards, or per shard where labelled shard."),
    ("shardbox_shard_lag_seconds", Unit::Seconds, "Age of the oldest due message of the shard (0 when none is due)."),
    ("shardbox_lag_seconds", Unit::Seconds, "Age of the oldest due message over all shards (0 when none is due)."),
    ("shardbox_leases_held", Unit::Count, "Shard leases the reporting node holds."),
    ("shardbox_dead_letters", Unit::Count, "Dead letters stored."),
    ("shardbox_blocked_targets", Unit::Count, "Targets blocked by a message until an operator requeues or drops it."),
    ("shardbox_catch_ups_running", Unit::Count, "Catch-up jobs running."),
    ("shardbox_catch_up_replayed", Unit::Count, "Events a running catch-up has replayed (labels job, projection)."),
    ("shardbox_catch_up_total", Unit::Count, "Events a running catch-up replays in all, estimated (labels job, projection)."),
    ("shardbox_kind_paused", Unit::Count, "1 while the entity kind (label kind) is paused, as the reporting node last read it; 0 once resumed."),
];

/// The stage latency histogram: (name, help).
pub const STAGE_SECONDS: (&str, &str) = (
    "shardbox_stage_seconds",
    "Time a delivery stage took: page read, stations, commit.",
);

/// The help text of Shardbox metric `name` (a counter, a gauge or the stage histogram), if
/// it is one.
pub fn metric_help(name: &str) -> Option<&'static str> {
    COUNTERS
        .iter()
        .map(|(n, help)| (*n, *help))
        .chain(GAUGES.iter().map(|(n, _, help)| (*n, *help)))
        .chain([STAGE_SECONDS])
        .find(|(n, _)| *n == name)
        .map(|(_, help)| help)
}

/// Describes every Shardbox metric to the installed recorder.
pub fn describe_metrics() {
    for (name, help) in COUNTERS {
        describe_counter!(name, Unit::Count, help);
    }
    for (name, unit, help) in GAUGES {
        describe_gauge!(name, unit, help);
    }
    describe_histogram!(STAGE_SECONDS.0, Unit::Seconds, STAGE_SECONDS.1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_has_one_help_text() {
        let mut names: Vec<&str> = COUNTERS.iter().map(|(n, _)| *n).collect();
        names.extend(GAUGES.iter().map(|(n, _, _)| *n));
        names.push(STAGE_SECONDS.0);
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "no name twice");
        for name in names {
            assert!(metric_help(name).is_some_and(|h| !h.is_empty()), "{name}");
        }
        assert_eq!(metric_help("shardbox_nope"), None);
    }
}

//! The help text and unit of every metric Shardbox exports through the `metrics` facade, so
//! that an exporter (Prometheus' `# HELP` and `# TYPE` lines) can show them.
//!
//! Described when a delivery is built and again when a node starts (an exporter installed in
//! between still gets them); describing twice is harmless.

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

/// Counters: (name, help).
const COUNTERS: [(&str, &str); 18] = [
    ("shardbox_delivered_total", "Messages handled and marked delivered."),
    ("shardbox_duplicates_total", "Duplicate messages dropped by the stations (same target and signal within the dedup window)."),
    ("shardbox_write_duplicates_total", "Duplicate writes ignored by the Inbox's unique key."),
    ("shardbox_written_total", "Inbox rows written by sends, posts and fan-out."),
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
];

/// Gauges: (name, unit, help).
const GAUGES: [(&str, Unit, &str); 9] = [
    ("shardbox_inbox_depth", Unit::Count, "Inbox rows by what they wait for (state: due, delayed, retrying, parked, replay, blocked, delivered), over all shards."),
    ("shardbox_shard_lag_seconds", Unit::Seconds, "Age of the oldest due message of the shard (0 when none is due)."),
    ("shardbox_lag_seconds", Unit::Seconds, "Age of the oldest due message over all shards (0 when none is due)."),
    ("shardbox_leases_held", Unit::Count, "Shard leases the reporting node holds."),
    ("shardbox_dead_letters", Unit::Count, "Dead letters stored."),
    ("shardbox_blocked_targets", Unit::Count, "Targets blocked by a message until an operator requeues or drops it."),
    ("shardbox_catch_ups_running", Unit::Count, "Catch-up jobs running."),
    ("shardbox_catch_up_replayed", Unit::Count, "Events a running catch-up has replayed (labels job, projection)."),
    ("shardbox_catch_up_total", Unit::Count, "Events a running catch-up replays in all, estimated (labels job, projection)."),
];

/// Describes every Shardbox metric to the installed recorder.
pub fn describe_metrics() {
    for (name, help) in COUNTERS {
        describe_counter!(name, Unit::Count, help);
    }
    for (name, unit, help) in GAUGES {
        describe_gauge!(name, unit, help);
    }
    describe_histogram!(
        "shardbox_stage_seconds",
        Unit::Seconds,
        "Time a delivery stage took: page read, stations, commit."
    );
}

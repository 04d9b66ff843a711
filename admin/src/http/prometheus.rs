//! `/metrics` in the Prometheus text format (version 0.0.4), rendered on each scrape:
//!
//! ```text
//!  status view (database)  ─► gauges: shardbox_inbox_depth{shard,state},
//!                             shardbox_shard_lag_seconds{shard}, shardbox_leases_held{node},
//!                             shardbox_dead_letters, shardbox_blocked_targets,
//!                             shardbox_catch_up_replayed / _total_estimate{job,projection}
//!  mounted node's snapshot ─► counters shardbox_*_total{node}, summary shardbox_stage_seconds
//! ```
//!
//! The gauges read the database, so every node's admin surface (and a standalone one) shows
//! the same numbers; the counters are the mounted node's own, as its `metrics` recorder
//! exports them.

use crate::views::status::{DepthView, Status};
use shardbox_core::MetricsSnapshot;
use std::fmt::Write;

/// The depth states, in the order of `DepthView`'s fields.
const STATES: [&str; 7] = [
    "due",
    "delayed",
    "retrying",
    "parked",
    "replay",
    "blocked",
    "delivered",
];

fn by_state(d: &DepthView) -> [u64; 7] {
    [
        d.due,
        d.delayed,
        d.retrying,
        d.parked,
        d.replay,
        d.blocked,
        d.delivered,
    ]
}

/// A label value escaped as the text format wants (backslash, quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The gauges of `status`.
pub fn render_gauges(out: &mut String, status: &Status) {
    header(
        out,
        "shardbox_inbox_depth",
        "gauge",
        "Inbox rows per shard by what they wait for.",
    );
    for s in &status.shards {
        for (state, n) in STATES.iter().zip(by_state(&s.depth)) {
            let _ = writeln!(
                out,
                "shardbox_inbox_depth{{shard=\"{}\",state=\"{state}\"}} {n}",
                s.shard
            );
        }
    }
    header(
        out,
        "shardbox_shard_lag_seconds",
        "gauge",
        "Age of the shard's oldest due row (0 when nothing is due).",
    );
    for s in &status.shards {
        let _ = writeln!(
            out,
            "shardbox_shard_lag_seconds{{shard=\"{}\"}} {}",
            s.shard,
            s.depth.lag_ms as f64 / 1000.0
        );
    }
    header(
        out,
        "shardbox_leases_held",
        "gauge",
        "Shard leases a node holds now.",
    );
    for n in &status.nodes {
        let _ = writeln!(
            out,
            "shardbox_leases_held{{node=\"{}\"}} {}",
            label(&n.node),
            n.leases_held
        );
    }
    header(
        out,
        "shardbox_dead_letters",
        "gauge",
        "Dead letters stored.",
    );
    let _ = writeln!(out, "shardbox_dead_letters {}", status.dead_letters);
    header(
        out,
        "shardbox_blocked_targets",
        "gauge",
        "Targets stopped by a blocked message.",
    );
    let _ = writeln!(out, "shardbox_blocked_targets {}", status.blocked_targets);
    header(
        out,
        "shardbox_catch_up_replayed",
        "gauge",
        "Events a running catch-up replayed.",
    );
    for c in &status.running_catch_ups {
        let _ = writeln!(
            out,
            "shardbox_catch_up_replayed{{job=\"{}\",projection=\"{}\"}} {}",
            c.id,
            label(&c.projection_kind),
            c.replayed
        );
    }
    header(
        out,
        "shardbox_catch_up_total_estimate",
        "gauge",
        "Events a running catch-up has to replay, estimated at its start.",
    );
    for c in &status.running_catch_ups {
        let _ = writeln!(
            out,
            "shardbox_catch_up_total_estimate{{job=\"{}\",projection=\"{}\"}} {}",
            c.id,
            label(&c.projection_kind),
            c.total_estimate
        );
    }
}

/// The counters of a node's snapshot.
pub fn render_counters(out: &mut String, node: &str, m: &MetricsSnapshot) {
    let node = label(node);
    let counters: [(&str, u64, &str); 18] = [
        (
            "delivered",
            m.delivered,
            "Messages handled and marked delivered.",
        ),
        (
            "duplicates",
            m.duplicates,
            "Duplicates dropped by the stations.",
        ),
        (
            "write_duplicates",
            m.write_duplicates,
            "Duplicate writes ignored by the Inbox's unique key.",
        ),
        (
            "written",
            m.written,
            "Rows written by sends, posts and fan-out.",
        ),
        (
            "retries",
            m.retries,
            "Failed attempts scheduled for a retry.",
        ),
        (
            "dead_lettered",
            m.dead_lettered,
            "Messages moved to the dead letters.",
        ),
        ("dropped", m.dropped, "Messages dropped by policy."),
        ("expired", m.expired, "Messages expired by TTL."),
        (
            "held",
            m.held,
            "Messages held behind a failure or a catch-up.",
        ),
        ("blocked", m.blocked, "Messages that blocked their target."),
        (
            "unblocked",
            m.unblocked,
            "Blocked messages an operator let go on.",
        ),
        (
            "requeued",
            m.requeued,
            "Dead letters requeued through this node.",
        ),
        ("stages", m.stages, "Stages committed."),
        (
            "purged",
            m.purged,
            "Delivered rows purged after their window.",
        ),
        (
            "lease_pick_ups",
            m.lease_pick_ups,
            "Shard leases picked up.",
        ),
        (
            "lease_takeovers",
            m.lease_takeovers,
            "Pick-ups of a lease that had expired without a release.",
        ),
        (
            "lease_refusals",
            m.lease_refusals,
            "Pick-ups refused because another worker held the shard.",
        ),
        (
            "lease_losses",
            m.lease_losses,
            "Leases lost before a commit.",
        ),
    ];
    for (name, value, help) in counters {
        let name = format!("shardbox_{name}_total");
        header(out, &name, "counter", help);
        let _ = writeln!(out, "{name}{{node=\"{node}\"}} {value}");
    }
    let l = &m.stage_latency;
    header(
        out,
        "shardbox_stage_seconds",
        "summary",
        "Stage latency (quantiles are bucket upper bounds).",
    );
    for (q, d) in [("0.5", l.p50), ("0.99", l.p99)] {
        let _ = writeln!(
            out,
            "shardbox_stage_seconds{{node=\"{node}\",quantile=\"{q}\"}} {}",
            d.as_secs_f64()
        );
    }
    let _ = writeln!(
        out,
        "shardbox_stage_seconds_count{{node=\"{node}\"}} {}",
        l.count
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn counters_carry_the_node_and_a_type_line() {
        let mut out = String::new();
        let m = MetricsSnapshot {
            delivered: 7,
            ..Default::default()
        };
        render_counters(&mut out, "n-1", &m);
        assert!(out.contains("# TYPE shardbox_delivered_total counter\n"));
        assert!(out.contains("shardbox_delivered_total{node=\"n-1\"} 7\n"));
        assert!(out.contains("shardbox_stage_seconds_count{node=\"n-1\"} 0\n"));
    }
}

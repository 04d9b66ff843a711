//! `/metrics` in the Prometheus text format (version 0.0.4), rendered on each scrape:
//!
//! ```text
//!  status view (database)  ─► gauges: shardbox_inbox_depth{shard,state},
//!                             shardbox_shard_lag_seconds{shard}, shardbox_leases_held{node},
//!                             shardbox_lag_seconds, shardbox_dead_letters,
//!                             shardbox_blocked_targets, shardbox_catch_ups_running,
//!                             shardbox_catch_up_replayed / _total{job,projection}
//!  mounted node's snapshot ─► counters shardbox_*_total{node}, summary shardbox_stage_seconds
//! ```
//!
//! The gauges read the database, so every node's admin surface (and a standalone one) shows
//! the same numbers; the counters are the mounted node's own, as its `metrics` recorder
//! exports them. Names and help texts are core's catalog (`shardbox_core::metric_help`),
//! the one definition the `metrics` facade's descriptions use too.

use crate::views::status::{DepthView, Status};
use shardbox_core::{metric_help, MetricsSnapshot};
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

/// Writes the `# HELP` (core's text for `name`) and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str) {
    let help = metric_help(name).unwrap_or("A Shardbox metric.");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The gauges of `status`.
pub fn render_gauges(out: &mut String, status: &Status) {
    header(out, "shardbox_inbox_depth", "gauge");
    for s in &status.shards {
        for (state, n) in STATES.iter().zip(by_state(&s.depth)) {
            let _ = writeln!(
                out,
                "shardbox_inbox_depth{{shard=\"{}\",state=\"{state}\"}} {n}",
                s.shard
            );
        }
    }
    header(out, "shardbox_shard_lag_seconds", "gauge");
    for s in &status.shards {
        let _ = writeln!(
            out,
            "shardbox_shard_lag_seconds{{shard=\"{}\"}} {}",
            s.shard,
            s.depth.lag_ms as f64 / 1000.0
        );
    }
    header(out, "shardbox_lag_seconds", "gauge");
    let _ = writeln!(
        out,
        "shardbox_lag_seconds {}",
        status.totals.lag_ms as f64 / 1000.0
    );
    header(out, "shardbox_leases_held", "gauge");
    for n in &status.nodes {
        let _ = writeln!(
            out,
            "shardbox_leases_held{{node=\"{}\"}} {}",
            label(&n.node),
            n.leases_held
        );
    }
    header(out, "shardbox_dead_letters", "gauge");
    let _ = writeln!(out, "shardbox_dead_letters {}", status.dead_letters);
    header(out, "shardbox_blocked_targets", "gauge");
    let _ = writeln!(out, "shardbox_blocked_targets {}", status.blocked_targets);
    header(out, "shardbox_catch_ups_running", "gauge");
    let _ = writeln!(
        out,
        "shardbox_catch_ups_running {}",
        status.running_catch_ups.len()
    );
    header(out, "shardbox_catch_up_replayed", "gauge");
    for c in &status.running_catch_ups {
        let _ = writeln!(
            out,
            "shardbox_catch_up_replayed{{job=\"{}\",projection=\"{}\"}} {}",
            c.id,
            label(&c.projection_kind),
            c.replayed
        );
    }
    header(out, "shardbox_catch_up_total", "gauge");
    for c in &status.running_catch_ups {
        let _ = writeln!(
            out,
            "shardbox_catch_up_total{{job=\"{}\",projection=\"{}\"}} {}",
            c.id,
            label(&c.projection_kind),
            c.total_estimate
        );
    }
}

/// The counters of a node's snapshot.
pub fn render_counters(out: &mut String, node: &str, m: &MetricsSnapshot) {
    let node = label(node);
    let counters: [(&str, u64); 19] = [
        ("delivered", m.delivered),
        ("duplicates", m.duplicates),
        ("write_duplicates", m.write_duplicates),
        ("written", m.written),
        ("write_groups", m.write_groups),
        ("retries", m.retries),
        ("dead_lettered", m.dead_lettered),
        ("dropped", m.dropped),
        ("expired", m.expired),
        ("held", m.held),
        ("blocked", m.blocked),
        ("unblocked", m.unblocked),
        ("requeued", m.requeued),
        ("stages", m.stages),
        ("purged", m.purged),
        ("lease_pick_ups", m.lease_pick_ups),
        ("lease_takeovers", m.lease_takeovers),
        ("lease_refusals", m.lease_refusals),
        ("lease_losses", m.lease_losses),
    ];
    for (name, value) in counters {
        let name = format!("shardbox_{name}_total");
        header(out, &name, "counter");
        let _ = writeln!(out, "{name}{{node=\"{node}\"}} {value}");
    }
    let l = &m.stage_latency;
    header(out, "shardbox_stage_seconds", "summary");
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
    fn every_name_rendered_has_core_s_help_text() {
        let mut out = String::new();
        render_counters(&mut out, "n-1", &MetricsSnapshot::default());
        let helps: Vec<&str> = out.lines().filter(|l| l.starts_with("# HELP ")).collect();
        assert_eq!(helps.len(), 20);
        for line in helps {
            let (name, help) = line["# HELP ".len()..]
                .split_once(' ')
                .expect("name and help");
            assert_eq!(Some(help), metric_help(name), "{name}");
        }
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

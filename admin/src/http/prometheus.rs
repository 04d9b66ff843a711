//! `/metrics` in the Prometheus text format (version 0.0.4), rendered on each scrape by
//! `metrics-exporter-prometheus` from a recorder of the scrape's own:
//!
//! ```text
//!  status view (database) ─► GaugeSample::publish_database   core's code for the node's own
//!                            shardbox_inbox_depth{state}, shardbox_shard_lag_seconds{shard},
//!                            shardbox_lag_seconds, shardbox_dead_letters,
//!                            shardbox_blocked_targets, shardbox_catch_ups_running,
//!                            shardbox_catch_up_replayed / _total{job,projection}
//!                        ─► shardbox_leases_held{node}, one line per node
//!  mounted node's snapshot ─► counters shardbox_*_total{node} (MetricsSnapshot::counters),
//!                            histogram shardbox_stage_seconds{node} (the node's buckets)
//!  describe_metrics()      ─► # HELP and # TYPE lines: core's catalog
//!  PrometheusHandle::render ─► the text
//! ```
//!
//! The gauges read the database, so every node's admin surface (and a standalone one) shows
//! the same numbers, with the labels a node's own recorder gives them less `node` (they are
//! the database's, not a node's). The counters are the mounted node's own. A recorder per
//! scrape: `metrics::with_local_recorder` sets it for this thread only, so an application's
//! global recorder is neither read nor written.

use crate::views::status::{DepthView, Status};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use shardbox_core::storage::ShardDepth;
use shardbox_core::{describe_metrics, GaugeSample, MetricsSnapshot, ShardIndex, STAGE_BUCKETS_US};

/// The stage histogram's name, as core's catalog spells it.
const STAGE_SECONDS: &str = shardbox_core::STAGE_SECONDS.0;

/// The text of one scrape: the gauges of `status`, and the counters of `node` (its id and
/// snapshot) when the router is mounted beside one.
pub fn render(status: &Status, node: Option<(&str, &MetricsSnapshot)>) -> String {
    let bounds: Vec<f64> = STAGE_BUCKETS_US
        .iter()
        .map(|us| *us as f64 / 1_000_000.0)
        .collect();
    let builder = PrometheusBuilder::new();
    // Refused only for an empty list of bounds; the node's are not empty (without them the
    // stage latency would render as a summary).
    let builder = builder
        .set_buckets_for_metric(Matcher::Full(STAGE_SECONDS.into()), &bounds)
        .unwrap_or_else(|_| PrometheusBuilder::new());
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        describe_metrics();
        sample(status).publish_database(&[]);
        for n in &status.nodes {
            metrics::gauge!("shardbox_leases_held", "node" => n.node.clone())
                .set(n.leases_held as f64);
        }
        if let Some((node, snapshot)) = node {
            publish_node(node, snapshot);
        }
    });
    handle.render()
}

/// The status view's numbers as core's gauge sample (the database's gauges only: its
/// `leases_held` is a node's, and each node's is set apart).
fn sample(status: &Status) -> GaugeSample {
    let depth = |shard: u32, d: &DepthView| ShardDepth {
        shard: ShardIndex(shard),
        due: d.due,
        delayed: d.delayed,
        retrying: d.retrying,
        parked: d.parked,
        replay: d.replay,
        blocked: d.blocked,
        delivered: d.delivered,
        oldest_due_at: d.oldest_due_at,
    };
    GaugeSample {
        shards: status
            .shards
            .iter()
            .map(|s| depth(s.shard, &s.depth))
            .collect(),
        totals: depth(0, &status.totals),
        now: status.now,
        leases_held: 0,
        dead_letters: status.dead_letters,
        catch_ups: status
            .running_catch_ups
            .iter()
            .map(|c| {
                (
                    c.id,
                    c.projection_kind.clone(),
                    c.replayed,
                    c.total_estimate,
                )
            })
            .collect(),
    }
}

/// The node's counters and stage histogram, from its snapshot. Each bucket's observations
/// are recorded at their mean (the bucket's sum over its count), which lies in the bucket:
/// the rendered buckets, count and sum are the node's exactly.
fn publish_node(node: &str, m: &MetricsSnapshot) {
    for (name, value) in m.counters() {
        metrics::counter!(name, "node" => node.to_owned()).absolute(value);
    }
    let latency = &m.stage_latency;
    let histogram = metrics::histogram!(STAGE_SECONDS, "node" => node.to_owned());
    for (count, sum_us) in latency.buckets.iter().zip(latency.bucket_sums_us) {
        if let Ok(count) = usize::try_from(*count) {
            if count > 0 {
                let mean_seconds = sum_us as f64 / count as f64 / 1_000_000.0;
                histogram.record_many(mean_seconds, count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::status::NodeView;
    use shardbox_core::metric_help;

    fn empty_status() -> Status {
        let depth = DepthView::of(&ShardDepth::empty(ShardIndex(0)), chrono::Utc::now());
        Status {
            database: "test".into(),
            now: chrono::Utc::now(),
            nodes_source: "",
            nodes: Vec::new(),
            live_nodes: 0,
            leases_held: 0,
            shards: Vec::new(),
            totals: depth,
            dead_letters: 0,
            blocked_targets: 0,
            by_kind: Vec::new(),
            running_catch_ups: Vec::new(),
            read_models: Vec::new(),
            shard_count: None,
            resharding: None,
            attention: Vec::new(),
        }
    }

    #[test]
    fn every_name_rendered_has_core_s_help_text() {
        let out = render(&empty_status(), Some(("n-1", &MetricsSnapshot::default())));
        let helps: Vec<&str> = out.lines().filter(|l| l.starts_with("# HELP ")).collect();
        assert!(helps.len() >= 20, "{out}");
        for line in helps {
            let (name, help) = line["# HELP ".len()..]
                .split_once(' ')
                .expect("name and help");
            assert_eq!(Some(help), metric_help(name), "{name}");
        }
    }

    #[test]
    fn counters_carry_the_node_and_a_type_line() {
        let mut m = MetricsSnapshot {
            delivered: 7,
            ..Default::default()
        };
        m.stage_latency.count = 3;
        m.stage_latency.buckets[0] = 2;
        m.stage_latency.bucket_sums_us[0] = 150;
        m.stage_latency.buckets[3] = 1;
        m.stage_latency.bucket_sums_us[3] = 800;
        let out = render(&empty_status(), Some(("n-1", &m)));
        assert!(
            out.contains("# TYPE shardbox_delivered_total counter\n"),
            "{out}"
        );
        assert!(
            out.contains("shardbox_delivered_total{node=\"n-1\"} 7\n"),
            "{out}"
        );
        assert!(
            out.contains("# TYPE shardbox_stage_seconds histogram\n"),
            "{out}"
        );
        assert!(
            out.contains("shardbox_stage_seconds_bucket{node=\"n-1\",le=\"0.0001\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("shardbox_stage_seconds_bucket{node=\"n-1\",le=\"0.001\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("shardbox_stage_seconds_sum{node=\"n-1\"} 0.00095\n"),
            "{out}"
        );
        assert!(
            out.contains("shardbox_stage_seconds_count{node=\"n-1\"} 3\n"),
            "{out}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut status = empty_status();
        status.nodes.push(NodeView {
            node: "a\"b\\c\nd".into(),
            member: true,
            started_at: None,
            last_heartbeat: None,
            alive_until: None,
            leases_held: 0,
            last_picked_at: None,
            last_lease_until: None,
        });
        let out = render(&status, None);
        assert!(
            out.contains("shardbox_leases_held{node=\"a\\\"b\\\\c\\nd\"} 0\n"),
            "{out}"
        );
    }
}

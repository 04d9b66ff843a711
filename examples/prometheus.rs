//! Prometheus metrics: install `metrics-exporter-prometheus`'s recorder before building the
//! Shardbox, run a node, and render what Prometheus would scrape — counters, the stage-latency
//! histogram, and the gauges (inbox depth by state, lag, leases, dead letters, blocked targets,
//! catch-ups) with their help texts.
//!
//! Run with `cargo run --example prometheus [path.db]`. It prints the exposition text once
//! the node has delivered a few messages. A real application serves `handle.render()` on its
//! `/metrics` route, or enables the exporter's `http-listener` feature and calls
//! `PrometheusBuilder::new().with_http_listener(addr).install()` instead (see
//! docs/operations.md).

use metrics_exporter_prometheus::PrometheusBuilder;
use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::storage::SqliteStorage;
use std::time::Duration;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Counter {
    value: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Add(i64);
impl Message for Add {
    const TYPE: &'static str = "prometheus-example.add";
}

#[derive(Debug, Serialize, Deserialize)]
struct Added(i64);
impl Message for Added {
    const TYPE: &'static str = "prometheus-example.added";
}

impl Aggregate for Counter {
    const KIND: &'static str = "counter";
    type Command = Add;
    type Event = Added;
    async fn handle(&self, c: &Add, _: &Context<'_>) -> Result<Vec<Added>, HandlerError> {
        if c.0 < 0 {
            return Err(HandlerError::new("negative amounts are refused"));
        }
        Ok(vec![Added(c.0)])
    }
    fn apply(&mut self, e: &Added) {
        self.value += e.0;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Stage latency as a histogram with these bounds (seconds); without buckets the exporter
    // renders a summary instead.
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full("shardbox_stage_seconds".into()),
            &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ],
        )?
        .install_recorder()?;

    let dir = tempfile::tempdir()?;
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| dir.path().join("prometheus.db"), Into::into);
    let shardbox = Shardbox::builder()
        .storage(SqliteStorage::open(&path).await?)
        .shards(4)
        .gauge_interval(Duration::from_millis(200))
        .kind_policy(
            Counter::KIND,
            shardbox::FailurePolicy::new(
                1,
                shardbox::Backoff::Fixed(Duration::from_millis(10)),
                shardbox::ExhaustedOutcome::DeadLetter,
            ),
        )
        .aggregate::<Counter>()
        .build()
        .await?;
    let node = shardbox.start();
    for i in 0..100 {
        shardbox
            .send::<Counter>(&format!("c-{}", i % 10), &Add(i))
            .await?;
    }
    // One poison message: a dead letter shows in the gauges.
    shardbox.send::<Counter>("c-0", &Add(-1)).await?;
    node.drain(Duration::from_secs(30)).await?;
    // Let the gauges be read once more after the drain.
    tokio::time::sleep(Duration::from_millis(500)).await;

    println!("{}", handle.render());
    node.shutdown().await?;
    Ok(())
}

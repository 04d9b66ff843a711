//! The gauges of a running node, read from storage every `gauge_interval` and published.

use crate::runner::env::DeliveryEnv;
use crate::runner::tasks::stopped;
use crate::storage::StorageReads;
use crate::telemetry::gauges::GaugeSample;
use std::sync::Arc;
use tokio::sync::watch;

/// Reads the gauges every `gauge_interval` and sets them (see [`GaugeSample`]) until `stop`.
pub(super) async fn report_gauges(env: Arc<DeliveryEnv>, mut stop: watch::Receiver<bool>) {
    crate::telemetry::describe::describe_metrics();
    let node = &env.config.node_id;
    let mut failing = false;
    loop {
        let now = env.clock.now();
        match GaugeSample::read(
            &StorageReads::new(env.storage.clone()),
            node,
            env.registry.shard_count(),
            now,
        )
        .await
        {
            Ok(sample) => {
                sample.publish(node);
                failing = false;
            }
            // Once per outage: the delivery's own errors say more.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "could not read the gauges; trying again next interval");
            }
            Err(_) => {}
        }
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            _ = tokio::time::sleep(env.config.gauge_interval) => {}
        }
    }
}

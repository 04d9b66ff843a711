//! The benchmark's application traffic, the same for every workload that counts bumps: a node
//! with the model's kinds and the run's settings, N bump commands sent round-robin over T
//! targets, and each target's counter checked against what was sent to it (nothing lost,
//! nothing applied twice).
//!
//! Used by the in-process workloads (`workloads`, `reshard`) and by the `cluster` workload's
//! parent and node processes alike, so that they measure the same work.

use crate::args::Args;
use crate::model::{Bump, Counter, Ledger};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::NodeId;
use std::sync::Arc;
use std::time::Duration;

/// A node over `storage` with the model's kinds and the run's settings (not started).
pub(crate) async fn shardbox(
    storage: Arc<dyn Storage>,
    a: &Args,
    node: &str,
) -> Result<Shardbox, String> {
    let builder = Shardbox::builder()
        .shared_storage(storage)
        .node_id(NodeId(node.to_owned()))
        .shards(a.shards)
        .page_size(a.page_size)
        .workers(a.workers)
        .poll_interval(Duration::from_millis(200))
        .aggregate::<Counter>()
        .projection::<Ledger>();
    let builder = match a.cache_capacity {
        Some(c) => builder.cache_capacity(c),
        None => builder,
    };
    builder.build().await.map_err(|e| e.to_string())
}

/// The id of the target that message `i` of a run over `targets` targets goes to.
pub(crate) fn target(i: usize, targets: usize) -> String {
    format!("c-{}", i % targets)
}

/// Sends `n` bumps from 4 tasks, round-robin over the targets, `batch` per write.
pub(crate) async fn send_all(
    sb: &Shardbox,
    n: usize,
    targets: usize,
    batch: usize,
) -> Result<(), String> {
    let mut tasks = Vec::new();
    for t in 0..4 {
        let sb = sb.clone();
        tasks.push(tokio::spawn(async move {
            // Each task sends its share in batches of `batch` commands, one write each; the
            // ids are made per batch, so the sender's memory does not grow with `n`.
            let mut next = t;
            while next < n {
                let ids: Vec<String> = (next..n)
                    .step_by(4)
                    .take(batch)
                    .map(|i| target(i, targets))
                    .collect();
                next += 4 * ids.len();
                let commands: Vec<(&str, Bump)> =
                    ids.iter().map(|id| (id.as_str(), Bump)).collect();
                sb.send_many::<Counter>(&commands)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Lost and double-applied messages: each target's counter against what was sent to it.
pub(crate) async fn check(sb: &Shardbox, n: usize, targets: usize) -> Result<(u64, u64), String> {
    let (mut lost, mut duplicates) = (0u64, 0u64);
    for t in 0..targets.min(n) {
        let expected = (n / targets + usize::from(t < n % targets)) as u64;
        let got = sb
            .aggregate_state::<Counter>(&target(t, targets))
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |c| c.count);
        lost += expected.saturating_sub(got);
        duplicates += got.saturating_sub(expected);
    }
    Ok((lost, duplicates))
}

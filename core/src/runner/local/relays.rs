//! The node's relay task, on a storage over several databases: it runs every relay round
//! after round while rows come, and otherwise waits for this node's next stage that wrote
//! outbox rows, or a tenth of a second (other nodes' stages), or the stop.
//!
//! ```text
//!  loop: relay_round ─► copied rows' shards ─► the node's observer (their workers wake)
//!        a pair failed (a database down) ─► warned once, retried every round until it copies
//!        nothing to copy ─► wait: outbox_written | 100 ms | stop
//! ```

use crate::runner::env::DeliveryEnv;
use crate::runner::tasks::stopped;
use crate::storage::ShardObserver;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long the task waits for a stage of this node before it looks at the outboxes again.
const RELAY_POLL: Duration = Duration::from_millis(100);

/// Runs the relays of `env`'s storage until `stop` (returns at once on one database).
pub(super) async fn relay_outboxes(
    env: Arc<DeliveryEnv>,
    observer: Arc<dyn ShardObserver>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(dbs) = env.storage.databases() else {
        return;
    };
    let node = env.config.node_id.0.clone();
    let mut failing: BTreeSet<(u32, u32)> = BTreeSet::new();
    loop {
        if *stop.borrow() || env.is_stopping() {
            return;
        }
        let round = dbs.relay_round().await;
        if !round.shards.is_empty() {
            observer.on_write(&round.shards);
        }
        if round.copied > 0 {
            metrics::counter!("shardbox_relayed_rows_total", "node" => node.clone())
                .increment(round.copied as u64);
        }
        let failed: BTreeSet<(u32, u32)> = round.failed.iter().map(|(f, t, _)| (*f, *t)).collect();
        for (from, to, error) in &round.failed {
            if !failing.contains(&(*from, *to)) {
                tracing::warn!(from, to, %error, "relay step failed; retrying every round until it copies again");
            }
        }
        for (from, to) in failing.difference(&failed) {
            tracing::info!(from, to, "relay copying again");
        }
        failing = failed;
        if round.busy() {
            continue;
        }
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            _ = dbs.outbox_written() => {}
            _ = tokio::time::sleep(RELAY_POLL) => {}
        }
    }
}

//! Following the kinds' stored controls: a node reads them (pauses, run-time policies and
//! limits) every poll interval, and before its first stage, into its [`KindRules`].
//!
//! ```text
//!  first stage of the node ──► read (if never read) ┐
//!  every poll_interval ──────► read ────────────────┼─► kind_controls() (+ members, if a kind
//!  a pause/resume/set here ──► read at once ────────┘   has a rate: its nodes divide it)
//!                                                      ─► station.kinds().replace(snapshot)
//!                                                      ─► gauge shardbox_kind_paused{kind}
//! ```
//!
//! So a change made on any node is followed by every node within a poll interval, and by the
//! node that made it at once. A failed read keeps the last snapshot (logged).
//!
//! [`KindRules`]: crate::stage::kind_rules::KindRules

use crate::model::error::StorageError;
use crate::model::kind_controls::KindControls;
use crate::runner::env::DeliveryEnv;
use crate::runner::tasks::stopped;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;

impl DeliveryEnv {
    /// Reads the kinds' stored controls into the stations' rules (see the module docs).
    pub async fn refresh_kind_controls(&self) -> Result<(), StorageError> {
        let mut snapshot = KindControls::new(self.storage.kind_controls().await?);
        let configured_rate = self
            .config
            .kind_limits
            .values()
            .any(|l| l.rate_per_second.is_some());
        if snapshot.any_rate() || configured_rate {
            let mut nodes_of: HashMap<String, u32> = HashMap::new();
            for member in self.storage.members(self.clock.now()).await? {
                for k in member.kinds {
                    *nodes_of.entry(k.kind).or_default() += 1;
                }
            }
            snapshot = snapshot.with_nodes(nodes_of);
        }
        crate::telemetry::gauges::publish_kind_controls(&snapshot, &self.config.node_id);
        self.station.kinds().replace(snapshot);
        Ok(())
    }

    /// Reads the controls if this node never has (before its first stage: a paused kind
    /// stays paused across a restart from the first page on).
    pub(crate) async fn ensure_kind_controls(&self) -> Result<(), StorageError> {
        if self.station.kinds().is_loaded() {
            return Ok(());
        }
        self.refresh_kind_controls().await
    }
}

/// Reads the controls every `poll_interval` until `stop`.
pub(crate) async fn follow_kind_controls(env: Arc<DeliveryEnv>, mut stop: watch::Receiver<bool>) {
    let interval = env.config.poll_interval;
    loop {
        if let Err(e) = env.refresh_kind_controls().await {
            tracing::warn!(error = %e, "reading the kinds' controls failed; keeping the last read");
        }
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            _ = tokio::time::sleep(interval) => {}
        }
        if env.is_stopping() {
            break;
        }
    }
}

//! The admin HTTP surface mounted in an application (the `admin` feature): the router of
//! `shardbox-admin` over this node's storage, with the node beside it.
//!
//! ```text
//!  Shardbox + Node ─► admin_state(&node) ─► AdminState { storage, node: MountedNode }
//!                                           └─► shardbox::admin::router(state) ─► axum
//! ```
//!
//! Mounted, readiness also checks the node's workers, `/metrics` adds the node's counters,
//! a requeue and a catch-up start use the application's shard strategy and wake the
//! workers at once.
//!
//! ```no_run
//! # async fn run(shardbox: shardbox::Shardbox) -> Result<(), Box<dyn std::error::Error>> {
//! let node = shardbox.start();
//! let app = shardbox::admin::router(shardbox.admin_state(&node).allow_actions(true));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9187").await?;
//! tokio::spawn(async move { shardbox::admin::axum::serve(listener, app).await });
//! // … later
//! node.shutdown().await?;
//! # Ok(()) }
//! ```

use crate::shardbox::{Node, Shardbox};
use shardbox_core::{Addressing, Liveness, MetricsSnapshot, NodeLiveness, ShardIndex};
use std::sync::Arc;

pub use shardbox_admin::{axum, history, http, router, views, AdminError, AdminState, RunningNode};

/// A running node as the admin surface sees it.
struct MountedNode {
    shardbox: Shardbox,
    liveness: NodeLiveness,
}

impl RunningNode for MountedNode {
    fn node_id(&self) -> String {
        self.shardbox.config().node_id.0.clone()
    }

    fn metrics(&self) -> MetricsSnapshot {
        self.shardbox.metrics()
    }

    fn liveness(&self) -> Liveness {
        self.liveness.check()
    }

    fn addressing(&self) -> &Addressing {
        self.shardbox.env().registry.addressing()
    }

    fn requeued(&self, requeued: usize, shards: &[ShardIndex]) {
        let env = self.shardbox.env();
        env.metrics.record_requeued(requeued);
        env.notify(shards);
    }

    fn unblocked(&self, unblocked: usize, shards: &[ShardIndex]) {
        let env = self.shardbox.env();
        env.metrics.record_unblocked(unblocked);
        env.notify(shards);
    }

    fn kinds_changed(&self, shards: &[ShardIndex]) {
        let env = self.shardbox.env().clone();
        let shards = shards.to_vec();
        // Read on a task: the caller is a request handler that answers meanwhile.
        tokio::spawn(async move {
            if let Err(e) = env.refresh_kind_controls().await {
                tracing::warn!(error = %e, "reading the kinds' controls after a change failed");
            }
            env.notify(&shards);
        });
    }
}

impl Shardbox {
    /// The admin router's state for this application and its running `node`: operator
    /// actions off until `.allow_actions(true)`.
    pub fn admin_state(&self, node: &Node) -> AdminState {
        AdminState::new(self.env().storage.clone()).node(Arc::new(MountedNode {
            shardbox: self.clone(),
            liveness: node.liveness(),
        }))
    }
}

//! A node's place in the cluster: what membership, lease renewal and re-sharding need of a
//! node, and no more.
//!
//! ```text
//!  NodeSeat ─┬─ lock_table: the WorkRegistry (pick up, renew, release, beat, re-shard)
//!            ├─ node_id, lease and poll terms
//!            └─ clock: the node's clock on the storage's time line (see storage_clock)
//! ```
//!
//! A running node's [`DeliveryEnv`](crate::runner::env::DeliveryEnv) holds one; a tool
//! that re-shards (the `shardbox` command line) builds one over the database it opened.

use crate::cluster::storage_clock::StorageClock;
use crate::model::clock::Clock;
use crate::model::config::DeliveryConfig;
use crate::model::ids::NodeId;
use crate::model::kind_role::RegisteredKind;
use crate::storage::WorkRegistry;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

/// A node's place in the cluster (see the module docs).
pub struct NodeSeat {
    /// The lock table: leases, membership, the recorded layout.
    pub lock_table: Arc<dyn WorkRegistry>,
    /// This node.
    pub node_id: NodeId,
    /// Time: the node's clock read off the storage's clock, or a manual clock as it is.
    pub clock: Arc<dyn Clock>,
    /// The correction of `clock`, unless it is manual.
    storage_clock: Option<Arc<StorageClock>>,
    /// How long a lease lasts unless renewed.
    pub lease_duration: Duration,
    /// The poll interval (the membership beats once per interval).
    pub poll_interval: Duration,
    lease_span: chrono::Duration,
    /// The kinds this node has registered, recorded with every membership beat (none for a
    /// tool's seat).
    pub kinds: Vec<RegisteredKind>,
}

impl std::fmt::Debug for NodeSeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSeat")
            .field("node_id", &self.node_id)
            .field("lease_duration", &self.lease_duration)
            .finish_non_exhaustive()
    }
}

impl NodeSeat {
    /// The seat of `config.node_id` at `lock_table`. Unless `clock` is manual, it is read off
    /// the storage's clock from the first [`NodeSeat::sync_clock`].
    pub fn new(
        lock_table: Arc<dyn WorkRegistry>,
        config: &DeliveryConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let storage_clock =
            (!clock.is_manual()).then(|| Arc::new(StorageClock::new(clock.clone())));
        let clock: Arc<dyn Clock> = match &storage_clock {
            Some(corrected) => corrected.clone(),
            None => clock,
        };
        NodeSeat {
            lock_table,
            node_id: config.node_id.clone(),
            clock,
            storage_clock,
            lease_duration: config.lease_duration,
            poll_interval: config.poll_interval,
            lease_span: config.lease_span(),
            kinds: Vec::new(),
        }
    }

    /// This seat, recording `kinds` in the membership with every beat.
    pub fn with_kinds(mut self, kinds: Vec<RegisteredKind>) -> Self {
        self.kinds = kinds;
        self
    }

    /// Reads the storage's clock again and corrects [`NodeSeat::clock`] by it (nothing for a
    /// manual clock or a store without a clock). A failed read keeps the last correction
    /// (logged).
    pub async fn sync_clock(&self) {
        if let Some(clock) = &self.storage_clock {
            if let Err(e) = clock.sync(self.lock_table.as_ref()).await {
                tracing::warn!(error = %e, "could not read the storage's clock; the node keeps its last offset to it");
            }
        }
    }

    /// When a lease taken or renewed at `now` runs out.
    pub fn lease_until(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + self.lease_span
    }
}

//! What the router serves from: the storage, the action switch, and — when mounted in a
//! running application — the node it runs beside.
//!
//! A standalone server (`shardbox serve`) has only the storage: its readiness checks the
//! database and the schema, its metrics are the gauges read from the database, and a
//! requeue goes to the shard a dead letter died in. Mounted in an application, the node
//! adds its workers to readiness, its counters to the metrics, its shard strategy to a
//! requeue and a catch-up start, counts the action in its counters and wakes its workers at
//! once.

use shardbox_core::storage::StorageReads;
use shardbox_core::{Addressing, Liveness, MetricsSnapshot, ShardIndex, Storage};
use std::sync::Arc;

/// The running node an application mounts the router beside (the facade implements it for
/// a `Shardbox` and its `Node`).
pub trait RunningNode: Send + Sync {
    /// The node's id (the `node` label of its counters).
    fn node_id(&self) -> String;
    /// Its delivery counters now.
    fn metrics(&self) -> MetricsSnapshot;
    /// Whether its workers, poller and lease watch still run.
    fn liveness(&self) -> Liveness;
    /// How the application places targets in shards (its strategy and shard count): the
    /// actions that write Inbox rows (requeue, catch-up start) place them by it.
    fn addressing(&self) -> &Addressing;
    /// Counts `requeued` dead letters put back into `shards` and wakes their workers.
    fn requeued(&self, requeued: usize, shards: &[ShardIndex]);
    /// Counts `unblocked` blocked messages let go on in `shards` and wakes their workers.
    fn unblocked(&self, unblocked: usize, shards: &[ShardIndex]);
}

/// The router's state.
#[derive(Clone)]
pub struct AdminState {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) actions: bool,
    pub(crate) node: Option<Arc<dyn RunningNode>>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("storage", &self.storage.describe())
            .field("actions", &self.actions)
            .field("node", &self.node.as_ref().map(|n| n.node_id()))
            .finish()
    }
}

impl AdminState {
    /// A read-only surface over `storage`: operator actions are refused (403) until
    /// [`allow_actions`](Self::allow_actions).
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        AdminState {
            storage,
            actions: false,
            node: None,
        }
    }

    /// Whether the POST actions (requeue, purge, unblock) are served.
    pub fn allow_actions(mut self, allowed: bool) -> Self {
        self.actions = allowed;
        self
    }

    /// The running node beside which the router is mounted.
    pub fn node(mut self, node: Arc<dyn RunningNode>) -> Self {
        self.node = Some(node);
        self
    }

    /// The storage's reads, for the views that only read.
    pub fn reads(&self) -> StorageReads {
        StorageReads::new(self.storage.clone())
    }

    /// Whether actions are allowed.
    pub fn actions_allowed(&self) -> bool {
        self.actions
    }
}

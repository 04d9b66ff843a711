//! What the router serves from: the storage, the action switch, and — when mounted in a
//! running application — the node it runs beside.
//!
//! A standalone server (`shardbox serve`) has only the storage: its readiness checks the
//! database and the schema, its metrics are the gauges read from the database, and a
//! requeue goes to the shard a dead letter died in. Mounted in an application, the node
//! adds its workers to readiness, its counters to the metrics, its shard strategy to a
//! requeue and a catch-up start, counts the action in its counters and wakes its workers at
//! once.
//!
//! Both keep the dashboard's history ([`History`]): the router starts a sampler that reads
//! the status every [`SAMPLE_EVERY`](crate::history::SAMPLE_EVERY) while the router lives.

use crate::history::{Counters, History, Sample};
use crate::http::guard::LOOPBACK_HOSTS;
use crate::views::status::Status;
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
    /// A kind was paused, resumed (its messages made due in `shards`) or given new run-time
    /// settings: the node reads the kinds' controls again now rather than at its next poll,
    /// and wakes the workers of `shards`. The default does nothing (the node follows at its
    /// next poll interval).
    fn kinds_changed(&self, shards: &[ShardIndex]) {
        let _ = shards;
    }
}

/// The router's state.
#[derive(Clone)]
pub struct AdminState {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) actions: bool,
    pub(crate) node: Option<Arc<dyn RunningNode>>,
    /// The names requests may be addressed to (their `Host`), see [`crate::http::guard`].
    pub(crate) allowed_hosts: Vec<String>,
    /// The status samples the dashboard plots (shared by every clone of the state).
    pub(crate) history: Arc<History>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("storage", &self.storage.describe())
            .field("actions", &self.actions)
            .field("node", &self.node.as_ref().map(|n| n.node_id()))
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

impl AdminState {
    /// A read-only surface over `storage`: operator actions are refused (403) until
    /// [`allow_actions`](Self::allow_actions). It answers requests addressed to the loopback
    /// names only ([`LOOPBACK_HOSTS`]) until [`allow_hosts`](Self::allow_hosts) adds others.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        AdminState {
            storage,
            actions: false,
            node: None,
            allowed_hosts: LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect(),
            history: Arc::new(History::new()),
        }
    }

    /// Whether the POST actions (requeue, purge, unblock) are served.
    pub fn allow_actions(mut self, allowed: bool) -> Self {
        self.actions = allowed;
        self
    }

    /// Also answers requests addressed to `hosts` (their `Host` header; a port is ignored):
    /// the names or addresses operators and scrapers reach the surface by when it listens on
    /// another address than loopback, e.g. `["admin.example", "10.0.0.5"]`. Every other
    /// name is refused with 403, so that a web page cannot reach the surface through a name
    /// of its own that resolves here (DNS rebinding). `"*"` ([`ANY_HOST`](crate::http::guard::ANY_HOST)) turns the check
    /// off: only for a surface behind a proxy that checks the name itself.
    ///
    /// ```
    /// # fn state(storage: std::sync::Arc<dyn shardbox_core::Storage>) {
    /// use shardbox_admin::AdminState;
    /// let state = AdminState::new(storage).allow_hosts(["admin.example"]);
    /// assert!(state.allowed_hosts().iter().any(|h| h == "admin.example"));
    /// assert!(state.allowed_hosts().iter().any(|h| h == "localhost"));
    /// # }
    /// ```
    pub fn allow_hosts<I, H>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = H>,
        H: Into<String>,
    {
        for host in hosts {
            let host = host.into();
            if !self.allowed_hosts.contains(&host) {
                self.allowed_hosts.push(host);
            }
        }
        self
    }

    /// The names requests may be addressed to.
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed_hosts
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

    /// The status samples kept for the dashboard's plots (`GET /api/history`). A tool that
    /// has its own samples (or a test) may [`record`](History::record) them.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Keeps a sample of `status` (with the mounted node's counters) if one is due.
    pub(crate) fn sample(&self, status: &Status) {
        let counters = self.node.as_ref().map(|n| Counters::of(&n.metrics()));
        self.history.record(Sample::of(status, counters));
    }
}

/// Samples the Inbox of `state` (its depths and dead-letter count, [`Sample::read`]) every
/// [`SAMPLE_EVERY`](crate::history::SAMPLE_EVERY) into its history, skipping a tick when a
/// page's status poll took a sample meanwhile; ends when every
/// router over the state is dropped (it holds the history weakly). Needs a tokio runtime:
/// without one (a router built outside any), nothing is sampled but the page's polls.
pub(crate) fn start_sampler(state: &AdminState) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let history = Arc::downgrade(&state.history);
    let reads = state.reads();
    let node = state.node.clone();
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(crate::history::SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(history) = history.upgrade() else {
                return;
            };
            let now = chrono::Utc::now();
            if !history.wants(now) {
                continue;
            }
            let counters = node.as_ref().map(|n| Counters::of(&n.metrics()));
            match Sample::read(&reads, now, counters).await {
                Ok(sample) => {
                    history.record(sample);
                }
                Err(e) => tracing::debug!("history sample skipped: {e}"),
            }
        }
    });
}

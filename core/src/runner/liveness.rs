//! Whether a running node's long-lived tasks (workers, poller, lease watch) are still
//! running: what a readiness probe asks. A [`NodeLiveness`] is a cheap clone that an admin
//! surface keeps while the application owns the node handle.
//!
//! A task ends only at shutdown or by a bug (handler panics are caught as failed attempts),
//! so one that ended while no stop was asked for means the node is not serving its shards.

use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// A watch on a node's tasks (from [`RunnerHandle::liveness`](crate::RunnerHandle::liveness)).
#[derive(Debug, Clone)]
pub struct NodeLiveness {
    tasks: Arc<[AbortHandle]>,
    stop: watch::Receiver<bool>,
}

/// What a [`NodeLiveness`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// Tasks still running.
    pub running: usize,
    /// Tasks the node started (workers, poller, lease watch).
    pub started: usize,
    /// Whether the node was asked to stop (shutdown).
    pub stopping: bool,
}

impl Liveness {
    /// Every task runs and no stop was asked for.
    pub fn alive(&self) -> bool {
        !self.stopping && self.started > 0 && self.running == self.started
    }
}

impl NodeLiveness {
    pub(crate) fn new(tasks: Vec<AbortHandle>, stop: watch::Receiver<bool>) -> Self {
        NodeLiveness {
            tasks: tasks.into(),
            stop,
        }
    }

    /// Looks at the tasks now.
    pub fn check(&self) -> Liveness {
        Liveness {
            running: self.tasks.iter().filter(|t| !t.is_finished()).count(),
            started: self.tasks.len(),
            stopping: *self.stop.borrow(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_finished_task_or_a_stop_is_not_alive() {
        let (tx, rx) = watch::channel(false);
        let forever = tokio::spawn(std::future::pending::<()>());
        let done = tokio::spawn(async {});
        let live = NodeLiveness::new(vec![forever.abort_handle()], rx.clone());
        assert!(live.check().alive());
        let _ = done.await;
        let dead = NodeLiveness::new(vec![forever.abort_handle()], rx);
        tx.send_replace(true);
        assert_eq!(
            dead.check(),
            Liveness {
                running: 1,
                started: 1,
                stopping: true
            }
        );
        assert!(!dead.check().alive());
        forever.abort();
    }
}

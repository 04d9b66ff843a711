//! The tasks a running node spawned besides its workers: take-overs, linger releases, the
//! TTL sweep, the catch-up resume. The node handle owns them, so shutdown can stop and await
//! every one instead of leaving them running past the node.
//!
//! A task's waiting (a sleep until a lease ends, a linger, a sweep interval) ends at the stop
//! signal; work it has begun (a stage, a release) runs to its end and is awaited.

use crate::sync::lock;
use std::future::Future;
use std::sync::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// The spawned tasks of one running node, and the signal that stops their waiting.
pub(crate) struct NodeTasks {
    handles: Mutex<Vec<JoinHandle<()>>>,
    stop: watch::Receiver<bool>,
}

impl NodeTasks {
    /// Tasks that stop waiting when `stop` turns true.
    pub(crate) fn new(stop: watch::Receiver<bool>) -> Self {
        NodeTasks {
            handles: Mutex::new(Vec::new()),
            stop,
        }
    }

    /// A receiver of the stop signal, for a task to select on while it waits.
    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.clone()
    }

    /// Spawns `task` in the current span and keeps its handle (finished ones are dropped as
    /// new ones come, so the list stays as long as what is running).
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task.in_current_span());
        let mut handles = lock(&self.handles);
        handles.retain(|h| !h.is_finished());
        handles.push(handle);
    }

    /// Awaits every task spawned so far (and those they spawn meanwhile); returns how many
    /// panicked.
    pub(crate) async fn join_all(&self) -> usize {
        let mut panicked = 0;
        loop {
            let handles = std::mem::take(&mut *lock(&self.handles));
            if handles.is_empty() {
                return panicked;
            }
            for handle in handles {
                if let Err(e) = handle.await {
                    tracing::error!(error = %e, "a node task panicked");
                    panicked += 1;
                }
            }
        }
    }
}

/// Waits until `stop` turns true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn join_all_awaits_every_task_and_waiting_ends_at_the_stop() {
        let (tx, rx) = watch::channel(false);
        let tasks = Arc::new(NodeTasks::new(rx));
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let (done, mut stop) = (done.clone(), tasks.stop_signal());
            tasks.spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
                    _ = stopped(&mut stop) => {}
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        tx.send_replace(true);
        let joined = tokio::time::timeout(Duration::from_secs(5), tasks.join_all()).await;
        assert_eq!(joined.expect("tasks stopped waiting"), 0);
        assert_eq!(done.load(Ordering::SeqCst), 3);
    }
}

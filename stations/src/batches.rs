//! Running the targets' batches of a page at once.
//!
//! ```text
//!  batches (target, its rows in seq order) ─► each polled once on the stage's task:
//!      done ─► its result                    (a fold, a decision: no task, no timer)
//!      waits ─► goes on as a tokio task of its own, at most handler_concurrency at a time
//!               on this worker and max_in_flight_handlers on the node; each handler call
//!               of a limited kind waits for its turn under the kind's gate (`KindRules`)
//!        ─► results back in the order of the batches, whatever order they finished in
//! ```
//!
//! A target has one batch in a page, so its messages still run one after another in `seq`
//! order; only different targets overlap. A batch that awaits (I/O, a timer) becomes a task
//! of its own, so the others start meanwhile and a panic the adapter did not catch fails that
//! target's messages instead of the worker (a panic in the first poll too). A batch that is
//! done at its first poll — most folds and decisions — costs no task (the `catch-up` benchmark's
//! 200,000 events on SQLite took 3.8–4.6 CPU-s with a task per target, 3.2–3.8 without). A handler that blocks its thread in that
//! first poll blocks the stage's thread for as long, and the page's later targets start after
//! it; the lease heartbeat still goes on on another thread (the stage first yields, so that
//! the tasks it woke are not left in its thread's slot, see `run_batches`), which is why a
//! blocking handler belongs in `spawn_blocking` (docs/configuration.md). The results are
//! applied to the Conveyor by the caller, in the batches' order: the commit does not depend on
//! timing.

use shardbox_core::storage::EntityState;
use shardbox_core::{
    BatchResult, BatchRun, EntityHandler, HandlerError, InboxMessage, MessageOutcome,
    StationContext, StoredState,
};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// One target's batch to run: its handler, its state and its messages (in `seq` order).
pub(crate) struct Batch {
    pub(crate) handler: Arc<dyn EntityHandler>,
    pub(crate) state: Option<EntityState>,
    /// Shared, not copied: the caller keeps them (a catch-up page that must go through the
    /// Inbox after all writes them back).
    pub(crate) messages: Arc<[InboxMessage]>,
}

/// The node-wide bound on handler calls in flight, shared by every worker of the delivery
/// (made on first use from the configuration, which is the same for all of them).
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight {
    permits: Arc<OnceLock<Arc<Semaphore>>>,
}

impl InFlight {
    fn semaphore(&self, max: usize) -> Arc<Semaphore> {
        self.permits
            .get_or_init(|| Arc::new(Semaphore::new(max)))
            .clone()
    }
}

/// Runs `batches` concurrently (see the module docs) and returns their results in order.
pub(crate) async fn run_batches(
    env: &Arc<StationContext>,
    in_flight: &InFlight,
    batches: Vec<Batch>,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<BatchResult> {
    let per_worker = env.config().handler_concurrency.max(1);
    let node_wide = in_flight.semaphore(env.config().max_in_flight_handlers.max(1));
    let mut results: Vec<Option<BatchResult>> = (0..batches.len()).map(|_| None).collect();
    let lengths: Vec<(usize, &'static str)> = batches
        .iter()
        .map(|b| (b.messages.len(), b.handler.kind()))
        .collect();
    let mut running: JoinSet<(usize, BatchResult)> = JoinSet::new();
    let mut ids = std::collections::HashMap::new();
    // A batch may run its first part on this task (below), and a handler may block its
    // thread there: first let the tasks this stage woke run (the lease heartbeat among them)
    // — the runtime keeps the one woken last in a slot of this thread that no other thread
    // takes it from.
    tokio::task::yield_now().await;
    for (n, batch) in batches.into_iter().enumerate() {
        if running.len() >= per_worker {
            settle_one(&mut running, &mut ids, &lengths, &mut results).await;
        }
        // Never closed, so acquiring fails only if it were: then run without a permit.
        let permit = node_wide.clone().acquire_owned().await.ok();
        let env = env.clone();
        let mut call = Box::pin(async move {
            let _permit = permit;
            let kind = batch.handler.kind();
            let gate = env.kinds().gate_of(kind);
            let run = BatchRun {
                now,
                services: env.registry().services(),
                timeout: env.kinds().handler_timeout_of(kind),
                max_payload_bytes: env.config().max_payload_bytes,
                gate: gate.as_deref(),
                trace: env.registry().trace_propagator(),
                upcasters: env.registry().upcasters(),
            };
            let messages: Vec<&InboxMessage> = batch.messages.iter().collect();
            let result = batch
                .handler
                .handle_batch(batch.state.as_ref().map(StoredState::of), &messages, run)
                .await;
            (n, result)
        });
        // Polled once here first: a batch that is done at once (a fold, a decision on the
        // state) costs no task; one that waits goes on as a task of its own.
        let first = std::future::poll_fn(|cx| {
            Poll::Ready(catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))))
        })
        .await;
        match first {
            Ok(Poll::Ready((n, result))) => results[n] = Some(result),
            Ok(Poll::Pending) => {
                let handle = running.spawn(call);
                ids.insert(handle.id(), n);
            }
            Err(panic) => {
                let (len, kind) = lengths[n];
                results[n] = Some(failed(len, panicked(kind, panic.as_ref())));
            }
        }
    }
    while !running.is_empty() {
        settle_one(&mut running, &mut ids, &lengths, &mut results).await;
    }
    results
        .into_iter()
        .zip(&lengths)
        .map(|(result, &(len, kind))| {
            result.unwrap_or_else(|| failed(len, format!("handler task of `{kind}` was lost")))
        })
        .collect()
}

/// Waits for one task and stores its result (or the failure of its batch if it died).
async fn settle_one(
    running: &mut JoinSet<(usize, BatchResult)>,
    ids: &mut std::collections::HashMap<tokio::task::Id, usize>,
    lengths: &[(usize, &'static str)],
    results: &mut [Option<BatchResult>],
) {
    let Some(joined) = running.join_next_with_id().await else {
        return;
    };
    match joined {
        Ok((id, (n, result))) => {
            ids.remove(&id);
            results[n] = Some(result);
        }
        Err(e) => {
            let Some(n) = ids.remove(&e.id()) else {
                return;
            };
            let (len, kind) = lengths[n];
            let reason = if e.is_panic() {
                panicked(kind, e.into_panic().as_ref())
            } else {
                format!("handler task of `{kind}` was cancelled")
            };
            results[n] = Some(failed(len, reason));
        }
    }
}

/// Why a batch of `kind` failed whose run panicked (outside the adapter's own guard).
fn panicked(kind: &str, panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    format!("handler of `{kind}` panicked: {message}")
}

/// The result of a batch of `len` whose first message failed for `reason`.
fn failed(len: usize, reason: String) -> BatchResult {
    let mut outcomes = vec![MessageOutcome::Failed(HandlerError::new(reason))];
    outcomes.resize(len, MessageOutcome::NotAttempted);
    BatchResult {
        outcomes,
        ..BatchResult::default()
    }
}

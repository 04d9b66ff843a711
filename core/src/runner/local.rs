//! The node runner: tokio worker tasks that serve the shards of a delivery, on one node of
//! possibly many sharing the database.
//!
//! ```text
//!  local write ──────────────┐
//!  WriteListener (other      ├─► WakeQueue ─► queue ─► worker 0..W ─► Delivery::deliver_while
//!  nodes' writes, NOTIFY) ───┘      ▲                    (a turn: ≥ 1 stage, then on while
//!  poller, every poll_interval      │ free shards         nobody waits; requeued if yielded)
//!  (at once after missed writes) ───┘ with due rows
//!  lease watch, every poll_interval: members ─► assign (preferred owners, see `membership`)
//!     + lock table ─► plan_round ─► shards for the poller (this node's, others' idle ones),
//!     held-elsewhere marks, take-overs of orphaned shards (now, or when a lease ends)
//! ```
//!
//! A write wakes its shard's worker at once: on this node through the observer, on the other
//! nodes through the storage's [`WriteListener`](crate::WriteListener) when it has one. The
//! poller is the fallback for delayed rows, retries and writes nobody heard of; it probes the
//! free shards from this node's own offset ([`ShardCycle`]). A shard another node holds is
//! left to it: wake-ups for it are ignored until its lease ends or the next poll round
//! ([`HeldElsewhere`]), because its holder hears the same writes. The lease watch reads the
//! lock table on its own cadence, so that a slow probe round never delays a take-over: a shard
//! whose holder's lease ran out without a release is served at once on a task of its own, and
//! a lease that ends before the next look gets a timer for the moment it ends. Workers serve a
//! shard for a turn ([`should_yield`]), so that one busy shard does not keep a worker from the
//! others. Idle workers wait on the queue; the poller and the lease watch sleep between rounds.
//! Each shard has a preferred owner among the live members ([`crate::cluster::assign`]): a node
//! serves its own shards, leaves the others' to them (wake-ups ignored, not polled) unless
//! they sit free with due rows for a poll interval, and a turn on another member's shard hands
//! it back after one stage. Shutdown leaves the membership first, so that the other nodes take
//! this node's shards as its workers release them.
//! With `lease_linger` set (the default), a worker that drained its own shard keeps the lease (`Parked`): the next
//! turn on the shard starts without a pick-up, and a timer releases the lease if none comes,
//! so a trickle of writes does not pay a pick-up and a release (two write transactions) for
//! every message.
//!
//! Every `select!` of the runner is `biased` (the stop signal first): a stop always wins, and
//! which branch runs never depends on tokio's random branch order, so a run under a manual
//! clock and a paused current-thread runtime replays exactly (the simulation's seeds).
//!
//! Every task runs in a span carrying the node id (and the worker), so every log line of
//! the node names it. Shutdown lets each worker finish its current stage and release its
//! lease, and stops the listener; other nodes find the freed shards at their next poll.

use crate::cluster::membership::{beat_membership, OwnersView};
use crate::entity::guard::CatchUnwind;
use crate::model::error::DeliveryError;
use crate::model::ids::{ShardIndex, WorkerId};
use crate::runner::cycle::{ending_within, plan_round, ShardCycle};
use crate::runner::delivery::Delivery;
use crate::runner::env::DeliveryEnv;
use crate::runner::kind_controls::follow_kind_controls;
use crate::runner::sweep::sweep_periodically;
use crate::runner::tasks::stopped;
use crate::runner::turn::{retry_failed_release, serve};
use crate::runner::wake_queue::WakeQueue;
use crate::runner::worker::{panic_message, supervise};
use crate::storage::listener::{ListenerHandle, ListenerStats};
use crate::storage::observer::ShardObserver;
use crate::storage::StorageReads;
use crate::sync::lock;
use crate::telemetry::gauges::GaugeSample;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Starts the workers of a node.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalRunner;

impl LocalRunner {
    /// Starts `config.workers` workers, the poller and — if the storage can hear other
    /// processes' writes — the listener, on the current tokio runtime.
    pub fn start(delivery: Arc<Delivery>) -> RunnerHandle {
        let env = delivery.env().clone();
        env.clear_stop();
        let (stop_tx, stop_rx) = watch::channel(false);
        let queue = Arc::new(WakeQueue::new(env.clone(), stop_rx.clone()));
        let observer: Arc<dyn ShardObserver> = queue.clone();
        env.observe(observer.clone());
        let node = env.config.node_id.clone();
        let mut tasks = Vec::new();
        for w in 0..env.config.workers {
            let worker = WorkerId(w as u32);
            let span = tracing::info_span!("worker", node = %node, worker = %worker);
            tasks.push(tokio::spawn(
                supervise(delivery.clone(), queue.clone(), stop_rx.clone(), worker)
                    .instrument(span),
            ));
        }
        let cycle = ShardCycle::for_node(&node, env.registry.shard_count());
        let (free_tx, free_rx) = watch::channel(cycle.iter().collect());
        let span = tracing::info_span!("poller", node = %node);
        tasks.push(tokio::spawn(
            poll(delivery.clone(), queue.clone(), stop_rx.clone(), free_rx).instrument(span),
        ));
        let span = tracing::info_span!("lease_watch", node = %node);
        tasks.push(tokio::spawn(
            watch_leases(delivery.clone(), queue.clone(), stop_rx.clone(), free_tx)
                .instrument(span),
        ));
        let listener = listen(&env, queue.clone());
        // The node is a member while it beats (every poll interval, alive for a lease).
        let span = tracing::info_span!("membership", node = %node);
        queue
            .tasks
            .spawn(beat_membership(env.seat.clone(), stop_rx.clone()).instrument(span));
        // Gauges (depth, lag, leases, dead letters, catch-ups) are read every gauge_interval.
        let span = tracing::info_span!("gauges", node = %node);
        queue
            .tasks
            .spawn(report_gauges(env.clone(), stop_rx.clone()).instrument(span));
        // Kinds paused, run-time policies and limits are read every poll interval.
        let span = tracing::info_span!("kind_controls", node = %node);
        queue
            .tasks
            .spawn(follow_kind_controls(env.clone(), stop_rx.clone()).instrument(span));
        // Messages whose TTL passes before they are due are expired by a periodic sweep.
        let span = tracing::info_span!("ttl_sweep", node = %node);
        queue
            .tasks
            .spawn(sweep_periodically(delivery.clone(), stop_rx.clone()).instrument(span));
        // Everything written before the start is found by the first poll, at once.
        tracing::info!(
            node = %node,
            workers = env.config.workers,
            shards = env.registry.shard_count(),
            first_shard = %cycle.offset(),
            listening = listener.is_some(),
            "node runner started"
        );
        RunnerHandle {
            delivery,
            queue,
            observer,
            stop: stop_tx,
            tasks,
            listener,
            shut_down: false,
        }
    }
}

/// Starts the storage's write listener, if it has one, feeding `queue`.
fn listen(env: &DeliveryEnv, queue: Arc<WakeQueue>) -> Option<ListenerHandle> {
    let listener = env.storage.write_listener()?;
    // Every shard a layout can have: the count may change under the listener (re-sharding).
    match listener.listen(&env.config.node_id, crate::MAX_SHARDS, queue) {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::warn!(node = %env.config.node_id, error = %e, "could not listen for other nodes' writes; finding them by polling");
            None
        }
    }
}

/// Takes over `shard`, whose holder's lease ran out, if it has due rows: served at once on
/// the calling task rather than queued behind the workers' turns — its messages have already
/// waited a lease duration. If a worker of this node has it queued, it moves to the front.
///
/// A turn that panics (outside the handlers, e.g. in a user station) has already scheduled
/// its shard's retry (see `turn`); the panic ends here, counted in `worker_restarts` and
/// logged at ERROR as a worker's death is — a take-over's turn is a worker's turn on a task
/// of its own, with no supervisor to count it.
async fn take_over(delivery: &Arc<Delivery>, queue: &Arc<WakeQueue>, shard: ShardIndex) {
    let env = delivery.env();
    if env.is_stopping() || queue.is_paused() {
        return;
    }
    match env.probe_shard(shard).await {
        Ok(probe) if probe.due => {
            if queue.claim(shard) {
                tracing::debug!(%shard, "lease ran out without a release; taking the shard over");
                let worker = WorkerId(u32::try_from(env.config.workers).unwrap_or(u32::MAX));
                let turn = CatchUnwind(Box::pin(serve(delivery, queue, shard, worker))).await;
                if let Err(panic) = turn {
                    env.metrics.record_worker_restart();
                    tracing::error!(%shard, %worker, reason = %panic_message(panic), "a take-over's turn panicked; the shard is retried (a panic outside the handlers, e.g. in a user station)");
                }
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(%shard, error = %e, "could not probe an orphaned shard; the next poll tries again")
        }
    }
}

/// Every poll interval: reads the members (the shard assignment, handed to the wake queue
/// and the turns) and the lock table, marks the shards other nodes hold, takes over
/// orphaned shards, sets a timer for other nodes' leases that end soon, and hands the poller
/// the free shards to probe. Kept apart from the probing, which can be slow, so that a dead
/// node's shards are taken over one lease after its last renewal whatever else is going on.
async fn watch_leases(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    mut stop: watch::Receiver<bool>,
    free: watch::Sender<Vec<ShardIndex>>,
) {
    let env = delivery.env().clone();
    let me = &env.config.node_id;
    let interval = env.config.poll_interval;
    let mut cycle = ShardCycle::for_node(me, env.registry.shard_count());
    let mut view = OwnersView::new();
    let mut free_before = Vec::new();
    loop {
        let started = tokio::time::Instant::now();
        let now = env.clock.now();
        // A re-sharding: paused while it runs, then the new layout (see `reshard`).
        if follow_layout(&delivery, &queue, &mut cycle, now).await {
            free.send_replace(Vec::new());
            lock(&queue.held).refresh(&[]);
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                _ = tokio::time::sleep_until(started + interval) => {}
            }
            continue;
        }
        let owners = view.read(&env.seat, env.registry.shard_count(), now).await;
        match env.storage.sessions().await {
            Ok(sessions) => {
                let plan = plan_round(&cycle, &sessions, &owners, &free_before, me, now);
                // Other members' shards in the plan: found idle, this node may help.
                let helping: Vec<ShardIndex> = plan
                    .probe
                    .iter()
                    .map(|&(shard, _)| shard)
                    .filter(|&shard| owners.is_others(shard, me))
                    .collect();
                queue.set_owners(owners.clone(), &helping);
                free_before = plan.free;
                lock(&queue.held).refresh(&plan.held_elsewhere);
                // A lease of another node that ends before the next look or two is looked at
                // the moment it ends: if its holder died, the shard waits one lease duration.
                for (left, shard) in ending_within(&plan.held_elsewhere, now, 2 * interval) {
                    let at = started + left + Duration::from_millis(1);
                    spawn_take_over(&delivery, &queue, shard, Some(at));
                }
                let mut probe = Vec::with_capacity(plan.probe.len());
                for (shard, orphaned) in plan.probe {
                    if orphaned {
                        spawn_take_over(&delivery, &queue, shard, None);
                    } else {
                        probe.push(shard);
                    }
                }
                free.send_replace(probe);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the lock table; probing every shard");
                // Every shard may be served meanwhile: without the lock table no shard can
                // be told idle.
                let every: Vec<ShardIndex> = cycle.iter().collect();
                queue.set_owners(owners.clone(), &every);
                free.send_replace(cycle.iter().collect());
            }
        }
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = tokio::time::sleep_until(started + interval) => {}
        }
    }
}

/// Reads the Inbox's layout (one poll round's look) and follows it: learns a new shard count
/// (the registry's, the queue's room, the poll cycle), and pauses while an operator
/// re-shards — every kept lease released, each turn handing its shard back after its stage,
/// nothing picked up — so that the operator can take every shard's lease. Returns whether
/// the node is paused. A failed read changes nothing (logged).
async fn follow_layout(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    cycle: &mut ShardCycle,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    let env = delivery.env();
    let layout = match env.storage.layout().await {
        Ok(layout) => layout,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the shard layout; keeping the last one");
            return queue.is_paused();
        }
    };
    if let Some(count) = layout.shard_count {
        env.registry.set_shard_count(count);
    }
    let count = env.registry.shard_count();
    // Every round, not only when the cycle changes: a pick-up or a send of this node may
    // have learned the count first (the queue's room is checked under its locks, cheaply).
    queue.grow_to(count);
    if count != cycle.shard_count() {
        tracing::info!(
            from = cycle.shard_count(),
            to = count,
            "the Inbox was re-sharded; serving the new layout"
        );
        *cycle = ShardCycle::for_node(&env.config.node_id, count);
    }
    let paused = layout.resharding.as_ref().is_some_and(|a| a.until > now);
    if paused != queue.is_paused() {
        queue.set_paused(paused);
        if paused {
            let by = layout
                .resharding
                .as_ref()
                .map(|a| a.by.0.as_str())
                .unwrap_or("");
            tracing::info!(by, "a re-sharding was announced; handing every shard back");
            for lease in queue.unpark_all() {
                if let Err(e) = delivery.release(&lease).await {
                    let retry_in = retry_failed_release(delivery, queue, lease.shard);
                    tracing::warn!(shard = %lease.shard, error = %e, ?retry_in, "could not release a kept lease; retried");
                }
            }
        } else {
            tracing::info!(shards = count, "the re-sharding is over; serving again");
            queue.poll_now.notify_one();
        }
    }
    paused
}

/// Every poll interval (or at once after missed writes): probes the free shards, in this
/// node's cycle order, and queues those with due rows.
async fn poll(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    mut stop: watch::Receiver<bool>,
    mut free: watch::Receiver<Vec<ShardIndex>>,
) {
    let env = delivery.env().clone();
    loop {
        let started = tokio::time::Instant::now();
        let shards = free.borrow_and_update().clone();
        for shard in shards {
            if !probe(&env, &queue, shard).await {
                break;
            }
        }
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = queue.poll_now.notified() => {}
            _ = tokio::time::sleep_until(started + env.config.poll_interval) => {}
        }
    }
}

/// Runs [`take_over`] of `shard` on a task of its own, at `at` or at once.
fn spawn_take_over(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
    at: Option<tokio::time::Instant>,
) {
    let (delivery, task_queue) = (delivery.clone(), queue.clone());
    let mut stop = queue.tasks.stop_signal();
    queue.tasks.spawn(async move {
        if let Some(at) = at {
            tokio::select! {
                biased;
                _ = stopped(&mut stop) => return,
                _ = tokio::time::sleep_until(at) => {}
            }
        }
        take_over(&delivery, &task_queue, shard).await;
    });
}

/// Queues `shard` if it has a due row. Returns false if the storage failed (the round is cut
/// short; the next one tries again).
async fn probe(env: &DeliveryEnv, queue: &WakeQueue, shard: ShardIndex) -> bool {
    match env.probe_shard(shard).await {
        Ok(probe) if probe.due => {
            queue.wake(shard);
            true
        }
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(%shard, error = %e, "poll failed; trying again next interval");
            false
        }
    }
}

/// Reads the gauges every `gauge_interval` and sets them (see [`GaugeSample`]) until `stop`.
async fn report_gauges(env: Arc<DeliveryEnv>, mut stop: watch::Receiver<bool>) {
    crate::telemetry::describe::describe_metrics();
    let node = &env.config.node_id;
    let mut failing = false;
    loop {
        let now = env.clock.now();
        match GaugeSample::read(
            &StorageReads::new(env.storage.clone()),
            node,
            env.registry.shard_count(),
            now,
        )
        .await
        {
            Ok(sample) => {
                sample.publish(node);
                failing = false;
            }
            // Once per outage: the delivery's own errors say more.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "could not read the gauges; trying again next interval");
            }
            Err(_) => {}
        }
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => return,
            _ = tokio::time::sleep(env.config.gauge_interval) => {}
        }
    }
}

/// A running node: its workers, poller, lease watch and listener, and every task they
/// spawned (take-overs, linger releases, the TTL sweep). [`RunnerHandle::shutdown`] stops and
/// awaits them all; a handle dropped without it is logged, and its tasks are left to end
/// with the runtime.
#[must_use = "a node runs until `shutdown().await`; dropping the handle leaves its tasks running"]
pub struct RunnerHandle {
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    observer: Arc<dyn ShardObserver>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    listener: Option<ListenerHandle>,
    shut_down: bool,
}

impl RunnerHandle {
    /// What the listener for other nodes' writes has done, if the storage has one.
    pub fn listener(&self) -> Option<ListenerStats> {
        self.listener.as_ref().map(ListenerHandle::stats)
    }

    /// A watch on this node's workers, poller and lease watch, for a readiness probe that
    /// outlives a borrow of the handle (see [`NodeLiveness`](crate::NodeLiveness)).
    pub fn liveness(&self) -> crate::NodeLiveness {
        let tasks = self.tasks.iter().map(JoinHandle::abort_handle).collect();
        crate::NodeLiveness::new(tasks, self.stop.subscribe())
    }

    /// Runs `task` as one of this node's tasks: its handle is kept and awaited at shutdown
    /// (the facade's catch-up resume).
    #[doc(hidden)]
    pub fn spawn_owned(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.queue.tasks.spawn(task);
    }

    /// The node's stop signal (`true` once shutdown began), for a task given to
    /// [`RunnerHandle::spawn_owned`] that runs until the node stops.
    #[doc(hidden)]
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Waits until no shard has a due message, checking every 10 ms, at most `timeout`.
    /// Returns whether the Inbox drained in time.
    pub async fn drain(&self, timeout: Duration) -> Result<bool, DeliveryError> {
        let env = self.delivery.env();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut busy = false;
            for s in 0..env.registry.shard_count() {
                if env.probe_shard(ShardIndex(s)).await?.due {
                    busy = true;
                    break;
                }
            }
            if !busy {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the workers after their current stage; each releases its lease, so that other
    /// nodes can take the shards at once. Stops the listener, stops and awaits every task the
    /// node spawned, releases the leases kept for a linger, and stops observing writes.
    /// Messages not delivered stay in the Inbox for the next start (or another node).
    pub async fn shutdown(mut self) -> Result<(), DeliveryError> {
        self.shut_down = true;
        let env = self.delivery.env().clone();
        env.request_stop();
        let _ = self.stop.send(true);
        // Leave first: the other nodes' next round assigns this node's shards to them, and
        // they pick them up as the workers below release them.
        if let Err(e) = env.storage.leave(&env.config.node_id).await {
            tracing::warn!(error = %e, "could not leave the membership; it ends one lease after the last beat");
        }
        if let Some(listener) = &self.listener {
            listener.stop();
        }
        for task in std::mem::take(&mut self.tasks) {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a worker task panicked");
            }
        }
        self.queue.tasks.join_all().await;
        // Leases kept for a linger are released at once, for other nodes to take.
        for lease in self.queue.unpark_all() {
            if let Err(e) = self.delivery.release(&lease).await {
                tracing::warn!(shard = %lease.shard, error = %e, "could not release a kept lease; it expires");
            }
        }
        env.unobserve(&self.observer);
        // Once more: a beat that was in flight at the first leave may have re-joined.
        if let Err(e) = env.storage.leave(&env.config.node_id).await {
            tracing::warn!(error = %e, "could not leave the membership; it ends one lease after the last beat");
        }
        if let Err(e) = env.storage.node_stopped().await {
            tracing::warn!(error = %e, "the storage could not tidy up after the node stopped");
        }
        tracing::info!(node = %env.config.node_id, "node runner stopped");
        Ok(())
    }
}

impl Drop for RunnerHandle {
    fn drop(&mut self) {
        if !self.shut_down {
            tracing::warn!(
                node = %self.delivery.env().config.node_id,
                "node handle dropped without shutdown(): its workers run on until the runtime ends and its leases expire instead of being released; call `node.shutdown().await`"
            );
        }
    }
}

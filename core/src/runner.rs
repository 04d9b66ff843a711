//! The node runner: tokio worker tasks that serve the shards of a delivery, on one node of
//! possibly many sharing the database.
//!
//! ```text
//!  local write ──────────────┐
//!  WriteListener (other      ├─► WakeQueue ─► queue ─► worker 0..W ─► Delivery::deliver_while
//!  nodes' writes, NOTIFY) ───┘      ▲                    (a turn: ≥ 1 stage, then on while
//!  poller, every poll_interval      │ free shards         nobody waits; requeued if yielded)
//!  (at once after missed writes) ───┘ with due rows
//!  lease watch, every poll_interval: lock table ─► plan_round ─► free shards for the poller,
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
//! With `lease_linger` set, a worker that drained its shard keeps the lease (`Parked`): the next
//! turn on the shard starts without a pick-up, and a timer releases the lease if none comes,
//! so a trickle of writes does not pay a pick-up and a release (two write transactions) for
//! every message.
//!
//! Every task runs in a span carrying the node id (and the worker), so every log line of
//! the node names it. Shutdown lets each worker finish its current stage and release its
//! lease, and stops the listener; other nodes find the freed shards at their next poll.

use crate::cycle::{ending_within, plan_round, should_yield, HeldElsewhere, ShardCycle, Waiting};
use crate::delivery::{Delivery, DeliveryEnv};
use crate::error::DeliveryError;
use crate::ids::{ShardIndex, WorkerId};
use crate::listener::{ListenerHandle, ListenerStats};
use crate::observer::ShardObserver;
use crate::storage::Lease;
use crate::wakeups::ShardWakeups;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::Instrument;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values stay consistent across a panic (each critical section is a single
    // step), so recover rather than poison every later wake-up.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shards waiting for a worker of this node.
struct WakeQueue {
    env: Arc<DeliveryEnv>,
    wakeups: ShardWakeups,
    held: Mutex<HeldElsewhere>,
    /// Shards, and whether they are orphaned (moved to the front by a take-over that found
    /// them queued).
    queue: Mutex<VecDeque<(ShardIndex, bool)>>,
    ready: Notify,
    poll_now: Notify,
    /// Leases kept after a drained turn (see [`Parked`]), by shard.
    parked: Mutex<Vec<Option<Parked>>>,
}

/// A drained shard's lease kept for `lease_linger`: the next turn on the shard uses it
/// instead of a pick-up; if none comes, a timer releases it. The generation tells a timer
/// whether the lease it was set for is still the one kept.
struct Parked {
    lease: Lease,
    generation: u64,
}

impl WakeQueue {
    fn new(env: Arc<DeliveryEnv>) -> Self {
        let shards = env.registry.shard_count();
        WakeQueue {
            env,
            wakeups: ShardWakeups::new(shards),
            held: Mutex::new(HeldElsewhere::new(shards)),
            queue: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            poll_now: Notify::new(),
            parked: Mutex::new((0..shards).map(|_| None).collect()),
        }
    }

    /// Keeps `lease` for the next turn on its shard; returns the generation to release it by.
    fn park(&self, lease: Lease) -> u64 {
        static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(slot) = lock(&self.parked).get_mut(lease.shard.0 as usize) {
            *slot = Some(Parked { lease, generation });
        }
        generation
    }

    /// Takes the lease kept for `shard` (of `generation` only, if given).
    fn unpark(&self, shard: ShardIndex, generation: Option<u64>) -> Option<Lease> {
        let mut parked = lock(&self.parked);
        let slot = parked.get_mut(shard.0 as usize)?;
        if generation.is_some_and(|g| slot.as_ref().is_none_or(|p| p.generation != g)) {
            return None;
        }
        slot.take().map(|p| p.lease)
    }

    /// Whether the lease kept for `shard` is still the one of `generation`.
    fn is_parked(&self, shard: ShardIndex, generation: u64) -> bool {
        lock(&self.parked)
            .get(shard.0 as usize)
            .is_some_and(|slot| slot.as_ref().is_some_and(|p| p.generation == generation))
    }

    /// Takes every kept lease (shutdown).
    fn unpark_all(&self) -> Vec<Lease> {
        lock(&self.parked)
            .iter_mut()
            .filter_map(|slot| slot.take().map(|p| p.lease))
            .collect()
    }

    /// Starts `shard` for the caller if it is idle (neither queued nor served).
    fn start_idle(&self, shard: ShardIndex) -> bool {
        let _queue = lock(&self.queue);
        self.wakeups.wake(shard) && self.wakeups.start(shard)
    }

    /// Queues `shard` unless it is queued or being served already.
    fn wake(&self, shard: ShardIndex) {
        let mut queue = lock(&self.queue);
        if self.wakeups.wake(shard) {
            queue.push_back((shard, false));
            drop(queue);
            self.ready.notify_one();
        }
    }

    /// Claims an orphaned `shard` for a take-over outside the workers: true if it was idle
    /// (it is now running, served by the caller); if it is queued, it moves to the front.
    fn claim(&self, shard: ShardIndex) -> bool {
        let mut queue = lock(&self.queue);
        if self.wakeups.wake(shard) {
            return self.wakeups.start(shard);
        }
        if let Some(at) = queue.iter().position(|e| e.0 == shard) {
            queue.remove(at);
            queue.push_front((shard, true));
        }
        false
    }

    /// Who waits for a worker.
    fn waiting(&self) -> Waiting {
        let queue = lock(&self.queue);
        Waiting {
            shards: queue.len(),
            orphaned: queue.front().is_some_and(|e| e.1),
        }
    }

    /// The next shard to serve; waits while there is none.
    async fn next(&self) -> ShardIndex {
        loop {
            // Created before the check, so that a wake between the check and the wait leaves
            // a permit behind instead of being missed.
            let notified = self.ready.notified();
            if let Some((shard, _)) = lock(&self.queue).pop_front() {
                return shard;
            }
            notified.await;
        }
    }

    /// A worker is done with `shard`. If another node holds it, wake-ups are ignored until
    /// the next poll round; if the worker yielded it with work left, it goes to the back of
    /// the queue; otherwise it is queued again if it was woken meanwhile.
    fn finish(&self, shard: ShardIndex, turn: TurnEnd) {
        if turn == TurnEnd::HeldElsewhere {
            let until = self.env.clock.now()
                + chrono::Duration::from_std(self.env.config.poll_interval)
                    .unwrap_or(chrono::Duration::seconds(1));
            lock(&self.held).mark(shard, until);
            self.wakeups.finish_held_elsewhere(shard);
            return;
        }
        let mut queue = lock(&self.queue);
        let again = self.wakeups.finish(shard);
        if again || (turn == TurnEnd::Yielded && self.wakeups.wake(shard)) {
            queue.push_back((shard, false));
            drop(queue);
            self.ready.notify_one();
        }
    }
}

/// How a worker's turn on a shard ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnEnd {
    /// Served until no due row was left (or failed; the poll retries it).
    Done,
    /// Let go with due rows left, for other shards.
    Yielded,
    /// Another worker holds it (pick-up refused or lease lost).
    HeldElsewhere,
}

impl ShardObserver for WakeQueue {
    fn on_write(&self, shards: &[ShardIndex]) {
        let now = self.env.clock.now();
        for &shard in shards {
            if !lock(&self.held).is_held(shard, now) {
                self.wake(shard);
            }
        }
    }

    fn on_missed_writes(&self) {
        self.poll_now.notify_one();
    }
}

/// Starts the workers of a node.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalRunner;

impl LocalRunner {
    /// Starts `config.workers` workers, the poller and — if the storage can hear other
    /// processes' writes — the listener, on the current tokio runtime.
    pub fn start(delivery: Arc<Delivery>) -> RunnerHandle {
        let env = delivery.env().clone();
        env.clear_stop();
        let queue = Arc::new(WakeQueue::new(env.clone()));
        env.observe(queue.clone());
        let node = env.config.node_id.clone();
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for w in 0..env.config.workers {
            let worker = WorkerId(w as u32);
            let span = tracing::info_span!("worker", node = %node, worker = %worker);
            tasks.push(tokio::spawn(
                work(delivery.clone(), queue.clone(), stop_rx.clone(), worker).instrument(span),
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
            watch_leases(delivery.clone(), queue.clone(), stop_rx, free_tx).instrument(span),
        ));
        let listener = listen(&env, queue.clone());
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
            stop: stop_tx,
            tasks,
            listener,
        }
    }
}

/// Starts the storage's write listener, if it has one, feeding `queue`.
fn listen(env: &DeliveryEnv, queue: Arc<WakeQueue>) -> Option<ListenerHandle> {
    let listener = env.storage.write_listener()?;
    match listener.listen(&env.config.node_id, env.registry.shard_count(), queue) {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::warn!(node = %env.config.node_id, error = %e, "could not listen for other nodes' writes; finding them by polling");
            None
        }
    }
}

async fn work(
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    mut stop: watch::Receiver<bool>,
    worker: WorkerId,
) {
    loop {
        let shard = tokio::select! {
            biased;
            _ = stop.changed() => break,
            shard = queue.next() => shard,
        };
        if *stop.borrow() {
            break;
        }
        if queue.wakeups.start(shard) {
            serve(&delivery, &queue, shard, worker).await;
        }
    }
    tracing::debug!("worker stopped");
}

/// One turn on `shard` (already started in the wake-up states): at least one stage, then on
/// while nobody needs the worker more (see [`should_yield`]); then tells the queue how it
/// ended. The turn starts with the lease kept by the last one, if any, and keeps its own
/// for `lease_linger` once the shard is drained (a timer releases it if no turn takes it).
async fn serve(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
    worker: WorkerId,
) {
    let config = &delivery.env().config;
    let turn = config.poll_interval;
    let linger = config.lease_linger;
    let started = tokio::time::Instant::now();
    let keep_on = || !should_yield(started.elapsed(), queue.waiting(), turn);
    let held = queue.unpark(shard, None);
    let served = delivery
        .serve_turn(shard, worker, &keep_on, held, !linger.is_zero())
        .await;
    let end = match served {
        Ok((report, kept)) => {
            if let Some(lease) = kept {
                let generation = queue.park(lease);
                spawn_release(delivery, queue, shard, generation, linger);
            }
            if report.lease_lost {
                tracing::info!(%shard, "lease lost to another worker; leaving the shard to it");
            }
            tracing::trace!(%shard, stages = report.stages, picked_up = report.picked_up, yielded = report.yielded, "shard served");
            if !report.picked_up || report.lease_lost {
                TurnEnd::HeldElsewhere
            } else if report.yielded {
                TurnEnd::Yielded
            } else {
                TurnEnd::Done
            }
        }
        Err(e) => {
            tracing::warn!(%shard, error = %e, "delivery failed; the shard is retried at the next poll");
            TurnEnd::Done
        }
    };
    queue.finish(shard, end);
}

/// Releases `shard`'s kept lease of `generation` after `linger`, unless a turn took it
/// meanwhile or the shard is queued for one (that turn takes it). Like a turn, the release
/// holds the shard in the wake-up states, and looks once more for rows written meanwhile.
fn spawn_release(
    delivery: &Arc<Delivery>,
    queue: &Arc<WakeQueue>,
    shard: ShardIndex,
    generation: u64,
    linger: Duration,
) {
    let (delivery, queue) = (delivery.clone(), queue.clone());
    tokio::spawn(
        async move {
            tokio::time::sleep(linger).await;
            if !queue.is_parked(shard, generation) {
                return;
            }
            if !queue.start_idle(shard) {
                return;
            }
            let mut again = false;
            if let Some(lease) = queue.unpark(shard, Some(generation)) {
                let released = match delivery.release(&lease).await {
                    Ok(()) => delivery.has_due_rows(shard).await,
                    Err(e) => Err(e),
                };
                match released {
                    Ok(due) => again = due,
                    Err(e) => {
                        tracing::warn!(%shard, error = %e, "could not release a kept lease; it expires, or the next poll serves the shard")
                    }
                }
            }
            queue.finish(shard, TurnEnd::Done);
            if again {
                queue.wake(shard);
            }
        }
        .in_current_span(),
    );
}

/// Takes over `shard`, whose holder's lease ran out, if it has due rows: served at once on
/// the calling task rather than queued behind the workers' turns — its messages have already
/// waited a lease duration. If a worker of this node has it queued, it moves to the front.
async fn take_over(delivery: &Arc<Delivery>, queue: &Arc<WakeQueue>, shard: ShardIndex) {
    let env = delivery.env();
    if env.is_stopping() {
        return;
    }
    match env.storage.read_page(shard, env.clock.now(), 1).await {
        Ok(page) if !page.messages.is_empty() => {
            if queue.claim(shard) {
                tracing::debug!(%shard, "lease ran out without a release; taking the shard over");
                let worker = WorkerId(u32::try_from(env.config.workers).unwrap_or(u32::MAX));
                serve(delivery, queue, shard, worker).await;
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(%shard, error = %e, "could not probe an orphaned shard; the next poll tries again")
        }
    }
}

/// Every poll interval: reads the lock table, marks the shards other nodes hold, takes over
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
    let cycle = ShardCycle::for_node(me, env.registry.shard_count());
    loop {
        let started = tokio::time::Instant::now();
        let now = env.clock.now();
        match env.storage.sessions().await {
            Ok(sessions) => {
                let plan = plan_round(&cycle, &sessions, me, now);
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
                free.send_replace(cycle.iter().collect());
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep_until(started + interval) => {}
        }
    }
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
            _ = stop.changed() => return,
            _ = tokio::time::sleep_until(started + env.config.poll_interval) => {}
            _ = queue.poll_now.notified() => {}
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
    let (delivery, queue) = (delivery.clone(), queue.clone());
    tokio::spawn(
        async move {
            if let Some(at) = at {
                tokio::time::sleep_until(at).await;
            }
            take_over(&delivery, &queue, shard).await;
        }
        .in_current_span(),
    );
}

/// Queues `shard` if it has a due row. Returns false if the storage failed (the round is cut
/// short; the next one tries again).
async fn probe(env: &DeliveryEnv, queue: &WakeQueue, shard: ShardIndex) -> bool {
    match env.storage.read_page(shard, env.clock.now(), 1).await {
        Ok(page) if !page.messages.is_empty() => {
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

/// A running node: its workers, poller and listener.
pub struct RunnerHandle {
    delivery: Arc<Delivery>,
    queue: Arc<WakeQueue>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    listener: Option<ListenerHandle>,
}

impl RunnerHandle {
    /// What the listener for other nodes' writes has done, if the storage has one.
    pub fn listener(&self) -> Option<ListenerStats> {
        self.listener.as_ref().map(ListenerHandle::stats)
    }

    /// Waits until no shard has a due message, checking every 10 ms, at most `timeout`.
    /// Returns whether the Inbox drained in time.
    pub async fn drain(&self, timeout: Duration) -> Result<bool, DeliveryError> {
        let env = self.delivery.env();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let now = env.clock.now();
            let mut busy = false;
            for s in 0..env.registry.shard_count() {
                if !env
                    .storage
                    .read_page(ShardIndex(s), now, 1)
                    .await?
                    .messages
                    .is_empty()
                {
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
    /// nodes can take the shards at once. Stops the listener. Messages not delivered stay in
    /// the Inbox for the next start (or another node).
    pub async fn shutdown(self) -> Result<(), DeliveryError> {
        self.delivery.env().request_stop();
        let _ = self.stop.send(true);
        if let Some(listener) = &self.listener {
            listener.stop();
        }
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a worker task panicked");
            }
        }
        // Leases kept for a linger are released at once, for other nodes to take.
        for lease in self.queue.unpark_all() {
            if let Err(e) = self.delivery.release(&lease).await {
                tracing::warn!(shard = %lease.shard, error = %e, "could not release a kept lease; it expires");
            }
        }
        tracing::info!(node = %self.delivery.env().config.node_id, "node runner stopped");
        Ok(())
    }
}

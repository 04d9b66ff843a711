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
//!
//! ```text
//!  mod.rs       LocalRunner::start: spawns the tasks below, the workers and the listener
//!  lease_watch  the lease watch, the layout followed, take-overs of orphaned shards
//!  poller       the poller's rounds over the free shards
//!  gauges       the gauges read and published
//!  handle       RunnerHandle: drain, shutdown, and the tasks it owns
//! ```

use crate::cluster::membership::beat_membership;
use crate::model::ids::WorkerId;
use crate::runner::cycle::ShardCycle;
use crate::runner::delivery::Delivery;
use crate::runner::env::DeliveryEnv;
use crate::runner::kind_controls::follow_kind_controls;
use crate::runner::sweep::sweep_periodically;
use crate::runner::wake_queue::WakeQueue;
use crate::runner::worker::supervise;
use crate::storage::listener::ListenerHandle;
use crate::storage::observer::ShardObserver;
use std::sync::Arc;
use tokio::sync::watch;
use tracing::Instrument;

mod gauges;
mod handle;
mod lease_watch;
mod poller;
mod relays;

use gauges::report_gauges;
pub use handle::RunnerHandle;
use lease_watch::watch_leases;
use poller::poll;

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
        // Over several databases, the outbox rows of stages are copied to their databases.
        if crate::databases::Databases::of(env.storage.as_ref()).is_some() {
            let span = tracing::info_span!("relays", node = %node);
            queue.tasks.spawn(
                relays::relay_outboxes(env.clone(), observer.clone(), stop_rx.clone())
                    .instrument(span),
            );
        }
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

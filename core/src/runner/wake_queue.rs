//! The wake queue: the shards waiting for a worker of this node, their wake-up states,
//! the shards other nodes hold, and the leases kept between turns.
//!
//! ```text
//!  write heard / poll / take-over ──► wake(shard) ──► queue ──► next() ──► a worker's turn
//!                                      (ignored while another node holds the shard)
//!  turn ends ──► finish(shard, how) ──► queued again if woken meanwhile or yielded
//! ```
//!
//! Wake-ups from writes are ignored for shards another live member prefers (see `assign`):
//! they are its job; the poller still queues them when they idle.
//!
//! It decides nothing about leases itself: a turn parks and unparks them here (see `turn`).

use crate::cluster::assign::ShardOwners;
use crate::model::ids::ShardIndex;
use crate::runner::cycle::{HeldElsewhere, Waiting};
use crate::runner::env::DeliveryEnv;
use crate::runner::tasks::NodeTasks;
use crate::runner::wake_state::ShardWakeState;
use crate::storage::observer::ShardObserver;
use crate::storage::Lease;
use crate::sync::lock;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{watch, Notify};

/// The shards waiting for a worker of this node.
pub(super) struct WakeQueue {
    pub(super) env: Arc<DeliveryEnv>,
    pub(super) wakeups: ShardWakeState,
    pub(super) held: Mutex<HeldElsewhere>,
    /// The preferred owner of every shard, as the lease watch last read the members.
    pub(super) owners: Mutex<Arc<ShardOwners>>,
    /// Other members' shards this node may serve for now, by shard: those the last poll
    /// round found idle (free for a poll interval, see `plan_round`).
    pub(super) helping: Mutex<Vec<bool>>,
    /// Shards, and whether they are orphaned (moved to the front by a take-over that found
    /// them queued).
    pub(super) queue: Mutex<VecDeque<(ShardIndex, bool)>>,
    pub(super) ready: Notify,
    pub(super) poll_now: Notify,
    /// Leases kept after a drained turn (see [`Parked`]), by shard.
    pub(super) parked: Mutex<Vec<Option<Parked>>>,
    /// Turns in a row that failed, by shard (the retry's back-off).
    pub(super) failures: Mutex<Vec<u32>>,
    /// The node's tasks besides its workers (take-overs, releases, the sweep).
    pub(super) tasks: NodeTasks,
    /// Set while an operator re-shards the Inbox (see `reshard`): every shard is handed back
    /// after its stage, and none is picked up.
    paused: AtomicBool,
}

/// A drained shard's lease kept for `lease_linger`: the next turn on the shard uses it
/// instead of a pick-up; if none comes, a timer releases it. The generation tells a timer
/// whether the lease it was set for is still the one kept.
pub(super) struct Parked {
    pub(super) lease: Lease,
    pub(super) generation: u64,
}

impl WakeQueue {
    pub(super) fn new(env: Arc<DeliveryEnv>, stop: watch::Receiver<bool>) -> Self {
        let shards = env.registry.shard_count();
        WakeQueue {
            env,
            wakeups: ShardWakeState::new(shards),
            held: Mutex::new(HeldElsewhere::new(shards)),
            owners: Mutex::new(Arc::new(ShardOwners::default())),
            helping: Mutex::new(Vec::new()),
            queue: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            poll_now: Notify::new(),
            parked: Mutex::new((0..shards).map(|_| None).collect()),
            failures: Mutex::new(vec![0; shards as usize]),
            tasks: NodeTasks::new(stop),
            paused: AtomicBool::new(false),
        }
    }

    /// Pauses or resumes serving for a re-sharding (see [`WakeQueue::is_paused`]).
    pub(super) fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
    }

    /// Whether a re-sharding is in progress: turns hand their shards back after the stage
    /// they run, and no shard is picked up.
    pub(super) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Makes room for shards up to `shard_count` after a re-sharding to more. Shards beyond
    /// a smaller count keep their slots, unused: they are no longer served (see
    /// [`WakeQueue::is_others`]).
    pub(super) fn grow_to(&self, shard_count: u32) {
        let n = shard_count as usize;
        self.wakeups.grow_to(shard_count);
        lock(&self.held).grow_to(shard_count);
        let mut parked = lock(&self.parked);
        while parked.len() < n {
            parked.push(None);
        }
        drop(parked);
        let mut failures = lock(&self.failures);
        if failures.len() < n {
            failures.resize(n, 0);
        }
    }

    /// Replaces the shard assignment and the other members' shards this node may help with
    /// (each poll round).
    pub(super) fn set_owners(&self, owners: Arc<ShardOwners>, helping: &[ShardIndex]) {
        let mut help = vec![false; self.env.registry.shard_count() as usize];
        for s in helping {
            if let Some(slot) = help.get_mut(s.0 as usize) {
                *slot = true;
            }
        }
        // Both under the owners' lock, so that `next` never sees new owners with old help.
        let mut slot = lock(&self.owners);
        *lock(&self.helping) = help;
        *slot = owners;
    }

    /// Whether a queued turn on `shard` is stale: the assignment now prefers another member
    /// for it, the last poll round did not find it idle, and this node has no lease of it to
    /// settle. Such an entry was queued under an earlier assignment (a write heard, a probe,
    /// a wake-up while its turn ran); served, it would pick the shard up again after its last
    /// holder had released it to the new owner, and hand it over once more a stage later. A
    /// turn that comes to settle a lease of this node — kept for the linger, or kept for a
    /// retried release after a failed one (see `unreleased`) — is served: dropped, it left
    /// that lease held until it ran out (simulation seed 152 of the first version).
    fn is_stale_turn(&self, shard: ShardIndex) -> bool {
        let kept = lock(&self.parked)
            .get(shard.0 as usize)
            .is_some_and(Option::is_some);
        if kept || self.env.unreleased.holds(shard) {
            return false;
        }
        let owners = lock(&self.owners);
        owners.is_others(shard, &self.env.config.node_id)
            && !lock(&self.helping)
                .get(shard.0 as usize)
                .copied()
                .unwrap_or(false)
    }

    /// Whether `shard` is not this node's to serve now: another live member prefers it, a
    /// re-sharding is in progress, or the shard is no longer in the Inbox's layout. This node
    /// leaves it alone and hands it back after a stage when it serves it.
    pub(super) fn is_others(&self, shard: ShardIndex) -> bool {
        self.is_paused()
            || shard.0 >= self.env.registry.shard_count()
            || lock(&self.owners).is_others(shard, &self.env.config.node_id)
    }

    /// Keeps `lease` for the next turn on its shard; returns the generation to release it by.
    pub(super) fn park(&self, lease: Lease) -> u64 {
        static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(slot) = lock(&self.parked).get_mut(lease.shard.0 as usize) {
            *slot = Some(Parked { lease, generation });
        }
        generation
    }

    /// Takes the lease kept for `shard` (of `generation` only, if given).
    pub(super) fn unpark(&self, shard: ShardIndex, generation: Option<u64>) -> Option<Lease> {
        let mut parked = lock(&self.parked);
        let slot = parked.get_mut(shard.0 as usize)?;
        if generation.is_some_and(|g| slot.as_ref().is_none_or(|p| p.generation != g)) {
            return None;
        }
        slot.take().map(|p| p.lease)
    }

    /// The end of the lease kept for `shard`, if it is still the one of `generation`.
    pub(super) fn parked_until(
        &self,
        shard: ShardIndex,
        generation: u64,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        lock(&self.parked)
            .get(shard.0 as usize)?
            .as_ref()
            .filter(|p| p.generation == generation)
            .map(|p| p.lease.lease_until)
    }

    /// Counts a failed turn on `shard`; returns how many failed in a row.
    pub(super) fn turn_failed(&self, shard: ShardIndex) -> u32 {
        let mut failures = lock(&self.failures);
        match failures.get_mut(shard.0 as usize) {
            Some(n) => {
                *n = n.saturating_add(1);
                *n
            }
            None => 1,
        }
    }

    /// A turn on `shard` went through: its retry back-off starts anew.
    pub(super) fn turn_succeeded(&self, shard: ShardIndex) {
        if let Some(n) = lock(&self.failures).get_mut(shard.0 as usize) {
            *n = 0;
        }
    }

    /// Takes every kept lease (shutdown).
    pub(super) fn unpark_all(&self) -> Vec<Lease> {
        lock(&self.parked)
            .iter_mut()
            .filter_map(|slot| slot.take().map(|p| p.lease))
            .collect()
    }

    /// Starts `shard` for the caller if it is idle (neither queued nor served).
    pub(super) fn start_idle(&self, shard: ShardIndex) -> bool {
        let _queue = lock(&self.queue);
        self.wakeups.wake(shard) && self.wakeups.start(shard)
    }

    /// Queues `shard` unless it is queued or being served already.
    pub(super) fn wake(&self, shard: ShardIndex) {
        let mut queue = lock(&self.queue);
        if self.wakeups.wake(shard) {
            queue.push_back((shard, false));
            drop(queue);
            self.ready.notify_one();
        }
    }

    /// Claims an orphaned `shard` for a take-over outside the workers: true if it was idle
    /// (it is now running, served by the caller); if it is queued, it moves to the front.
    pub(super) fn claim(&self, shard: ShardIndex) -> bool {
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
    pub(super) fn waiting(&self) -> Waiting {
        let queue = lock(&self.queue);
        Waiting {
            shards: queue.len(),
            orphaned: queue.front().is_some_and(|e| e.1),
        }
    }

    /// The next shard to serve; waits while there is none. A turn queued under an earlier
    /// assignment on a shard now preferred by another member is dropped (see
    /// [`WakeQueue::is_stale_turn`]; a kept lease of it is released by its timer); an
    /// orphaned shard is served whoever prefers it.
    pub(super) async fn next(&self) -> ShardIndex {
        loop {
            // Created before the check, so that a wake between the check and the wait leaves
            // a permit behind instead of being missed.
            let notified = self.ready.notified();
            loop {
                let mut queue = lock(&self.queue);
                let Some((shard, orphaned)) = queue.pop_front() else {
                    break;
                };
                if !orphaned && !self.is_paused() && self.is_stale_turn(shard) {
                    if self.wakeups.start(shard) {
                        self.wakeups.finish_held_elsewhere(shard);
                    }
                    tracing::trace!(%shard, "a turn queued under an earlier assignment dropped: the shard is another member's");
                    continue;
                }
                drop(queue);
                tracing::trace!(target: "shardbox::latency", point = "turn", node = %self.env.config.node_id, shard = shard.0, key = 0);
                return shard;
            }
            notified.await;
        }
    }

    /// A worker is done with `shard`. If another node holds it, wake-ups are ignored until
    /// the next poll round; if the worker yielded it with work left, it goes to the back of
    /// the queue; otherwise it is queued again if it was woken meanwhile.
    pub(super) fn finish(&self, shard: ShardIndex, turn: TurnEnd) {
        if turn == TurnEnd::HandedOver {
            // Its preferred owner hears the same writes, or finds it at its next poll.
            self.wakeups.finish_held_elsewhere(shard);
            return;
        }
        if turn == TurnEnd::HeldElsewhere {
            let until = self.env.clock.now() + self.env.config.poll_span();
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
pub(super) enum TurnEnd {
    /// Served until no due row was left (or failed; the poll retries it).
    Done,
    /// Let go with due rows left, for other shards.
    Yielded,
    /// Another worker holds it (pick-up refused or lease lost).
    HeldElsewhere,
    /// Released after a stage for its preferred owner, another live member.
    HandedOver,
}

impl ShardObserver for WakeQueue {
    fn on_write(&self, shards: &[ShardIndex]) {
        let now = self.env.clock.now();
        for &shard in shards {
            // Shards another node holds, or another member prefers, are theirs: they hear
            // the same writes (or poll for them).
            if !lock(&self.held).is_held(shard, now) && !self.is_others(shard) {
                tracing::trace!(target: "shardbox::latency", point = "woken", node = %self.env.config.node_id, shard = shard.0, key = 0);
                self.wake(shard);
            }
        }
    }

    fn on_missed_writes(&self) {
        self.poll_now.notify_one();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cluster::assign::assign;
    use crate::entity::registry::EntityRegistry;
    use crate::memory::MemoryStorage;
    use crate::model::clock::ManualClock;
    use crate::model::config::DeliveryConfig;
    use crate::model::ids::NodeId;
    use crate::model::strategy::StableHashStrategy;
    use crate::telemetry::monitor::NoopMonitor;

    pub(in crate::runner) const SHARDS: u32 = 8;

    pub(in crate::runner) fn node(n: &str) -> NodeId {
        NodeId(n.into())
    }

    /// The environment of node "me" over [`SHARDS`] shards on the memory backend, under a
    /// manual clock, its wake queue, and the sender of the queue's stop signal (its tasks
    /// stop when it is dropped).
    pub(in crate::runner) fn queue_of_me() -> (Arc<DeliveryEnv>, Arc<WakeQueue>, watch::Sender<bool>)
    {
        let clock = ManualClock::new(
            chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("a valid time"),
        );
        let env = Arc::new(DeliveryEnv::new(
            Arc::new(EntityRegistry::new(
                Arc::new(StableHashStrategy::new()),
                SHARDS,
            )),
            Arc::new(MemoryStorage::new()),
            DeliveryConfig::builder()
                .shard_count(SHARDS)
                .node_id(node("me"))
                .build()
                .expect("a valid config"),
            Arc::new(NoopMonitor),
            Arc::new(clock),
        ));
        let (stop, rx) = watch::channel(false);
        let queue = Arc::new(WakeQueue::new(env.clone(), rx));
        (env, queue, stop)
    }

    /// A shard the assignment over "me" and "other" gives to `whom`.
    pub(in crate::runner) fn shard_of(owners: &ShardOwners, whom: &str) -> ShardIndex {
        owners.shards_of(&node(whom))[0]
    }

    /// Issue 37 (`cluster_balance`): a turn queued while this node was the shard's preferred
    /// owner — a write heard, a probe, a wake-up during its turn — was served after a member
    /// joined and was given the shard: it picked the shard up again once its last holder had
    /// released it to the joiner, and handed it over a stage later: one more hand-over round
    /// for the joiner. Such a turn is dropped; one on a shard the last poll round found
    /// idle, or on an orphaned shard, is served.
    #[tokio::test]
    async fn a_turn_queued_before_its_shard_went_to_another_member_is_dropped() {
        let (_env, queue, _stop) = queue_of_me();
        let alone = Arc::new(assign(SHARDS, &[node("me")]));
        let joined = Arc::new(assign(SHARDS, &[node("me"), node("other")]));
        let (theirs, mine) = (shard_of(&joined, "other"), shard_of(&joined, "me"));
        queue.set_owners(alone, &[]);
        queue.wake(theirs);
        queue.wake(mine);
        queue.set_owners(joined.clone(), &[]);
        assert_eq!(
            queue.next().await,
            mine,
            "the stale turn on {theirs} is dropped"
        );
        assert!(queue.wakeups.start(mine));
        queue.finish(mine, TurnEnd::Done);
        assert_eq!(queue.waiting().shards, 0, "nothing else queued");

        // Idle, the joiner's shard is this node's to help with (the poll round said so).
        queue.set_owners(joined.clone(), &[theirs]);
        queue.wake(theirs);
        assert_eq!(
            queue.next().await,
            theirs,
            "dropped as stale, it was left idle"
        );
        assert!(queue.wakeups.start(theirs));
        queue.finish(theirs, TurnEnd::HandedOver);

        // An orphaned shard is anyone's.
        queue.set_owners(joined, &[]);
        queue.wake(theirs);
        assert!(
            !queue.claim(theirs),
            "queued: moved to the front as an orphan"
        );
        assert_eq!(queue.next().await, theirs);
        assert!(queue.wakeups.start(theirs));
        queue.finish(theirs, TurnEnd::HandedOver);
    }

    /// A turn on another member's shard that comes to settle a lease of this node is served:
    /// the retry of a failed release wakes the shard so that its turn releases the lease kept
    /// for it (see `unreleased`); dropped as stale, it left the lease held until it ran out
    /// (simulation seed 152 against the first version of the change above).
    #[tokio::test]
    async fn a_turn_that_settles_a_lease_of_this_node_is_served() {
        let (env, queue, _stop) = queue_of_me();
        let joined = Arc::new(assign(SHARDS, &[node("me"), node("other")]));
        let theirs = shard_of(&joined, "other");
        queue.set_owners(joined, &[]);
        let now = env.clock.now();
        let worker = crate::model::ids::WorkerId(0);
        let lease = env
            .storage
            .pick_up(theirs, &node("me"), worker, now, env.lease_until(now))
            .await
            .expect("the memory backend answers")
            .expect("a free shard");
        env.unreleased.keep(lease.clone());
        queue.wake(theirs);
        let served = tokio::time::timeout(std::time::Duration::from_secs(1), queue.next());
        assert_eq!(
            served.await.ok(),
            Some(theirs),
            "kept for a retried release"
        );
        assert!(queue.wakeups.start(theirs));
        queue.finish(theirs, TurnEnd::Done);
        assert!(env.unreleased.take(theirs).is_some());

        queue.park(lease);
        queue.wake(theirs);
        let served = tokio::time::timeout(std::time::Duration::from_secs(1), queue.next());
        assert_eq!(served.await.ok(), Some(theirs), "kept for the linger");
    }
}

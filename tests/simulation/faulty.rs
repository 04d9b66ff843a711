//! A storage wrapper that injects faults into any backend, driven by the run's seed.
//!
//! ```text
//!  node ─► FaultyStorage ─┬─ fail before: StorageError, the inner call never runs
//!                         ├─ delay: a tokio sleep (paused clock) before the inner call
//!                         ├─ inner call ─► fail after: it took effect, its ack is lost
//!                         └─ log: every pick-up and every successful commit_stage
//!  writes that took effect ─► simulated NOTIFY to every node's listener ─► some dropped
//! ```
//!
//! Memory and SQLite hear no other process's writes; the wrapper plays PostgreSQL's
//! `LISTEN`/`NOTIFY` for them: every node's runner listens through it, and every write that
//! took effect (send, stage commit, requeue, unblock; also when its acknowledgement is then
//! lost, as a `NOTIFY` goes out at commit) is told to every listening node, except the
//! notifications the fault plan drops. A node whose wake-up was dropped must find the rows by
//! polling. Over PostgreSQL the backend's own listener is used and its notifications pass
//! through the same drop.
//!
//! Reads can only fail before (after would be the same thing); writes can fail on either
//! side. The log of pick-ups and commits is what the "one committer per (shard, epoch)" and
//! "fenced commit" invariants are checked against: it is recorded here, at the storage
//! boundary, so it holds whatever the runner believes happened.

use super::rng::SimRng;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardbox::core::storage::listener::ListenerControl;
use shardbox::core::storage::{
    BlockedTarget, CatchUpJob, CatchUpStore, CommitReport, DeadLetterFilter, DeadLetterStore,
    EntityKey, EntityState, EntityStore, EventStore, InboxCounts, InboxStore, KindControlStore,
    Lease, ListenerHandle, Member, NewCatchUp, OutboxRow, OutboxStore, Page, RelayCopy,
    RelayOutcome, Requeue, RequeueReport, ReshardAnnouncement, ReshardMoves, ReshardSwitch,
    ResumeReport, ShardLayout, ShardObserver, ShardSession, StageCommit, StoredDeadLetter, Unblock,
    UnblockReport, WorkRegistry, WriteBatch, WriteListener, WriteReport,
};
use shardbox::core::{
    EventSource, InboxMessage, KindControl, KindSettings, NodeId, ShardIndex, SignalId, Storage,
    StoredEvent, StrategyRecord, WorkerId,
};
use shardbox::StorageError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How often each fault strikes, per thousand calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    pub fail_before: u64,
    pub fail_after: u64,
    pub delay: u64,
    /// Longest injected delay.
    pub max_delay_ms: u64,
    pub drop_notification: u64,
}

/// What was injected, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub failed_before: u64,
    pub failed_after: u64,
    pub delayed: u64,
    pub notifications_dropped: u64,
}

impl FaultCounts {
    pub fn add(&mut self, o: &FaultCounts) {
        self.failed_before += o.failed_before;
        self.failed_after += o.failed_after;
        self.delayed += o.delayed;
        self.notifications_dropped += o.notifications_dropped;
    }
}

/// Who held a lease: node and worker.
pub type Holder = (String, u32);

/// A successful `commit_stage`, as the storage saw it.
#[derive(Debug, Clone)]
pub struct CommitRecord {
    pub shard: u32,
    pub epoch: i64,
    pub holder: Holder,
    /// The highest epoch of the shard handed out by a pick-up that had returned before the
    /// commit was called: a commit under a lower epoch was not fenced.
    pub superseded_by: Option<i64>,
}

#[derive(Debug, Default)]
struct Log {
    /// (shard, epoch) -> who picked it up; a second pick-up of one epoch is a violation.
    picked: BTreeMap<(u32, i64), Holder>,
    /// (shard, epoch) -> the pick-up's place among all pick-ups (the latency invariant tells
    /// a lease picked up by a node's current incarnation from one left by a stopped one).
    pick_order: BTreeMap<(u32, i64), usize>,
    /// Leases (shard, epoch) whose pick-up or renewal took effect but lost its
    /// acknowledgement: held in the lock table by a node that does not know it holds them,
    /// until they run out (the latency invariant excuses them).
    unacknowledged: BTreeMap<(u32, i64), &'static str>,
    duplicate_pick_ups: Vec<String>,
    /// Highest epoch handed out per shard.
    highest: HashMap<u32, i64>,
    commits: Vec<CommitRecord>,
    /// Every successful pick-up and commit, in the order the storage saw them: the run's
    /// trace, compared between two runs of one seed by the determinism test.
    trace: Vec<String>,
}

/// A fault scripted for the next call of one operation (the regression tests' exact
/// scenarios), whether or not random faults are enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scripted {
    /// The call fails before it runs.
    Before,
    /// The call takes effect and its acknowledgement is lost.
    After,
}

struct State {
    rng: SimRng,
    rates: FaultRates,
    enabled: bool,
    /// The nodes listening through the simulated `NOTIFY` (memory, SQLite).
    listeners: Vec<(ListenerControl, Arc<dyn ShardObserver>)>,
    /// Scripted faults by operation name: (op, calls to let pass first, fault), used up in
    /// order.
    script: Vec<(&'static str, usize, Scripted)>,
    /// Scripted pauses by operation name: (op, calls to let pass first, gate), used up in
    /// order (see [`FaultyStorage::gate_later`]).
    gates: Vec<(&'static str, usize, Gate)>,
    counts: FaultCounts,
    /// Injected delays still sleeping: faults of the run that are still active after
    /// [`FaultyStorage::enable`]`(false)` (a call delayed just before holds its caller up).
    delays_in_flight: usize,
    log: Log,
}

/// A scripted pause of one call (see [`FaultyStorage::gate_later`]).
#[derive(Clone, Default)]
pub struct Gate {
    reached: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Notify>,
}

impl Gate {
    /// Waits until the call stopped at the gate.
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Lets the call go on.
    pub fn open(&self) {
        self.open.notify_one();
    }
}

/// What one call does, decided before it runs.
#[derive(Debug, Clone, Copy)]
struct Decision {
    delay: Option<Duration>,
    fail_before: bool,
    fail_after: bool,
}

/// The fault-injecting wrapper around `inner`.
#[derive(Clone)]
pub struct FaultyStorage {
    inner: Arc<dyn Storage>,
    state: Arc<Mutex<State>>,
}

/// Whether the call writes (so that its acknowledgement can be lost after it took effect).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    Read,
    Write,
}

impl FaultyStorage {
    /// Wraps `inner`; faults are off until [`FaultyStorage::enable`].
    pub fn new(inner: Arc<dyn Storage>, rng: SimRng, rates: FaultRates) -> Self {
        FaultyStorage {
            inner,
            state: Arc::new(Mutex::new(State {
                rng,
                rates,
                enabled: false,
                script: Vec::new(),
                gates: Vec::new(),
                listeners: Vec::new(),
                counts: FaultCounts::default(),
                delays_in_flight: 0,
                log: Log::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the next call of `op` (a storage method's name) fail as `fault`.
    pub fn fail_next(&self, op: &'static str, fault: Scripted) {
        self.fail_later(op, 0, fault);
    }

    /// Lets `pass` calls of `op` go through, then makes the next one fail as `fault`.
    pub fn fail_later(&self, op: &'static str, pass: usize, fault: Scripted) {
        self.lock().script.push((op, pass, fault));
    }

    /// Lets `pass` calls of `op` go through, then makes the next one wait, before it runs,
    /// until the returned gate is opened: a regression test runs another node's work at that
    /// exact point of a stage.
    pub fn gate_later(&self, op: &'static str, pass: usize) -> Gate {
        let gate = Gate::default();
        self.lock().gates.push((op, pass, gate.clone()));
        gate
    }

    /// Forgets the gates not reached yet.
    pub fn forget_gates(&self) {
        self.lock().gates.clear();
    }

    /// Scripted faults not struck yet, of `op`.
    pub fn scripted_left(&self, op: &str) -> usize {
        self.lock()
            .script
            .iter()
            .filter(|(o, _, _)| *o == op)
            .count()
    }

    /// Forgets every listener (at the end of a run): a listener's observer holds its node's
    /// environment, which holds this storage, so a kept one would keep the run's storage
    /// (and a SQLite pool's threads and files) alive for the rest of the process.
    pub fn forget_listeners(&self) {
        self.lock().listeners.clear();
    }

    /// Forgets the scripted faults of `op` not struck yet.
    pub fn forget_scripted(&self, op: &str) {
        self.lock().script.retain(|(o, _, _)| *o != op);
    }

    pub fn enable(&self, on: bool) {
        self.lock().enabled = on;
    }

    /// Injected delays still sleeping (see `State::delays_in_flight`).
    pub fn delays_in_flight(&self) -> usize {
        self.lock().delays_in_flight
    }

    pub fn counts(&self) -> FaultCounts {
        self.lock().counts
    }

    pub fn commits(&self) -> Vec<CommitRecord> {
        self.lock().log.commits.clone()
    }

    pub fn duplicate_pick_ups(&self) -> Vec<String> {
        self.lock().log.duplicate_pick_ups.clone()
    }

    /// The run's trace (see `Log::trace`).
    pub fn trace(&self) -> Vec<String> {
        self.lock().log.trace.clone()
    }

    pub fn picked(&self) -> BTreeMap<(u32, i64), Holder> {
        self.lock().log.picked.clone()
    }

    /// How many pick-ups succeeded so far: a node started now picks up with places from here.
    pub fn pick_ups(&self) -> usize {
        self.lock().log.pick_order.len()
    }

    /// Why the lease (`shard`, `epoch`) is held by a node that does not know it (its pick-up or
    /// renewal lost its acknowledgement), if it is.
    pub fn unacknowledged(&self, shard: u32, epoch: i64) -> Option<&'static str> {
        self.lock().log.unacknowledged.get(&(shard, epoch)).copied()
    }

    /// The place of the pick-up of (`shard`, `epoch`) among all pick-ups, if one handed it out
    /// (a re-sharding's switch writes epochs that no pick-up handed out).
    pub fn pick_place(&self, shard: u32, epoch: i64) -> Option<usize> {
        self.lock().log.pick_order.get(&(shard, epoch)).copied()
    }

    fn decide(&self, op: &str, effect: Effect) -> Decision {
        let mut s = self.lock();
        if let Some(at) = s.script.iter().position(|(o, _, _)| *o == op) {
            if s.script[at].1 > 0 {
                s.script[at].1 -= 1;
            } else {
                let (_, _, fault) = s.script.remove(at);
                return Decision {
                    delay: None,
                    fail_before: fault == Scripted::Before,
                    fail_after: fault == Scripted::After && effect == Effect::Write,
                };
            }
        }
        if !s.enabled {
            return Decision {
                delay: None,
                fail_before: false,
                fail_after: false,
            };
        }
        let rates = s.rates;
        let delay = s
            .rng
            .chance(rates.delay)
            .then(|| Duration::from_millis(1 + s.rng.below(rates.max_delay_ms.max(1))));
        let fail_before = s.rng.chance(rates.fail_before);
        let fail_after = effect == Effect::Write && !fail_before && s.rng.chance(rates.fail_after);
        if delay.is_some() {
            s.counts.delayed += 1;
        }
        if fail_before {
            s.counts.failed_before += 1;
        }
        if fail_after {
            s.counts.failed_after += 1;
        }
        Decision {
            delay,
            fail_before,
            fail_after,
        }
    }

    /// The gate a call of `op` stops at now, if one is scripted for it.
    fn gate(&self, op: &str) -> Option<Gate> {
        let mut s = self.lock();
        let at = s.gates.iter().position(|(o, _, _)| *o == op)?;
        if s.gates[at].1 > 0 {
            s.gates[at].1 -= 1;
            return None;
        }
        Some(s.gates.remove(at).2)
    }

    /// Runs the part of a call before the inner storage: a scripted gate, the delay and the
    /// failure before.
    async fn before(&self, op: &str, effect: Effect) -> Result<Decision, StorageError> {
        if let Some(gate) = self.gate(op) {
            gate.reached.notify_one();
            gate.open.notified().await;
        }
        let d = self.decide(op, effect);
        if let Some(delay) = d.delay {
            self.lock().delays_in_flight += 1;
            let _done = DelayDone(self);
            tokio::time::sleep(delay).await;
        }
        if d.fail_before {
            return Err(injected(format!("{op} failed before it ran")));
        }
        Ok(d)
    }

    /// The inner call's result as the caller sees it: a lost acknowledgement turns a success
    /// into an error.
    fn ack<T>(op: &str, d: Decision, r: Result<T, StorageError>) -> Result<T, StorageError> {
        match r {
            Ok(_) if d.fail_after => Err(injected(format!(
                "{op} took effect but its acknowledgement was lost"
            ))),
            r => r,
        }
    }

    fn drop_notification(&self) -> bool {
        let mut s = self.lock();
        if !s.enabled {
            return false;
        }
        let rate = s.rates.drop_notification;
        let drop = s.rng.chance(rate);
        if drop {
            s.counts.notifications_dropped += 1;
        }
        drop
    }
}

impl FaultyStorage {
    /// The simulated `NOTIFY` of a write to `shards` that took effect: told to every
    /// listening node, each notification dropped at the fault plan's rate.
    fn broadcast(&self, shards: &[ShardIndex]) {
        if shards.is_empty() || self.inner.write_listener().is_some() {
            return;
        }
        let listeners: Vec<(ListenerControl, Arc<dyn ShardObserver>)> = {
            let mut s = self.lock();
            s.listeners.retain(|(control, _)| !control.is_stopped());
            s.listeners.clone()
        };
        for (control, observer) in listeners {
            if !self.drop_notification() {
                control.notified(1);
                observer.on_write(shards);
            }
        }
    }

    /// Broadcasts the shards a write reported when it took effect (whatever its ack).
    fn heard<T>(&self, r: &Result<T, StorageError>, shards: impl FnOnce(&T) -> Vec<ShardIndex>) {
        if let Ok(v) = r {
            self.broadcast(&shards(v));
        }
    }
}

/// Counts a delay as over when it ends, also when its call is dropped while it sleeps.
struct DelayDone<'a>(&'a FaultyStorage);

impl Drop for DelayDone<'_> {
    fn drop(&mut self) {
        self.0.lock().delays_in_flight -= 1;
    }
}

fn injected(reason: String) -> StorageError {
    StorageError::Unavailable {
        database: "simulation".into(),
        reason: format!("injected fault: {reason}"),
        advice: "",
        source: None,
    }
}

/// One commit as a trace line: who, when, and every row change, state and dead letter.
fn commit_line(c: &StageCommit) -> String {
    let states: Vec<(&str, &str, usize)> = c
        .states
        .iter()
        .map(|w| {
            let len = w.state.as_ref().map_or(0, Vec::len);
            (w.key.kind.as_str(), w.key.id.as_str(), len)
        })
        .collect();
    let dead: Vec<i64> = c.dead_letters.iter().map(|d| d.original.seq).collect();
    format!(
        "commit shard {} epoch {} by {:?} at {}: updates {:?} states {states:?} dead {dead:?} writes {}",
        c.lease.shard.0,
        c.lease.epoch.0,
        holder(&c.lease),
        c.now,
        c.updates,
        c.writes.messages.len(),
    )
}

fn holder(lease: &Lease) -> Holder {
    (lease.node_id.0.clone(), lease.worker_id.0)
}

/// A read: may be delayed or fail before it runs.
macro_rules! read {
    ($self:ident, $op:literal, $call:expr) => {{
        $self.before($op, Effect::Read).await?;
        $call.await
    }};
}

/// A write: may be delayed, fail before it runs, or lose its acknowledgement after.
macro_rules! write {
    ($self:ident, $op:literal, $call:expr) => {{
        let d = $self.before($op, Effect::Write).await?;
        let r = $call.await;
        FaultyStorage::ack($op, d, r)
    }};
}

#[async_trait]
impl InboxStore for FaultyStorage {
    async fn write(&self, batch: WriteBatch) -> Result<WriteReport, StorageError> {
        let d = self.before("write", Effect::Write).await?;
        let r = self.inner.write(batch).await;
        self.heard(&r, |w| w.shards.clone());
        FaultyStorage::ack("write", d, r)
    }

    async fn write_all(&self, batches: Vec<WriteBatch>) -> Result<Vec<WriteReport>, StorageError> {
        let d = self.before("write_all", Effect::Write).await?;
        let r = self.inner.write_all(batches).await;
        self.heard(&r, |ws| ws.iter().flat_map(|w| w.shards.clone()).collect());
        FaultyStorage::ack("write_all", d, r)
    }

    async fn write_all_addressed(
        &self,
        batches: Vec<WriteBatch>,
        shard_count: u32,
    ) -> Result<Vec<WriteReport>, StorageError> {
        let d = self.before("write_all", Effect::Write).await?;
        let r = self.inner.write_all_addressed(batches, shard_count).await;
        self.heard(&r, |ws| ws.iter().flat_map(|w| w.shards.clone()).collect());
        FaultyStorage::ack("write_all", d, r)
    }

    async fn read_page(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Page, StorageError> {
        read!(self, "read_page", self.inner.read_page(shard, now, limit))
    }

    async fn commit_stage(&self, commit: StageCommit) -> Result<CommitReport, StorageError> {
        let d = self.before("commit_stage", Effect::Write).await?;
        let lease = commit.lease.clone();
        let highest_before = self.lock().log.highest.get(&lease.shard.0).copied();
        let line = commit_line(&commit);
        let r = self.inner.commit_stage(commit).await;
        self.heard(&r, |c| c.written.shards.clone());
        if r.is_ok() {
            let mut s = self.lock();
            s.log.trace.push(line);
            s.log.commits.push(CommitRecord {
                shard: lease.shard.0,
                epoch: lease.epoch.0,
                holder: holder(&lease),
                superseded_by: highest_before.filter(|h| *h > lease.epoch.0),
            });
        }
        FaultyStorage::ack("commit_stage", d, r)
    }

    async fn next_due(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StorageError> {
        read!(self, "next_due", self.inner.next_due(shard, now))
    }

    async fn counts(&self, shard: Option<ShardIndex>) -> Result<InboxCounts, StorageError> {
        read!(self, "counts", self.inner.counts(shard))
    }

    async fn outcome(
        &self,
        key: &shardbox::core::DedupKey,
        now: DateTime<Utc>,
    ) -> Result<shardbox::core::OutcomeLookup, StorageError> {
        // No fault, no draw from the fault plan: the senders waiting for outcomes wake in an
        // order tokio's watch channel does not fix (it spreads its waiters over several
        // `Notify`s picked by a thread-local RNG), and the schedule must not depend on it.
        self.inner.outcome(key, now).await
    }

    async fn expired_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError> {
        read!(self, "expired_shards", self.inner.expired_shards(now))
    }

    async fn purge_due_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError> {
        read!(self, "purge_due_shards", self.inner.purge_due_shards(now))
    }

    async fn depths(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<shardbox::core::storage::ShardDepth>, StorageError> {
        read!(self, "depths", self.inner.depths(now))
    }

    async fn kind_depths(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<shardbox::core::storage::KindDepth>, StorageError> {
        read!(self, "kind_depths", self.inner.kind_depths(now))
    }

    async fn read_expired(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<InboxMessage>, StorageError> {
        read!(
            self,
            "read_expired",
            self.inner.read_expired(shard, now, limit)
        )
    }
}

#[async_trait]
impl WorkRegistry for FaultyStorage {
    async fn pick_up(
        &self,
        shard: ShardIndex,
        node_id: &NodeId,
        worker_id: WorkerId,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<Lease>, StorageError> {
        let d = self.before("pick_up", Effect::Write).await?;
        let r = self
            .inner
            .pick_up(shard, node_id, worker_id, now, lease_until)
            .await;
        if let Ok(Some(lease)) = &r {
            let mut s = self.lock();
            let key = (lease.shard.0, lease.epoch.0);
            if let Some(first) = s.log.picked.insert(key, holder(lease)) {
                let again = format!(
                    "shard {} epoch {} handed to {first:?} and again to {:?}",
                    key.0,
                    key.1,
                    holder(lease)
                );
                s.log.duplicate_pick_ups.push(again);
            }
            let line = format!(
                "pick-up shard {} epoch {} by {:?} at {now}",
                key.0,
                key.1,
                holder(lease)
            );
            s.log.trace.push(line);
            let place = s.log.pick_order.len();
            s.log.pick_order.entry(key).or_insert(place);
            let highest = s.log.highest.entry(key.0).or_insert(key.1);
            *highest = (*highest).max(key.1);
            if d.fail_after {
                s.log
                    .unacknowledged
                    .insert(key, "its pick-up lost its acknowledgement");
            }
        }
        FaultyStorage::ack("pick_up", d, r)
    }

    async fn renew(
        &self,
        lease: &Lease,
        lease_until: DateTime<Utc>,
    ) -> Result<Lease, StorageError> {
        let d = self.before("renew", Effect::Write).await?;
        let r = self.inner.renew(lease, lease_until).await;
        if r.is_ok() && d.fail_after {
            self.lock().log.unacknowledged.insert(
                (lease.shard.0, lease.epoch.0),
                "its renewal lost its acknowledgement",
            );
        }
        FaultyStorage::ack("renew", d, r)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StorageError> {
        write!(self, "release", self.inner.release(lease))
    }

    async fn sessions(&self) -> Result<Vec<ShardSession>, StorageError> {
        read!(self, "sessions", self.inner.sessions())
    }

    async fn layout(&self) -> Result<ShardLayout, StorageError> {
        read!(self, "layout", self.inner.layout())
    }

    async fn announce_reshard(
        &self,
        announcement: &ReshardAnnouncement,
        now: DateTime<Utc>,
    ) -> Result<ReshardAnnouncement, StorageError> {
        write!(
            self,
            "announce_reshard",
            self.inner.announce_reshard(announcement, now)
        )
    }

    async fn withdraw_reshard(&self, by: &NodeId) -> Result<(), StorageError> {
        write!(self, "withdraw_reshard", self.inner.withdraw_reshard(by))
    }

    async fn reshard(&self, switch: ReshardSwitch) -> Result<ReshardMoves, StorageError> {
        write!(self, "reshard", self.inner.reshard(switch))
    }

    async fn claim_shard_count(&self, shard_count: u32) -> Result<u32, StorageError> {
        write!(
            self,
            "claim_shard_count",
            self.inner.claim_shard_count(shard_count)
        )
    }

    async fn beat(
        &self,
        node_id: &NodeId,
        now: DateTime<Utc>,
        alive_until: DateTime<Utc>,
        kinds: &[shardbox::core::RegisteredKind],
    ) -> Result<(), StorageError> {
        write!(
            self,
            "beat",
            self.inner.beat(node_id, now, alive_until, kinds)
        )
    }

    async fn leave(&self, node_id: &NodeId) -> Result<(), StorageError> {
        write!(self, "leave", self.inner.leave(node_id))
    }

    async fn recorded_shard_count(&self) -> Result<Option<u32>, StorageError> {
        read!(
            self,
            "recorded_shard_count",
            self.inner.recorded_shard_count()
        )
    }

    async fn record_shard_strategy(
        &self,
        record: &StrategyRecord,
    ) -> Result<Option<StrategyRecord>, StorageError> {
        write!(
            self,
            "record_shard_strategy",
            self.inner.record_shard_strategy(record)
        )
    }

    async fn recorded_shard_strategy(&self) -> Result<Option<StrategyRecord>, StorageError> {
        read!(
            self,
            "recorded_shard_strategy",
            self.inner.recorded_shard_strategy()
        )
    }

    async fn claim_database_place(
        &self,
        place: shardbox::core::storage::DatabasePlace,
    ) -> Result<shardbox::core::storage::DatabasePlace, StorageError> {
        write!(
            self,
            "claim_database_place",
            self.inner.claim_database_place(place)
        )
    }

    async fn recorded_database_place(
        &self,
    ) -> Result<Option<shardbox::core::storage::DatabasePlace>, StorageError> {
        read!(
            self,
            "recorded_database_place",
            self.inner.recorded_database_place()
        )
    }

    async fn members(&self, now: DateTime<Utc>) -> Result<Vec<Member>, StorageError> {
        read!(self, "members", self.inner.members(now))
    }
}

#[async_trait]
impl EventStore for FaultyStorage {
    async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        read!(
            self,
            "read_events",
            self.inner.read_events(after_seq, event_types, since, limit)
        )
    }

    async fn read_source_events(
        &self,
        tenant: &str,
        source: &EventSource,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        read!(
            self,
            "read_source_events",
            self.inner
                .read_source_events(tenant, source, after_seq, limit)
        )
    }

    async fn last_event_seq(&self) -> Result<i64, StorageError> {
        read!(self, "last_event_seq", self.inner.last_event_seq())
    }

    async fn event_seqs(&self, ids: &[SignalId]) -> Result<Vec<(SignalId, i64)>, StorageError> {
        read!(self, "event_seqs", self.inner.event_seqs(ids))
    }

    async fn count_events(
        &self,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
    ) -> Result<i64, StorageError> {
        read!(
            self,
            "count_events",
            self.inner.count_events(event_types, since)
        )
    }
}

#[async_trait]
impl EntityStore for FaultyStorage {
    async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError> {
        read!(self, "load_states", self.inner.load_states(keys))
    }
}

#[async_trait]
impl CatchUpStore for FaultyStorage {
    async fn start_catch_up(
        &self,
        job: NewCatchUp,
        shard_count: u32,
    ) -> Result<CatchUpJob, StorageError> {
        write!(
            self,
            "start_catch_up",
            self.inner.start_catch_up(job, shard_count)
        )
    }

    async fn has_pending_replay(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        cursor: i64,
    ) -> Result<bool, StorageError> {
        read!(
            self,
            "has_pending_replay",
            self.inner
                .has_pending_replay(projection_kind, tenant, shards, cursor)
        )
    }

    async fn catch_up(&self, id: i64) -> Result<Option<CatchUpJob>, StorageError> {
        read!(self, "catch_up", self.inner.catch_up(id))
    }

    async fn cancel_catch_up(
        &self,
        id: i64,
        at: DateTime<Utc>,
    ) -> Result<Option<CatchUpJob>, StorageError> {
        write!(self, "cancel_catch_up", self.inner.cancel_catch_up(id, at))
    }

    async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError> {
        read!(self, "running_catch_ups", self.inner.running_catch_ups())
    }

    async fn update_catch_up(&self, job: &CatchUpJob) -> Result<(), StorageError> {
        write!(self, "update_catch_up", self.inner.update_catch_up(job))
    }

    async fn purge_catch_ups(&self, before: DateTime<Utc>) -> Result<usize, StorageError> {
        write!(self, "purge_catch_ups", self.inner.purge_catch_ups(before))
    }

    async fn read_model_versions(&self) -> Result<Vec<shardbox::ReadModelVersion>, StorageError> {
        read!(
            self,
            "read_model_versions",
            self.inner.read_model_versions()
        )
    }

    async fn retire_version(&self, model: &str, kind: &str) -> Result<u64, StorageError> {
        write!(
            self,
            "retire_version",
            self.inner.retire_version(model, kind)
        )
    }

    async fn prepare_catch_up(
        &self,
        spec: &NewCatchUp,
        own: Option<ShardIndex>,
    ) -> Result<i64, StorageError> {
        write!(
            self,
            "prepare_catch_up",
            self.inner.prepare_catch_up(spec, own)
        )
    }

    async fn store_positions(
        &self,
    ) -> Result<shardbox::core::storage::StorePositions, StorageError> {
        read!(self, "store_positions", self.inner.store_positions())
    }

    async fn has_unsettled_rows(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        up_to_seq: i64,
    ) -> Result<bool, StorageError> {
        read!(
            self,
            "has_unsettled_rows",
            self.inner
                .has_unsettled_rows(projection_kind, tenant, shards, up_to_seq)
        )
    }

    async fn released_catch_ups(&self) -> Result<Vec<i64>, StorageError> {
        read!(self, "released_catch_ups", self.inner.released_catch_ups())
    }

    async fn release_parked(
        &self,
        job: &CatchUpJob,
        own: Option<ShardIndex>,
    ) -> Result<usize, StorageError> {
        write!(self, "release_parked", self.inner.release_parked(job, own))
    }
}

#[async_trait]
impl DeadLetterStore for FaultyStorage {
    async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<StoredDeadLetter>, StorageError> {
        read!(
            self,
            "list_dead_letters",
            self.inner.list_dead_letters(filter)
        )
    }

    async fn count_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError> {
        read!(
            self,
            "count_dead_letters",
            self.inner.count_dead_letters(filter)
        )
    }

    async fn requeue_dead_letters(
        &self,
        requeue: Vec<Requeue>,
        shard_count: u32,
        now: DateTime<Utc>,
    ) -> Result<RequeueReport, StorageError> {
        let d = self.before("requeue_dead_letters", Effect::Write).await?;
        let r = self
            .inner
            .requeue_dead_letters(requeue, shard_count, now)
            .await;
        self.heard(&r, |report| report.shards.clone());
        FaultyStorage::ack("requeue_dead_letters", d, r)
    }

    async fn purge_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError> {
        write!(
            self,
            "purge_dead_letters",
            self.inner.purge_dead_letters(filter)
        )
    }

    async fn blocked_targets(&self, limit: usize) -> Result<Vec<BlockedTarget>, StorageError> {
        read!(self, "blocked_targets", self.inner.blocked_targets(limit))
    }

    async fn unblock_target(
        &self,
        target: &EntityKey,
        action: Unblock,
        now: DateTime<Utc>,
    ) -> Result<UnblockReport, StorageError> {
        let d = self.before("unblock_target", Effect::Write).await?;
        let r = self.inner.unblock_target(target, action, now).await;
        self.heard(&r, |report| report.shards.clone());
        FaultyStorage::ack("unblock_target", d, r)
    }
}

#[async_trait]
impl KindControlStore for FaultyStorage {
    async fn kind_controls(&self) -> Result<Vec<KindControl>, StorageError> {
        read!(self, "kind_controls", self.inner.kind_controls())
    }

    async fn pause_kind(&self, kind: &str, now: DateTime<Utc>) -> Result<bool, StorageError> {
        let d = self.before("pause_kind", Effect::Write).await?;
        let r = self.inner.pause_kind(kind, now).await;
        FaultyStorage::ack("pause_kind", d, r)
    }

    async fn resume_kind(
        &self,
        kind: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeReport, StorageError> {
        let d = self.before("resume_kind", Effect::Write).await?;
        let r = self.inner.resume_kind(kind, now).await;
        self.heard(&r, |report| report.shards.clone());
        FaultyStorage::ack("resume_kind", d, r)
    }

    async fn set_kind_settings(
        &self,
        kind: &str,
        settings: &KindSettings,
        now: DateTime<Utc>,
    ) -> Result<(), StorageError> {
        let d = self.before("set_kind_settings", Effect::Write).await?;
        let r = self.inner.set_kind_settings(kind, settings, now).await;
        FaultyStorage::ack("set_kind_settings", d, r)
    }
}

#[async_trait]
impl OutboxStore for FaultyStorage {
    async fn outbox_page(
        &self,
        database: u32,
        after: i64,
        limit: usize,
    ) -> Result<Vec<OutboxRow>, StorageError> {
        read!(
            self,
            "outbox_page",
            self.inner.outbox_page(database, after, limit)
        )
    }

    async fn trim_outbox(&self, database: u32, up_to: i64) -> Result<usize, StorageError> {
        write!(self, "trim_outbox", self.inner.trim_outbox(database, up_to))
    }

    async fn relay_position(&self, from: u32) -> Result<i64, StorageError> {
        read!(self, "relay_position", self.inner.relay_position(from))
    }

    async fn relay_into(&self, copy: RelayCopy) -> Result<RelayOutcome, StorageError> {
        write!(self, "relay_into", self.inner.relay_into(copy))
    }
}

impl Storage for FaultyStorage {
    fn describe(&self) -> String {
        format!("fault-injecting wrapper around {}", self.inner.describe())
    }

    /// Always: the inner backend's listener with its notifications passing through
    /// [`DroppingObserver`] (PostgreSQL), or the simulated `NOTIFY` (memory, SQLite).
    fn write_listener(&self) -> Option<&dyn WriteListener> {
        Some(self as &dyn WriteListener)
    }
}

impl WriteListener for FaultyStorage {
    fn listen(
        &self,
        node_id: &NodeId,
        shard_count: u32,
        observer: Arc<dyn ShardObserver>,
    ) -> Result<ListenerHandle, StorageError> {
        let Some(inner) = self.inner.write_listener() else {
            let (handle, control) = ListenerHandle::new(node_id);
            control.connected();
            self.lock().listeners.push((control, observer));
            return Ok(handle);
        };
        let dropping = Arc::new(DroppingObserver {
            faults: self.clone(),
            observer,
        });
        inner.listen(node_id, shard_count, dropping)
    }
}

/// Passes notifications on to the node, except those the fault plan drops.
struct DroppingObserver {
    faults: FaultyStorage,
    observer: Arc<dyn ShardObserver>,
}

impl ShardObserver for DroppingObserver {
    fn on_write(&self, shards: &[ShardIndex]) {
        if !self.faults.drop_notification() {
            self.observer.on_write(shards);
        }
    }

    fn on_missed_writes(&self) {
        self.observer.on_missed_writes();
    }
}

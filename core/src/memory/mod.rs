//! The in-memory backend: every storage trait over one mutex-guarded state.
//!
//! Thread-safe and complete (dedup at write, fenced commits, leases, catch-up jobs), it serves
//! tests and users who want fire-and-forget delivery with no persistence. Everything is lost
//! when the process ends. Reads are indexed per shard so a stage costs O(page), as on the
//! durable backends.

use crate::model::error::StorageError;
use crate::model::event::StoredEvent;
use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, SignalId};
use crate::model::message::{DedupKey, InboxMessage, InboxWrite, MessageStatus};
use crate::storage::{
    CatchUpJob, DeadLetter, DeadLetterFilter, DeadLetterId, EntityKey, EntityState, Inspect, Lease,
    Member, ShardSession, Storage, WriteBatch, WriteReport,
};
use crate::sync::lock;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

mod catch_up;
mod dead_letters;
mod due_index;
mod entities;
mod events;
mod inbox;
mod kind_controls;
mod outbox;
mod outcomes;
mod registry;
mod reshard;
mod stage_commit;

use due_index::DueIndex;

#[derive(Default)]
struct State {
    rows: HashMap<i64, InboxMessage>,
    next_seq: i64,
    keys: HashMap<DedupKey, i64>,
    /// Undelivered rows per shard, in seq order.
    pending: HashMap<ShardIndex, BTreeSet<i64>>,
    /// The same rows per shard, indexed by when they are due (what pages read).
    due: HashMap<ShardIndex, DueIndex>,
    /// Undelivered rows with failed attempts per shard.
    retrying: HashMap<ShardIndex, BTreeSet<i64>>,
    /// Blocked rows per shard, in seq order (not pending).
    blocked: HashMap<ShardIndex, BTreeSet<i64>>,
    /// Pending rows with a TTL, by (expires_at, seq).
    expiring: BTreeSet<(DateTime<Utc>, i64)>,
    /// Delivered rows per shard by (keep_until, seq).
    delivered: HashMap<ShardIndex, BTreeSet<(DateTime<Utc>, i64)>>,
    events: Vec<StoredEvent>,
    event_seq: HashMap<SignalId, i64>,
    /// The `seq`s of each producer's events (tenant, source kind, source id), ascending.
    events_by_source: HashMap<EntityKey, Vec<i64>>,
    states: HashMap<EntityKey, EntityState>,
    sessions: BTreeMap<ShardIndex, ShardSession>,
    jobs: BTreeMap<i64, CatchUpJob>,
    versions: BTreeMap<String, crate::storage::ReadModelVersion>,
    dead_letters: BTreeMap<DeadLetterId, DeadLetter>,
    next_dead_letter: i64,
    /// The recorded shard count (see `WorkRegistry::claim_shard_count`).
    shard_count: Option<u32>,
    /// The recorded shard strategy (see `WorkRegistry::record_shard_strategy`).
    shard_strategy: Option<crate::model::strategy::StrategyRecord>,
    /// The recorded place in a storage over several databases.
    database_place: Option<crate::storage::DatabasePlace>,
    /// The re-sharding announced, if any (see `WorkRegistry::announce_reshard`).
    resharding: Option<crate::storage::ReshardAnnouncement>,
    /// The membership, by node id.
    members: BTreeMap<NodeId, Member>,
    /// Command outcomes, kept for the deduplication window.
    outcomes: outcomes::Outcomes,
    /// The kinds' stored controls (pauses, run-time settings), by kind.
    kind_controls: BTreeMap<String, crate::model::kind_controls::KindControl>,
    /// The outbox and the relay positions recorded here (see `outbox`).
    outbox: outbox::Outbox,
    /// The jobs over several databases whose parked rows this database released.
    released_jobs: BTreeSet<i64>,
}

fn target_of(m: &InboxMessage) -> EntityKey {
    EntityKey {
        kind: m.message.target_kind.clone(),
        tenant: m.message.tenant.clone(),
        id: m.message.target_id.clone(),
    }
}

impl State {
    /// Deletes the completed jobs that finished before `before`; returns how many.
    fn purge_jobs(&mut self, before: DateTime<Utc>) -> usize {
        let before_len = self.jobs.len();
        self.jobs
            .retain(|_, j| j.status.is_running() || j.finished_at.is_none_or(|t| t >= before));
        before_len - self.jobs.len()
    }

    fn insert(&mut self, w: InboxWrite, report: &mut WriteReport) {
        let key = w.message.dedup_key();
        if self.keys.contains_key(&key) {
            report.duplicates += 1;
            return;
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        self.keys.insert(key, seq);
        self.pend(w.shard, seq, w.message.deliver_after);
        if let Some(at) = w.message.expires_at {
            self.expiring.insert((at, seq));
        }
        report.written += 1;
        report.shards.push(w.shard);
        self.rows
            .insert(seq, InboxMessage::fresh(seq, w.shard, w.message));
    }

    fn write(&mut self, batch: WriteBatch) -> WriteReport {
        let mut report = WriteReport::default();
        for event in batch.events {
            if !self.event_seq.contains_key(&event.id) {
                let seq = self.events.len() as i64 + 1;
                self.event_seq.insert(event.id.clone(), seq);
                self.events_by_source
                    .entry(EntityKey::new(
                        &event.source.kind,
                        &event.tenant,
                        &event.source.id,
                    ))
                    .or_default()
                    .push(seq);
                self.events.push(StoredEvent { seq, event });
                report.events += 1;
            }
        }
        for m in batch.messages {
            self.insert(m, &mut report);
        }
        report.shards.sort_unstable();
        report.shards.dedup();
        report
    }

    fn remove(&mut self, seq: i64) -> Option<InboxMessage> {
        let row = self.rows.remove(&seq)?;
        self.keys.remove(&row.dedup_key());
        self.unpend(&row);
        if let Some(b) = self.blocked.get_mut(&row.shard) {
            b.remove(&seq);
        }
        if let (Some(d), Some(k)) = (self.delivered.get_mut(&row.shard), row.keep_until) {
            d.remove(&(k, seq));
        }
        Some(row)
    }

    /// Parks row `seq` behind its target's blocked row (see `RowChange::BehindBlock`), or
    /// leaves it due if the target has none any more.
    fn park_behind_block(&mut self, seq: i64) {
        let Some(row) = self.rows.get(&seq) else {
            return;
        };
        let target = target_of(row);
        let still_blocked = self
            .blocked
            .get(&row.shard)
            .is_some_and(|b| b.iter().any(|s| target_of(&self.rows[s]) == target));
        if still_blocked {
            if let Some(row) = self.rows.get_mut(&seq) {
                row.message.deliver_after = Some(crate::catch_up::parked_until());
            }
        }
    }

    /// Makes the rows of `target` in `shard` held until exactly `until` due at once (see
    /// `HoldRelease`).
    fn release_holds(&mut self, shard: ShardIndex, target: &EntityKey, until: DateTime<Utc>) {
        let held: Vec<i64> = self
            .pending
            .get(&shard)
            .into_iter()
            .flatten()
            .copied()
            .filter(|seq| {
                let row = &self.rows[seq];
                row.status == MessageStatus::ToDeliver
                    && row.message.deliver_after == Some(until)
                    && target_of(row) == *target
            })
            .collect();
        for seq in held {
            if let Some(row) = self.rows.get_mut(&seq) {
                row.message.deliver_after = None;
            }
            self.due.entry(shard).or_default().add(seq, None);
        }
    }

    /// Makes every parked row of `target` due at once (an unblock), whatever a reader's
    /// clock says; returns their shards, one per row.
    fn release_parked(&mut self, target: &EntityKey) -> Vec<ShardIndex> {
        self.release_parked_where(|row| target_of(row) == *target)
    }

    /// Makes every parked row that `matches` due at once; returns their shards, one per row.
    fn release_parked_where(&mut self, matches: impl Fn(&InboxMessage) -> bool) -> Vec<ShardIndex> {
        let parked: Vec<(ShardIndex, i64)> = self
            .pending
            .iter()
            .flat_map(|(shard, seqs)| seqs.iter().map(move |seq| (*shard, *seq)))
            .filter(|(_, seq)| {
                let row = &self.rows[seq];
                crate::catch_up::is_parked(row.message.deliver_after) && matches(row)
            })
            .collect();
        for (shard, seq) in &parked {
            if let Some(row) = self.rows.get_mut(seq) {
                row.message.deliver_after = None;
            }
            self.due.entry(*shard).or_default().add(*seq, None);
        }
        parked.into_iter().map(|(shard, _)| shard).collect()
    }

    /// Puts row `seq` of `shard`, due at `deliver_after`, into the pending indexes.
    fn pend(&mut self, shard: ShardIndex, seq: i64, deliver_after: Option<DateTime<Utc>>) {
        self.pending.entry(shard).or_default().insert(seq);
        self.due.entry(shard).or_default().add(seq, deliver_after);
    }

    /// Takes `row` out of the pending indexes (it was delivered, blocked or removed).
    fn unpend(&mut self, row: &InboxMessage) {
        if let Some(p) = self.pending.get_mut(&row.shard) {
            p.remove(&row.seq);
        }
        if let Some(d) = self.due.get_mut(&row.shard) {
            d.remove(row.seq);
        }
        if let Some(r) = self.retrying.get_mut(&row.shard) {
            r.remove(&row.seq);
        }
        if let Some(at) = row.message.expires_at {
            self.expiring.remove(&(at, row.seq));
        }
    }

    fn add_dead_letter(&mut self, letter: DeadLetter) {
        self.next_dead_letter += 1;
        self.dead_letters
            .insert(DeadLetterId(self.next_dead_letter), letter);
    }

    /// The ids of the dead letters `filter` selects, oldest first, at most its limit.
    fn select_dead_letters(&self, filter: &DeadLetterFilter) -> Vec<DeadLetterId> {
        self.dead_letters
            .iter()
            .filter(|(id, l)| filter.matches(**id, l))
            .map(|(id, _)| *id)
            .take(filter.limit.unwrap_or(usize::MAX))
            .collect()
    }

    fn epoch_of(&self, shard: ShardIndex) -> Option<LeaseEpoch> {
        self.sessions.get(&shard).map(|s| s.epoch)
    }

    /// `InboxStore::next_due` of `shard` at `now`.
    fn next_due(&self, shard: ShardIndex, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.due
            .get(&shard)
            .and_then(|index| {
                index.next_after(now, |seq| {
                    self.rows.get(&seq).and_then(|r| r.message.deliver_after)
                })
            })
            // Parked rows wait for their catch-up, not for a time (the latest time there is:
            // if it is the earliest, every row left is parked).
            .filter(|at| !crate::catch_up::is_parked(Some(*at)))
    }

    fn holds(&self, lease: &Lease) -> bool {
        self.sessions
            .get(&lease.shard)
            .is_some_and(|s| s.epoch == lease.epoch && s.node_id.as_ref() == Some(&lease.node_id))
    }

    fn lease_lost(&self, lease: &Lease) -> StorageError {
        StorageError::LeaseLost {
            shard: lease.shard,
            held: lease.epoch,
            current: self.epoch_of(lease.shard),
        }
    }
}

/// Storage in process memory.
#[derive(Default)]
pub struct MemoryStorage {
    state: Mutex<State>,
}

impl std::fmt::Debug for MemoryStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryStorage")
    }
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave half a write: every method checks
        // before it mutates. Recover the state rather than poisoning every later call.
        lock(&self.state)
    }

    /// The dead letters, oldest first.
    pub fn dead_letters(&self) -> Vec<DeadLetter> {
        self.lock().dead_letters.values().cloned().collect()
    }

    /// Every row of the Inbox, in seq order (for tests and inspection).
    pub fn rows(&self) -> Vec<InboxMessage> {
        let state = self.lock();
        let mut rows: Vec<_> = state.rows.values().cloned().collect();
        rows.sort_by_key(|r| r.seq);
        rows
    }
}

#[async_trait::async_trait]
impl Inspect for MemoryStorage {
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError> {
        Ok(MemoryStorage::dead_letters(self))
    }

    async fn rows(&self) -> Result<Vec<InboxMessage>, StorageError> {
        Ok(MemoryStorage::rows(self))
    }

    async fn outcome_records(&self) -> Result<u64, StorageError> {
        Ok(self.lock().outcomes.len() as u64)
    }
}

impl Storage for MemoryStorage {
    fn describe(&self) -> String {
        "memory".into()
    }
}

//! The in-memory backend: every storage trait over one mutex-guarded state.
//!
//! Thread-safe and complete (dedup at write, fenced commits, leases, catch-up jobs), it serves
//! tests and users who want fire-and-forget delivery with no persistence. Everything is lost
//! when the process ends. Reads are indexed per shard so a stage costs O(page), as on the
//! durable backends.

use crate::error::StorageError;
use crate::event::StoredEvent;
use crate::ids::{LeaseEpoch, NodeId, ShardIndex, SignalId, WorkerId};
use crate::message::{DedupKey, InboxMessage, InboxWrite, MessageStatus};
use crate::storage::unblocked_reason;
use crate::storage::{
    BlockedTarget, CatchUpJob, CatchUpStatus, CatchUpStore, CatchUpTargets, CommitReport,
    DeadLetter, DeadLetterFilter, DeadLetterId, DeadLetterStore, EntityKey, EntityState,
    EntityStore, EventStore, InboxCounts, InboxStore, Lease, NewCatchUp, Page, Requeue,
    RequeueReport, RowChange, ShardSession, StageCommit, Storage, StoredDeadLetter, Unblock,
    UnblockReport, WorkRegistry, WriteBatch, WriteReport,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

mod due_index;

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
    states: HashMap<EntityKey, EntityState>,
    sessions: BTreeMap<ShardIndex, ShardSession>,
    jobs: BTreeMap<i64, CatchUpJob>,
    dead_letters: BTreeMap<DeadLetterId, DeadLetter>,
    next_dead_letter: i64,
}

fn target_of(m: &InboxMessage) -> EntityKey {
    EntityKey {
        kind: m.message.target_kind.clone(),
        tenant: m.message.tenant.clone(),
        id: m.message.target_id.clone(),
    }
}

impl State {
    fn insert(&mut self, w: InboxWrite, report: &mut WriteReport) {
        let key = w.message.dedup_key();
        if self.keys.contains_key(&key) {
            report.duplicates += 1;
            return;
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        let status = if w.message.kind == crate::message::MessageKind::CatchUp {
            MessageStatus::ToCatchUp
        } else {
            MessageStatus::ToDeliver
        };
        self.keys.insert(key, seq);
        self.pend(w.shard, seq, w.message.deliver_after);
        if let Some(at) = w.message.expires_at {
            self.expiring.insert((at, seq));
        }
        report.written += 1;
        report.shards.push(w.shard);
        self.rows.insert(
            seq,
            InboxMessage {
                seq,
                shard: w.shard,
                status,
                attempts: 0,
                last_error: None,
                first_failed_at: None,
                keep_until: None,
                message: w.message,
            },
        );
    }

    fn write(&mut self, batch: WriteBatch) -> WriteReport {
        let mut report = WriteReport::default();
        for event in batch.events {
            if !self.event_seq.contains_key(&event.id) {
                let seq = self.events.len() as i64 + 1;
                self.event_seq.insert(event.id.clone(), seq);
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

    /// Settles the parked rows of a completed job (see `StageCommit::catch_ups`): removes the
    /// ones the replay covered, makes the others due, re-fences the affected shards but
    /// `own`.
    fn settle_parked(&mut self, job: &CatchUpJob, own: Option<ShardIndex>) {
        let parked = crate::catch_up::parked_until();
        let mut covered = Vec::new();
        let mut released = Vec::new();
        for shard in &job.spec.affected_shards {
            let Some(pending) = self.pending.get(shard) else {
                continue;
            };
            for seq in pending {
                let m = &self.rows[seq].message;
                if m.deliver_after != Some(parked)
                    || m.kind != crate::message::MessageKind::Event
                    || m.target_kind != job.spec.projection_kind
                    || !crate::catch_up::covers(job, &m.tenant, &m.target_id)
                {
                    continue;
                }
                match self.event_seq.get(&m.signal_id) {
                    Some(e) if *e <= job.cursor => covered.push(*seq),
                    _ => released.push(*seq),
                }
            }
        }
        for seq in covered {
            self.remove(seq);
        }
        for seq in released {
            if let Some(row) = self.rows.get_mut(&seq) {
                row.message.deliver_after = None;
                let shard = row.shard;
                // Due at once: back among the rows pages check.
                self.due.entry(shard).or_default().add(seq, None);
            }
        }
        for shard in &job.spec.affected_shards {
            if Some(*shard) == own {
                continue;
            }
            if let Some(s) = self.sessions.get_mut(shard) {
                s.epoch = LeaseEpoch(s.epoch.0 + 1);
                s.lease_until = None;
            }
        }
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

    /// Makes every parked row of `target` due at once (an unblock), whatever a reader's
    /// clock says; returns their shards, one per row.
    fn release_parked(&mut self, target: &EntityKey) -> Vec<ShardIndex> {
        let parked: Vec<(ShardIndex, i64)> = self
            .pending
            .iter()
            .flat_map(|(shard, seqs)| seqs.iter().map(move |seq| (*shard, *seq)))
            .filter(|(_, seq)| {
                let row = &self.rows[seq];
                crate::catch_up::is_parked(row.message.deliver_after) && target_of(row) == *target
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
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

#[async_trait]
impl InboxStore for MemoryStorage {
    async fn write(&self, batch: WriteBatch) -> Result<WriteReport, StorageError> {
        Ok(self.lock().write(batch))
    }

    async fn write_all(&self, batches: Vec<WriteBatch>) -> Result<Vec<WriteReport>, StorageError> {
        let mut state = self.lock();
        Ok(batches.into_iter().map(|b| state.write(b)).collect())
    }

    async fn read_page(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Page, StorageError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut page = Page::default();
        if let Some(index) = state.due.get_mut(&shard) {
            let rows = &state.rows;
            let due = index.due(now, limit, |seq| {
                rows.get(&seq).and_then(|r| r.message.deliver_after)
            });
            page.messages = due.iter().map(|seq| rows[seq].clone()).collect();
        }
        if let Some(retrying) = state.retrying.get(&shard) {
            for seq in retrying {
                let row = &state.rows[seq];
                if row.is_expired(now) {
                    continue;
                }
                if let Some(at) = row.message.deliver_after.filter(|at| *at > now) {
                    page.waiting.push((target_of(row), at));
                }
            }
        }
        if let Some(blocked) = state.blocked.get(&shard) {
            for seq in blocked {
                page.blocked.push(target_of(&state.rows[seq]));
            }
        }
        page.next_due = state.next_due(shard, now);
        page.purge_due = state
            .delivered
            .get(&shard)
            .and_then(|d| d.first())
            .is_some_and(|(keep_until, _)| *keep_until <= now);
        Ok(page)
    }

    async fn commit_stage(&self, commit: StageCommit) -> Result<CommitReport, StorageError> {
        let mut state = self.lock();
        if !state.holds(&commit.lease) {
            return Err(state.lease_lost(&commit.lease));
        }
        let shard = commit.lease.shard;
        for u in &commit.updates {
            match state.rows.get(&u.seq) {
                Some(row) if row.shard == shard => {}
                _ => {
                    return Err(StorageError::Corrupt(format!(
                        "stage of shard {shard} updates row {} which is not in that shard",
                        u.seq
                    )))
                }
            }
        }
        // Parked after the other changes: a block committed with them counts.
        let mut behind_block = Vec::new();
        for u in commit.updates {
            match u.change {
                RowChange::BehindBlock => behind_block.push(u.seq),
                RowChange::Remove => {
                    state.remove(u.seq);
                }
                RowChange::Delivered { keep_until } => {
                    let Some(row) = state.rows.get_mut(&u.seq) else {
                        continue;
                    };
                    row.status = MessageStatus::Delivered;
                    row.keep_until = Some(keep_until);
                    let row = row.clone();
                    state.unpend(&row);
                    state
                        .delivered
                        .entry(shard)
                        .or_default()
                        .insert((keep_until, u.seq));
                }
                RowChange::RetryAt {
                    at,
                    attempts,
                    error,
                } => {
                    let Some(row) = state.rows.get_mut(&u.seq) else {
                        continue;
                    };
                    row.message.deliver_after = Some(at);
                    row.attempts = attempts;
                    row.last_error = Some(error);
                    row.first_failed_at.get_or_insert(commit.now);
                    state.retrying.entry(shard).or_default().insert(u.seq);
                }
                RowChange::Block { attempts, error } => {
                    let Some(row) = state.rows.get_mut(&u.seq) else {
                        continue;
                    };
                    row.status = MessageStatus::Blocked;
                    row.message.deliver_after = Some(commit.now);
                    row.attempts = attempts;
                    row.last_error = Some(error);
                    row.first_failed_at.get_or_insert(commit.now);
                    let row = row.clone();
                    state.unpend(&row);
                    state.blocked.entry(shard).or_default().insert(u.seq);
                }
                RowChange::Hold { until } => {
                    if let Some(row) = state.rows.get_mut(&u.seq) {
                        row.message.deliver_after = Some(until);
                    }
                }
            }
        }
        for seq in behind_block {
            state.park_behind_block(seq);
        }
        let now = commit.now;
        for s in commit.states {
            match s.state {
                Some(bytes) => {
                    let version = state.states.get(&s.key).map_or(0, |e| e.version) + 1;
                    state.states.insert(
                        s.key.clone(),
                        EntityState {
                            key: s.key,
                            version,
                            state: bytes,
                            updated_at: now,
                        },
                    );
                }
                None => {
                    state.states.remove(&s.key);
                }
            }
        }
        for letter in commit.dead_letters {
            state.add_dead_letter(letter);
        }
        for job in commit.catch_ups {
            if job.status == CatchUpStatus::Completed {
                state.settle_parked(&job, Some(shard));
            }
            state.jobs.insert(job.id, job);
        }
        let written = state.write(commit.writes);
        let mut purged = 0;
        if commit.purge_delivered > 0 {
            let expired: Vec<i64> = state
                .delivered
                .get(&shard)
                .map(|d| {
                    d.iter()
                        .take_while(|(k, _)| *k <= now)
                        .take(commit.purge_delivered)
                        .map(|(_, seq)| *seq)
                        .collect()
                })
                .unwrap_or_default();
            for seq in expired {
                state.remove(seq);
                purged += 1;
            }
        }
        let session = state
            .sessions
            .get_mut(&shard)
            .ok_or_else(|| StorageError::Corrupt(format!("no session for shard {shard}")))?;
        session.lease_until = Some(commit.lease_until);
        let mut lease = commit.lease;
        lease.lease_until = commit.lease_until;
        Ok(CommitReport {
            lease,
            written,
            purged,
        })
    }

    async fn next_due(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StorageError> {
        Ok(self.lock().next_due(shard, now))
    }

    async fn counts(&self, shard: Option<ShardIndex>) -> Result<InboxCounts, StorageError> {
        let state = self.lock();
        let mut c = InboxCounts::default();
        for row in state.rows.values() {
            if shard.is_some_and(|s| s != row.shard) {
                continue;
            }
            match row.status {
                MessageStatus::ToDeliver => c.to_deliver += 1,
                MessageStatus::Delivered => c.delivered += 1,
                MessageStatus::ToCatchUp => c.to_catch_up += 1,
                MessageStatus::Blocked => c.blocked += 1,
            }
        }
        Ok(c)
    }

    async fn expired_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError> {
        let state = self.lock();
        let mut shards: Vec<ShardIndex> = state
            .expiring
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, seq)| state.rows[seq].shard)
            .collect();
        shards.sort_unstable();
        shards.dedup();
        Ok(shards)
    }

    async fn read_expired(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<InboxMessage>, StorageError> {
        let mut state = self.lock();
        let mut seqs: Vec<i64> = state
            .expiring
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, seq)| *seq)
            .filter(|seq| state.rows[seq].shard == shard)
            .collect();
        seqs.sort_unstable();
        seqs.truncate(limit);
        // The sweep's stage may change these rows, due or not: pages check them from now on.
        if let Some(index) = state.due.get_mut(&shard) {
            for seq in &seqs {
                index.handed_out(*seq);
            }
        }
        Ok(seqs.iter().map(|seq| state.rows[seq].clone()).collect())
    }
}

#[async_trait]
impl WorkRegistry for MemoryStorage {
    async fn pick_up(
        &self,
        shard: ShardIndex,
        node_id: &NodeId,
        worker_id: WorkerId,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<Lease>, StorageError> {
        let mut state = self.lock();
        let session = state.sessions.entry(shard).or_insert(ShardSession {
            shard,
            node_id: None,
            worker_id: None,
            epoch: LeaseEpoch(0),
            picked_at: None,
            lease_until: None,
        });
        if session.lease_until.is_some_and(|until| until > now) {
            return Ok(None);
        }
        // Released leases are unset; a set one that has passed lost its holder.
        let taken_over = session.lease_until.is_some();
        session.epoch = LeaseEpoch(session.epoch.0 + 1);
        session.node_id = Some(node_id.clone());
        session.worker_id = Some(worker_id);
        session.picked_at = Some(now);
        session.lease_until = Some(lease_until);
        Ok(Some(Lease {
            shard,
            node_id: node_id.clone(),
            worker_id,
            epoch: session.epoch,
            picked_at: now,
            lease_until,
            taken_over,
        }))
    }

    async fn renew(
        &self,
        lease: &Lease,
        lease_until: DateTime<Utc>,
    ) -> Result<Lease, StorageError> {
        let mut state = self.lock();
        if !state.holds(lease) {
            return Err(state.lease_lost(lease));
        }
        if let Some(s) = state.sessions.get_mut(&lease.shard) {
            s.lease_until = Some(lease_until);
        }
        let mut renewed = lease.clone();
        renewed.lease_until = lease_until;
        Ok(renewed)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StorageError> {
        let mut state = self.lock();
        if state.holds(lease) {
            if let Some(s) = state.sessions.get_mut(&lease.shard) {
                s.lease_until = None;
            }
        }
        Ok(())
    }

    async fn sessions(&self) -> Result<Vec<ShardSession>, StorageError> {
        Ok(self.lock().sessions.values().cloned().collect())
    }
}

#[async_trait]
impl EventStore for MemoryStorage {
    async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let state = self.lock();
        let start = usize::try_from(after_seq.max(0)).unwrap_or(usize::MAX);
        Ok(state
            .events
            .iter()
            .skip(start)
            .filter(|e| event_types.is_empty() || event_types.contains(&e.event.event_type))
            .filter(|e| since.is_none_or(|t| e.event.occurred_at >= t))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn last_event_seq(&self) -> Result<i64, StorageError> {
        Ok(self.lock().events.len() as i64)
    }

    async fn event_seqs(&self, ids: &[SignalId]) -> Result<Vec<(SignalId, i64)>, StorageError> {
        let state = self.lock();
        Ok(ids
            .iter()
            .filter_map(|id| state.event_seq.get(id).map(|seq| (id.clone(), *seq)))
            .collect())
    }

    async fn count_events(
        &self,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
    ) -> Result<i64, StorageError> {
        let state = self.lock();
        Ok(state
            .events
            .iter()
            .filter(|e| event_types.is_empty() || event_types.contains(&e.event.event_type))
            .filter(|e| since.is_none_or(|t| e.event.occurred_at >= t))
            .count() as i64)
    }
}

#[async_trait]
impl EntityStore for MemoryStorage {
    async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError> {
        let state = self.lock();
        Ok(keys
            .iter()
            .filter_map(|k| state.states.get(k).cloned())
            .collect())
    }
}

#[async_trait]
impl CatchUpStore for MemoryStorage {
    async fn start_catch_up(&self, job: NewCatchUp) -> Result<CatchUpJob, StorageError> {
        let mut state = self.lock();
        if let Some(running) = state.jobs.values().find(|j| {
            j.status.is_running()
                && j.spec.projection_kind == job.projection_kind
                && j.spec.tenant == job.tenant
                && j.spec.targets.overlaps(&job.targets)
        }) {
            return Err(StorageError::CatchUpOverlap {
                projection_kind: job.projection_kind,
                running_job: running.id,
            });
        }
        // Reset the targets and re-fence the affected shards, as the durable backends do.
        let kind = job.projection_kind.clone();
        let tenant = job.tenant.clone();
        state.states.retain(|k, _| {
            !(k.kind == kind
                && k.tenant == tenant
                && match &job.targets {
                    CatchUpTargets::All => true,
                    CatchUpTargets::Ids(ids) => ids.contains(&k.id),
                })
        });
        for shard in &job.affected_shards {
            if let Some(s) = state.sessions.get_mut(shard) {
                s.epoch = LeaseEpoch(s.epoch.0 + 1);
                s.lease_until = None;
            }
        }
        let id = state.jobs.keys().next_back().copied().unwrap_or(0) + 1;
        let created = CatchUpJob {
            id,
            updated_at: job.created_at,
            spec: job,
            status: CatchUpStatus::Started,
            cursor: 0,
            replayed: 0,
            finished_at: None,
        };
        state.jobs.insert(id, created.clone());
        Ok(created)
    }

    async fn has_pending_replay(
        &self,
        projection_kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        cursor: i64,
    ) -> Result<bool, StorageError> {
        let state = self.lock();
        Ok(shards.iter().any(|shard| {
            state.pending.get(shard).is_some_and(|p| {
                p.iter().any(|seq| {
                    let r = &state.rows[seq];
                    let m = &r.message;
                    if m.target_kind != projection_kind || m.tenant != tenant {
                        return false;
                    }
                    r.status == MessageStatus::ToCatchUp
                        || (m.kind == crate::message::MessageKind::Event
                            && !crate::catch_up::is_parked(m.deliver_after)
                            && state
                                .event_seq
                                .get(&m.signal_id)
                                .is_some_and(|e| *e <= cursor))
                })
            })
        }))
    }

    async fn catch_up(&self, id: i64) -> Result<Option<CatchUpJob>, StorageError> {
        Ok(self.lock().jobs.get(&id).cloned())
    }

    async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError> {
        Ok(self
            .lock()
            .jobs
            .values()
            .filter(|j| j.status.is_running())
            .cloned()
            .collect())
    }

    async fn update_catch_up(&self, job: &CatchUpJob) -> Result<(), StorageError> {
        let mut state = self.lock();
        match state.jobs.get_mut(&job.id) {
            Some(stored) => {
                *stored = job.clone();
                if job.status == CatchUpStatus::Completed {
                    state.settle_parked(job, None);
                }
                Ok(())
            }
            None => Err(StorageError::Corrupt(format!(
                "catch-up job {} does not exist",
                job.id
            ))),
        }
    }

    async fn purge_catch_ups(&self, before: DateTime<Utc>) -> Result<usize, StorageError> {
        let mut state = self.lock();
        let before_len = state.jobs.len();
        state
            .jobs
            .retain(|_, j| j.status.is_running() || j.finished_at.is_none_or(|t| t >= before));
        Ok(before_len - state.jobs.len())
    }
}

#[async_trait]
impl DeadLetterStore for MemoryStorage {
    async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<StoredDeadLetter>, StorageError> {
        let state = self.lock();
        Ok(state
            .select_dead_letters(filter)
            .into_iter()
            .map(|id| StoredDeadLetter {
                id,
                letter: state.dead_letters[&id].clone(),
            })
            .collect())
    }

    async fn count_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError> {
        let state = self.lock();
        Ok(state
            .dead_letters
            .iter()
            .filter(|(id, l)| filter.matches(**id, l))
            .count() as u64)
    }

    async fn requeue_dead_letters(
        &self,
        requeue: Vec<Requeue>,
        _now: DateTime<Utc>,
    ) -> Result<RequeueReport, StorageError> {
        let mut state = self.lock();
        let mut report = RequeueReport::default();
        for Requeue { id, shard } in requeue {
            let Some(letter) = state.dead_letters.get(&id) else {
                report.missing += 1;
                continue;
            };
            if letter.original.message.target_id.is_empty() {
                report.skipped += 1;
                continue;
            }
            let mut message = letter.original.message.clone();
            message.deliver_after = None;
            message.expires_at = None;
            state.dead_letters.remove(&id);
            let mut written = WriteReport::default();
            state.insert(InboxWrite { shard, message }, &mut written);
            report.requeued += written.written;
            report.already_in_inbox += written.duplicates;
            report.shards.extend(written.shards);
        }
        report.shards.sort_unstable();
        report.shards.dedup();
        Ok(report)
    }

    async fn purge_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError> {
        let mut state = self.lock();
        let ids = state.select_dead_letters(filter);
        for id in &ids {
            state.dead_letters.remove(id);
        }
        Ok(ids.len() as u64)
    }

    async fn blocked_targets(&self, limit: usize) -> Result<Vec<BlockedTarget>, StorageError> {
        let state = self.lock();
        let mut seqs: Vec<i64> = state.blocked.values().flatten().copied().collect();
        seqs.sort_unstable();
        Ok(seqs
            .into_iter()
            .take(limit)
            .map(|seq| {
                let row = &state.rows[&seq];
                BlockedTarget {
                    target: target_of(row),
                    shard: row.shard,
                    seq,
                    signal_id: row.message.signal_id.clone(),
                    attempts: row.attempts,
                    last_error: row.last_error.clone(),
                    first_failed_at: row.first_failed_at,
                    blocked_at: row.message.deliver_after,
                }
            })
            .collect())
    }

    async fn unblock_target(
        &self,
        target: &EntityKey,
        action: Unblock,
        now: DateTime<Utc>,
    ) -> Result<UnblockReport, StorageError> {
        let mut state = self.lock();
        let seqs: Vec<i64> = state
            .blocked
            .values()
            .flatten()
            .copied()
            .filter(|seq| target_of(&state.rows[seq]) == *target)
            .collect();
        let mut report = UnblockReport::default();
        for seq in seqs {
            let Some(row) = state.rows.get(&seq).cloned() else {
                continue;
            };
            report.unblocked += 1;
            report.shards.push(row.shard);
            match action {
                Unblock::Requeue => {
                    if let Some(b) = state.blocked.get_mut(&row.shard) {
                        b.remove(&seq);
                    }
                    if let Some(r) = state.rows.get_mut(&seq) {
                        r.status = MessageStatus::ToDeliver;
                        r.attempts = 0;
                        r.last_error = None;
                        r.first_failed_at = None;
                        r.message.deliver_after = None;
                        r.message.expires_at = None;
                    }
                    state.pend(row.shard, seq, None);
                }
                Unblock::Drop => {
                    state.remove(seq);
                }
                Unblock::DeadLetter => {
                    state.remove(seq);
                    state.add_dead_letter(DeadLetter {
                        reason: unblocked_reason(row.last_error.as_deref()),
                        attempts: row.attempts,
                        first_attempt_at: row.first_failed_at,
                        last_attempt_at: now,
                        original: row,
                    });
                }
            }
        }
        let released = state.release_parked(target);
        report.released = released.len();
        report.shards.extend(released);
        report.shards.sort_unstable();
        report.shards.dedup();
        Ok(report)
    }
}

impl Storage for MemoryStorage {
    fn describe(&self) -> String {
        "memory".into()
    }
}

//! The in-memory [`InboxStore`]: writes with deduplication, due pages, fenced stage commits
//! (the commit's steps on the state are `stage_commit`'s).

use super::{target_of, MemoryStorage};
use crate::catch_up::is_parked;
use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::model::message::{DedupKey, InboxMessage, MessageStatus};
use crate::model::outcome::OutcomeLookup;
use crate::storage::{
    CommitReport, InboxCounts, InboxStore, Page, ShardDepth, StageCommit, WriteBatch, WriteReport,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

#[async_trait]
impl InboxStore for MemoryStorage {
    async fn write(&self, batch: WriteBatch) -> Result<WriteReport, StorageError> {
        Ok(self.lock().write(batch))
    }

    async fn write_all(&self, batches: Vec<WriteBatch>) -> Result<Vec<WriteReport>, StorageError> {
        let mut state = self.lock();
        Ok(batches.into_iter().map(|b| state.write(b)).collect())
    }

    async fn write_all_addressed(
        &self,
        batches: Vec<WriteBatch>,
        shard_count: u32,
    ) -> Result<Vec<WriteReport>, StorageError> {
        let mut state = self.lock();
        state.check_shard_count(shard_count)?;
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
                // An expired retry is waited for until it is expired (the rows held behind it
                // must not be overtaken); a parked one waits for its catch-up.
                if is_parked(row.message.deliver_after) {
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
        if let Some(work) = commit.in_transaction.first() {
            // No SQL to run it on; the builder refuses such a kind first.
            return Err(StorageError::Query {
                database: "memory".into(),
                reason: format!(
                    "kind `{}` writes inside the stage's transaction (a SQL projection), which the in-memory backend cannot run; use SQLite or PostgreSQL",
                    work.target.kind
                ),
                source: None,
            });
        }
        let mut state = self.lock();
        if !state.holds(&commit.lease) {
            return Err(state.lease_lost(&commit.lease));
        }
        let shard = commit.lease.shard;
        let now = commit.now;
        let outcome_purge = commit.outcome_purge_limit();
        state.check_stage_rows(shard, &commit.updates)?;
        state.apply_row_changes(shard, now, commit.updates);
        for release in &commit.release_holds {
            state.release_holds(shard, &release.target, release.until);
        }
        state.write_states(now, commit.states);
        for letter in commit.dead_letters {
            state.add_dead_letter(letter);
        }
        state.commit_catch_ups(shard, commit.catch_ups);
        let catch_ups_purged = commit
            .purge_catch_ups_before
            .map_or(0, |before| state.purge_jobs(before));
        let written = state.write(commit.writes);
        state.outbox.append(commit.outbox);
        state.outcomes.purge(shard, now, outcome_purge);
        state.outcomes.record(commit.outcomes);
        let purged = state.purge_delivered(shard, now, commit.purge_delivered);
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
            catch_ups_purged,
            failed_writes: Default::default(),
        })
    }

    async fn outcome(
        &self,
        key: &DedupKey,
        now: DateTime<Utc>,
    ) -> Result<OutcomeLookup, StorageError> {
        let state = self.lock();
        let row = state
            .keys
            .get(key)
            .and_then(|seq| state.rows.get(seq))
            .map(|r| r.status);
        Ok(state
            .outcomes
            .lookup(key, row, now, |id| state.event_seq.contains_key(id)))
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

    async fn depths(&self, now: DateTime<Utc>) -> Result<Vec<ShardDepth>, StorageError> {
        let state = self.lock();
        let mut shards = std::collections::BTreeMap::new();
        for row in state.rows.values() {
            shards
                .entry(row.shard)
                .or_insert_with(|| ShardDepth::empty(row.shard))
                .count(
                    row.status,
                    row.attempts,
                    row.message.received_at,
                    row.message.deliver_after,
                    now,
                );
        }
        Ok(shards.into_values().collect())
    }

    async fn kind_depths(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::storage::KindDepth>, StorageError> {
        let state = self.lock();
        let mut kinds: std::collections::BTreeMap<&str, ShardDepth> =
            std::collections::BTreeMap::new();
        for row in state.rows.values() {
            if row.status == MessageStatus::Delivered {
                continue;
            }
            kinds
                .entry(&row.message.target_kind)
                .or_insert_with(|| ShardDepth::empty(row.shard))
                .count(
                    row.status,
                    row.attempts,
                    row.message.received_at,
                    row.message.deliver_after,
                    now,
                );
        }
        Ok(kinds
            .into_iter()
            .map(|(kind, d)| crate::storage::KindDepth::of(kind, &d))
            .collect())
    }

    async fn purge_due_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError> {
        let state = self.lock();
        let mut shards: Vec<ShardIndex> = state
            .delivered
            .iter()
            .filter(|(_, rows)| {
                rows.first()
                    .is_some_and(|(keep_until, _)| *keep_until <= now)
            })
            .map(|(shard, _)| *shard)
            .chain(state.outcomes.purge_due_shards(now))
            .collect();
        shards.sort_unstable();
        shards.dedup();
        Ok(shards)
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

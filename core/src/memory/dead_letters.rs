//! The in-memory [`DeadLetterStore`]: dead letters and blocked targets.

use super::{target_of, MemoryStorage};
use crate::model::error::StorageError;
use crate::model::message::{InboxWrite, MessageStatus};
use crate::storage::{unblocked_outcome, unblocked_reason};
use crate::storage::{
    BlockedTarget, DeadLetter, DeadLetterFilter, DeadLetterStore, EntityKey, Requeue,
    RequeueReport, StoredDeadLetter, Unblock, UnblockReport, WriteReport,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

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
        shard_count: u32,
        _now: DateTime<Utc>,
    ) -> Result<RequeueReport, StorageError> {
        let mut state = self.lock();
        state.check_shard_count(shard_count)?;
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
            if let Some(outcome) = unblocked_outcome(action, &row) {
                state.outcomes.decide_again(&row.dedup_key(), outcome, now);
            }
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
                        r.errors = Default::default();
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

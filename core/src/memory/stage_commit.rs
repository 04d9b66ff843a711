//! A stage's fenced commit on the in-memory state, step by step, in the order
//! `InboxStore::commit_stage` (inbox.rs) runs them under the one lock, after checking the
//! lease:
//!
//! ```text
//!  check_stage_rows   every updated row is in the stage's shard (else Corrupt, nothing changed)
//!  apply_row_changes  remove / delivered / retry / block / hold; rows behind a block parked last
//!  (release_holds, dead letters: State's own)
//!  write_states       entity states written (version + 1) or removed
//!  commit_catch_ups   job rows stored (their parked rows settled if finished)
//!  (purge_jobs, write, outcomes)
//!  purge_delivered    delivered rows past their window, up to the stage's limit
//! ```
//!
//! A failed check returns before any change, so a refused commit leaves the state as it was,
//! as a rolled-back transaction does on the durable backends.

use super::State;
use crate::model::attempt_errors::ErrorHistory;
use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::model::message::MessageStatus;
use crate::storage::{CatchUpJob, EntityState, EntityStateWrite, RowChange, RowUpdate};
use chrono::{DateTime, Utc};

impl State {
    /// An error if a stage of `shard` updates a row that is not in that shard.
    pub(super) fn check_stage_rows(
        &self,
        shard: ShardIndex,
        updates: &[RowUpdate],
    ) -> Result<(), StorageError> {
        for u in updates {
            match self.rows.get(&u.seq) {
                Some(row) if row.shard == shard => {}
                _ => {
                    return Err(StorageError::Corrupt(format!(
                        "stage of shard {shard} updates row {} which is not in that shard",
                        u.seq
                    )))
                }
            }
        }
        Ok(())
    }

    /// Applies each row's change; the rows behind a block are parked after the others.
    pub(super) fn apply_row_changes(
        &mut self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        updates: Vec<RowUpdate>,
    ) {
        // Parked after the other changes: a block committed with them counts.
        let mut behind_block = Vec::new();
        let mut paused = Vec::new();
        for u in updates {
            match u.change {
                RowChange::BehindBlock => behind_block.push(u.seq),
                RowChange::Paused => paused.push(u.seq),
                RowChange::Remove => {
                    self.remove(u.seq);
                }
                RowChange::Delivered { keep_until } => {
                    self.mark_delivered(shard, now, u.seq, keep_until);
                }
                RowChange::RetryAt {
                    at,
                    attempts,
                    error,
                    errors,
                } => {
                    let Some(row) = self.rows.get_mut(&u.seq) else {
                        continue;
                    };
                    row.message.deliver_after = Some(at);
                    row.attempts = attempts;
                    row.last_error = Some(error);
                    row.errors = errors;
                    row.first_failed_at.get_or_insert(now);
                    self.retrying.entry(shard).or_default().insert(u.seq);
                }
                RowChange::Block {
                    attempts,
                    error,
                    errors,
                } => {
                    self.mark_blocked(shard, now, u.seq, attempts, error, errors);
                }
                RowChange::Hold { until } => {
                    if let Some(row) = self.rows.get_mut(&u.seq) {
                        row.message.deliver_after = Some(until);
                    }
                }
            }
        }
        for seq in behind_block {
            self.park_behind_block(seq);
        }
        for seq in paused {
            self.park_paused(seq);
        }
    }

    /// Row `seq` delivered, kept until `keep_until` (a command's outcome, or an event copy's
    /// record for read-your-writes, with it).
    fn mark_delivered(
        &mut self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        seq: i64,
        keep_until: DateTime<Utc>,
    ) {
        let Some(row) = self.rows.get_mut(&seq) else {
            return;
        };
        row.status = MessageStatus::Delivered;
        row.keep_until = Some(keep_until);
        let row = row.clone();
        self.unpend(&row);
        self.outcomes.handled(
            row.message.dedup_key(),
            row.message.kind,
            shard,
            now,
            keep_until,
        );
        self.delivered
            .entry(shard)
            .or_default()
            .insert((keep_until, seq));
    }

    /// Row `seq` blocked after `attempts`, until an operator acts.
    fn mark_blocked(
        &mut self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        seq: i64,
        attempts: u32,
        error: String,
        errors: ErrorHistory,
    ) {
        let Some(row) = self.rows.get_mut(&seq) else {
            return;
        };
        row.status = MessageStatus::Blocked;
        row.message.deliver_after = Some(now);
        row.attempts = attempts;
        row.last_error = Some(error);
        row.errors = errors;
        row.first_failed_at.get_or_insert(now);
        let row = row.clone();
        self.unpend(&row);
        self.blocked.entry(shard).or_default().insert(seq);
    }

    /// Writes (version + 1) or removes the stage's entity states.
    pub(super) fn write_states(&mut self, now: DateTime<Utc>, states: Vec<EntityStateWrite>) {
        for s in states {
            match s.state {
                Some(bytes) => {
                    let version = self.states.get(&s.key).map_or(0, |e| e.version) + 1;
                    self.states.insert(
                        s.key.clone(),
                        EntityState {
                            key: s.key,
                            version,
                            state: bytes,
                            state_version: s.state_version,
                            updated_at: now,
                        },
                    );
                }
                None => {
                    self.states.remove(&s.key);
                }
            }
        }
    }

    /// Stores the stage's catch-up job rows, settling the parked rows of a finished one.
    pub(super) fn commit_catch_ups(&mut self, shard: ShardIndex, jobs: Vec<CatchUpJob>) {
        for mut job in jobs {
            if job.status.is_finished() {
                self.finish_job(&job, Some(shard));
            }
            // The cancel request is the operator's to write, never a stage's.
            job.cancel_requested_at = self.jobs.get(&job.id).and_then(|j| j.cancel_requested_at);
            self.jobs.insert(job.id, job);
        }
    }

    /// Removes up to `limit` delivered rows of `shard` past their window; returns how many.
    pub(super) fn purge_delivered(
        &mut self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> usize {
        let mut purged = 0;
        if limit > 0 {
            let expired: Vec<i64> = self
                .delivered
                .get(&shard)
                .map(|d| {
                    d.iter()
                        .take_while(|(k, _)| *k <= now)
                        .take(limit)
                        .map(|(_, seq)| *seq)
                        .collect()
                })
                .unwrap_or_default();
            for seq in expired {
                self.remove(seq);
                purged += 1;
            }
        }
        purged
    }
}

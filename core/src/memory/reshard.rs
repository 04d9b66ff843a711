//! The in-memory switch of a re-sharding (`WorkRegistry::reshard`): every row, record and
//! per-shard index moves to its target's new shard under the one lock, as the SQL backends do
//! in one transaction.

use super::State;
use crate::model::error::StorageError;
use crate::model::ids::{LeaseEpoch, ShardIndex};
use crate::storage::{ReshardMoves, ReshardSwitch, ShardSession};
use std::collections::BTreeSet;

impl State {
    /// Refuses rows addressed by `shard_count` if another count is recorded (see
    /// `InboxStore::write_all_addressed`).
    pub(super) fn check_shard_count(&self, shard_count: u32) -> Result<(), StorageError> {
        match self.shard_count {
            Some(recorded) if recorded != shard_count => Err(StorageError::ShardCountChanged {
                expected: shard_count,
                recorded,
            }),
            _ => Ok(()),
        }
    }

    /// Checks the recorded count and the switch's leases, then moves everything to `to`
    /// shards (see `WorkRegistry::reshard`). Writes nothing if a check fails.
    pub(super) fn reshard(&mut self, switch: &ReshardSwitch) -> Result<ReshardMoves, StorageError> {
        let recorded = self.shard_count.unwrap_or(switch.from);
        if recorded != switch.from {
            return Err(StorageError::ShardCountChanged {
                expected: switch.from,
                recorded,
            });
        }
        let held: BTreeSet<ShardIndex> = switch.leases.iter().map(|l| l.shard).collect();
        if let Some(missing) = (0..switch.from).map(ShardIndex).find(|s| !held.contains(s)) {
            return Err(StorageError::ReshardRefused {
                reason: format!("the switch holds no lease of shard {missing}"),
            });
        }
        if let Some(lost) = switch.leases.iter().find(|l| !self.holds(l)) {
            return Err(self.lease_lost(lost));
        }
        let route = &switch.route;
        let mut moves = ReshardMoves::default();
        let targets: Vec<(i64, ShardIndex, ShardIndex)> = self
            .rows
            .iter()
            .map(|(seq, row)| {
                let m = &row.message;
                (*seq, row.shard, route(&m.target_kind, &m.target_id))
            })
            .collect();
        moves.inbox_rows = targets.len() as u64;
        for (seq, from, to) in targets {
            if from != to {
                self.move_row(seq, from, to);
                moves.inbox_moved += 1;
            }
        }
        for letter in self.dead_letters.values_mut() {
            let m = &letter.original.message;
            let to = route(&m.target_kind, &m.target_id);
            if letter.original.shard != to {
                letter.original.shard = to;
                moves.records_moved += 1;
            }
        }
        moves.records_moved += self.outcomes.reshard(|kind, id| route(kind, id));
        for job in self.jobs.values_mut().filter(|j| j.status.is_running()) {
            job.spec.affected_shards = crate::catch_up::affected_shards(
                &job.spec.targets,
                &job.spec.projection_kind,
                switch.to,
                |kind, id| route(kind, id),
            );
            moves.catch_ups += 1;
        }
        // Every row of the new layout, kept or new, starts above every epoch handed out so
        // far: no lease of the old layout can match one, and the highest epoch of the rows
        // kept is still the highest ever handed out, which a new row starts from (see
        // `pick_up`). Were the kept rows left as they were, the epochs of the rows dropped
        // below were forgotten, and a later re-sharding that made those shards again would
        // hand them out a second time (issue 37: memory seeds 626, 1814, 3609).
        let top = self.sessions.values().map(|s| s.epoch.0).max().unwrap_or(0);
        // Rows at or above `from` belong to no layout (a stale pick-up's): they go too.
        self.sessions
            .retain(|shard, _| shard.0 < switch.to.min(switch.from));
        for s in self.sessions.values_mut() {
            // Held by the switch (checked above): freed.
            s.epoch = LeaseEpoch(top + 1);
            s.lease_until = None;
        }
        for shard in (switch.from..switch.to).map(ShardIndex) {
            self.sessions.insert(
                shard,
                ShardSession {
                    shard,
                    node_id: None,
                    worker_id: None,
                    epoch: LeaseEpoch(top + 1),
                    picked_at: None,
                    lease_until: None,
                },
            );
        }
        self.shard_count = Some(switch.to);
        self.resharding = None;
        Ok(moves)
    }

    /// Moves row `seq` from shard `from` to shard `to`, with its place in every index.
    fn move_row(&mut self, seq: i64, from: ShardIndex, to: ShardIndex) {
        let Some(row) = self.rows.get_mut(&seq) else {
            return;
        };
        row.shard = to;
        let (deliver_after, keep_until) = (row.message.deliver_after, row.keep_until);
        if self.pending.get_mut(&from).is_some_and(|p| p.remove(&seq)) {
            self.pending.entry(to).or_default().insert(seq);
            if let Some(due) = self.due.get_mut(&from) {
                due.remove(seq);
            }
            self.due.entry(to).or_default().add(seq, deliver_after);
        }
        if self.retrying.get_mut(&from).is_some_and(|r| r.remove(&seq)) {
            self.retrying.entry(to).or_default().insert(seq);
        }
        if self.blocked.get_mut(&from).is_some_and(|b| b.remove(&seq)) {
            self.blocked.entry(to).or_default().insert(seq);
        }
        if let Some(keep) = keep_until {
            if self
                .delivered
                .get_mut(&from)
                .is_some_and(|d| d.remove(&(keep, seq)))
            {
                self.delivered.entry(to).or_default().insert((keep, seq));
            }
        }
    }
}

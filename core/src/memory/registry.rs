//! The in-memory [`WorkRegistry`]: the lock table of shard leases.

use super::MemoryStorage;
use crate::model::error::StorageError;
use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, WorkerId};
use crate::model::kind_role::RegisteredKind;
use crate::model::strategy::StrategyRecord;
use crate::storage::{
    Lease, Member, ReshardAnnouncement, ReshardMoves, ReshardSwitch, ShardLayout, ShardSession,
    WorkRegistry,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

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
        // A row is made only for a shard of the recorded layout (see the SQL pick-up).
        if state.shard_count.is_some_and(|count| shard.0 >= count)
            && !state.sessions.contains_key(&shard)
        {
            return Ok(None);
        }
        // A new row starts at the highest epoch of any shard, so that a shard whose row a
        // re-sharding dropped never hands out an epoch it handed out before (the switch
        // keeps that the highest ever handed out; see `State::reshard`).
        let top = state
            .sessions
            .values()
            .map(|s| s.epoch.0)
            .max()
            .unwrap_or(0);
        let session = state.sessions.entry(shard).or_insert(ShardSession {
            shard,
            node_id: None,
            worker_id: None,
            epoch: LeaseEpoch(top),
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

    async fn claim_shard_count(&self, shard_count: u32) -> Result<u32, StorageError> {
        Ok(*self.lock().shard_count.get_or_insert(shard_count))
    }

    async fn record_shard_strategy(
        &self,
        record: &StrategyRecord,
    ) -> Result<Option<StrategyRecord>, StorageError> {
        Ok(self.lock().shard_strategy.replace(record.clone()))
    }

    async fn recorded_shard_strategy(&self) -> Result<Option<StrategyRecord>, StorageError> {
        Ok(self.lock().shard_strategy.clone())
    }

    async fn claim_database_place(
        &self,
        place: crate::storage::DatabasePlace,
    ) -> Result<crate::storage::DatabasePlace, StorageError> {
        Ok(*self.lock().database_place.get_or_insert(place))
    }

    async fn recorded_database_place(
        &self,
    ) -> Result<Option<crate::storage::DatabasePlace>, StorageError> {
        Ok(self.lock().database_place)
    }

    async fn layout(&self) -> Result<ShardLayout, StorageError> {
        let state = self.lock();
        Ok(ShardLayout {
            shard_count: state.shard_count,
            resharding: state.resharding.clone(),
        })
    }

    async fn announce_reshard(
        &self,
        announcement: &ReshardAnnouncement,
        now: DateTime<Utc>,
    ) -> Result<ReshardAnnouncement, StorageError> {
        let mut state = self.lock();
        match &state.resharding {
            Some(other) if other.by != announcement.by && other.until > now => Ok(other.clone()),
            _ => {
                state.resharding = Some(announcement.clone());
                Ok(announcement.clone())
            }
        }
    }

    async fn withdraw_reshard(&self, by: &NodeId) -> Result<(), StorageError> {
        let mut state = self.lock();
        if state.resharding.as_ref().is_some_and(|a| &a.by == by) {
            state.resharding = None;
        }
        Ok(())
    }

    async fn reshard(&self, switch: ReshardSwitch) -> Result<ReshardMoves, StorageError> {
        self.lock().reshard(&switch)
    }

    async fn beat(
        &self,
        node_id: &NodeId,
        now: DateTime<Utc>,
        alive_until: DateTime<Utc>,
        kinds: &[RegisteredKind],
    ) -> Result<(), StorageError> {
        let mut state = self.lock();
        state
            .members
            .retain(|_, m| m.alive_until > now - chrono::Duration::days(1));
        let member = state.members.entry(node_id.clone()).or_insert(Member {
            node_id: node_id.clone(),
            started_at: now,
            beat_at: now,
            alive_until,
            kinds: Vec::new(),
        });
        if member.alive_until <= now {
            member.started_at = now;
        }
        member.beat_at = now;
        member.alive_until = alive_until;
        member.kinds = kinds.to_vec();
        Ok(())
    }

    async fn leave(&self, node_id: &NodeId) -> Result<(), StorageError> {
        self.lock().members.remove(node_id);
        Ok(())
    }

    async fn recorded_shard_count(&self) -> Result<Option<u32>, StorageError> {
        Ok(self.lock().shard_count)
    }

    async fn members(&self, now: DateTime<Utc>) -> Result<Vec<Member>, StorageError> {
        Ok(self
            .lock()
            .members
            .values()
            .filter(|m| m.alive_until > now)
            .cloned()
            .collect())
    }
}

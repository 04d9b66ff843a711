//! The lock table over several databases: each database keeps the leases of its own shards;
//! the membership, the strategy and re-sharding announcements are the home database's.
//!
//! ```text
//!  pick_up / renew / release(global shard) ─► its database, local shard
//!  claim_shard_count(S) ─► each database claims its share ⌈(S − d) ÷ N⌉; the global count
//!                          is their sum (refused if they disagree)
//!  reshard(S → T)       ─► each database switches its share, one after the other
//! ```
//!
//! A re-sharding is one transaction per database. One that fails half way leaves databases
//! with counts that disagree: [`WorkRegistry::recorded_shard_count`] then says so (naming the
//! counts), and running the re-sharding again finishes it.

use super::Databases;
use crate::model::error::StorageError;
use crate::model::ids::{NodeId, ShardIndex, WorkerId};
use crate::model::kind_role::RegisteredKind;
use crate::model::strategy::StrategyRecord;
use crate::storage::{
    Lease, Member, ReshardAnnouncement, ReshardMoves, ReshardSwitch, ShardLayout, ShardSession,
    WorkRegistry,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;

impl Databases {
    fn disagreeing(&self, counts: &[u32]) -> StorageError {
        StorageError::Corrupt(format!(
            "the {} databases record shard counts {counts:?}, which no one count splits into: a re-sharding stopped half way; run it again to finish it",
            self.dbs.len()
        ))
    }
}

#[async_trait]
impl WorkRegistry for Databases {
    async fn pick_up(
        &self,
        shard: ShardIndex,
        node_id: &NodeId,
        worker_id: WorkerId,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<Lease>, StorageError> {
        let d = self.map.database_of(shard);
        let lease = self
            .db(d)
            .pick_up(self.map.local(shard), node_id, worker_id, now, lease_until)
            .await?;
        Ok(lease.map(|l| self.map.lease_to_global(d, l)))
    }

    async fn renew(
        &self,
        lease: &Lease,
        lease_until: DateTime<Utc>,
    ) -> Result<Lease, StorageError> {
        let (d, local) = self.map.lease_to_local(lease);
        match self.db(d).renew(&local, lease_until).await {
            Ok(renewed) => Ok(self.map.lease_to_global(d, renewed)),
            Err(e) => Err(self.global_error(d, e)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StorageError> {
        let (d, local) = self.map.lease_to_local(lease);
        self.db(d).release(&local).await
    }

    async fn sessions(&self) -> Result<Vec<ShardSession>, StorageError> {
        let each = self.each(|_, db| db.sessions()).await?;
        let mut all: Vec<ShardSession> = each
            .into_iter()
            .enumerate()
            .flat_map(|(d, s)| s.into_iter().map(move |x| (d as u32, x)))
            .map(|(d, x)| self.map.session_to_global(d, x))
            .collect();
        all.sort_by_key(|s| s.shard);
        Ok(all)
    }

    async fn claim_shard_count(&self, shard_count: u32) -> Result<u32, StorageError> {
        self.map.check_count(shard_count)?;
        let map = self.map;
        let counts = self
            .each(|d, db| db.claim_shard_count(map.shard_count_of(d, shard_count)))
            .await?;
        map.global_count(&counts)
            .ok_or_else(|| self.disagreeing(&counts))
    }

    async fn recorded_shard_count(&self) -> Result<Option<u32>, StorageError> {
        let each = self.each(|_, db| db.recorded_shard_count()).await?;
        let Some(counts) = each.into_iter().collect::<Option<Vec<u32>>>() else {
            return Ok(None);
        };
        self.map
            .global_count(&counts)
            .map(Some)
            .ok_or_else(|| self.disagreeing(&counts))
    }

    async fn record_shard_strategy(
        &self,
        record: &StrategyRecord,
    ) -> Result<Option<StrategyRecord>, StorageError> {
        let each = self.each(|_, db| db.record_shard_strategy(record)).await?;
        Ok(each.into_iter().next().flatten())
    }

    async fn recorded_shard_strategy(&self) -> Result<Option<StrategyRecord>, StorageError> {
        self.home().recorded_shard_strategy().await
    }

    async fn layout(&self) -> Result<ShardLayout, StorageError> {
        let home = self.home().layout().await?;
        Ok(ShardLayout {
            shard_count: self.recorded_shard_count().await?,
            resharding: home.resharding,
        })
    }

    async fn announce_reshard(
        &self,
        announcement: &ReshardAnnouncement,
        now: DateTime<Utc>,
    ) -> Result<ReshardAnnouncement, StorageError> {
        self.map.check_count(announcement.to)?;
        self.home().announce_reshard(announcement, now).await
    }

    async fn withdraw_reshard(&self, by: &NodeId) -> Result<(), StorageError> {
        self.home().withdraw_reshard(by).await
    }

    async fn reshard(&self, switch: ReshardSwitch) -> Result<ReshardMoves, StorageError> {
        self.map.check_count(switch.to)?;
        let map = self.map;
        // One transaction per database: check every database first, so that a switch that
        // one of them would refuse changes none (a lease lost between the check and the
        // switch still stops it half way; running it again finishes it).
        let counts = self.each(|_, db| db.recorded_shard_count()).await?;
        let switched = |d: u32| counts[d as usize] == Some(map.shard_count_of(d, switch.to));
        let ready = (0..map.count())
            .all(|d| switched(d) || counts[d as usize] == Some(map.shard_count_of(d, switch.from)));
        if !ready {
            return Err(StorageError::ShardCountChanged {
                expected: switch.from,
                recorded: counts.iter().map(|c| c.unwrap_or(0)).sum(),
            });
        }
        for lease in &switch.leases {
            let (d, local) = map.lease_to_local(lease);
            if switched(d) && map.shard_count_of(d, switch.from) != map.shard_count_of(d, switch.to)
            {
                continue;
            }
            self.db(d)
                .renew(&local, local.lease_until)
                .await
                .map_err(|e| self.global_error(d, e))?;
        }
        let mut moves = ReshardMoves::default();
        for d in 0..map.count() {
            let from = map.shard_count_of(d, switch.from);
            let to = map.shard_count_of(d, switch.to);
            let leases: Vec<Lease> = switch
                .leases
                .iter()
                .filter(|l| map.database_of(l.shard) == d)
                .map(|l| map.lease_to_local(l).1)
                .collect();
            let route = switch.route.clone();
            let local = ReshardSwitch {
                from,
                to,
                leases,
                route: Arc::new(move |kind: &str, id: &str| map.local(route(kind, id))),
            };
            if from == to {
                // This database keeps its share: nothing moves, its leases are handed back.
                for lease in &local.leases {
                    self.db(d).release(lease).await?;
                }
                continue;
            }
            if switched(d) {
                continue; // switched by an earlier run of this re-sharding
            }
            let m = match self.db(d).reshard(local).await {
                Ok(m) => m,
                Err(e) => return Err(self.refusal(self.global_error(d, e), switch.from).await),
            };
            moves.inbox_rows += m.inbox_rows;
            moves.inbox_moved += m.inbox_moved;
            moves.records_moved += m.records_moved;
            moves.catch_ups += m.catch_ups;
        }
        Ok(moves)
    }

    async fn beat(
        &self,
        node_id: &NodeId,
        now: DateTime<Utc>,
        alive_until: DateTime<Utc>,
        kinds: &[RegisteredKind],
    ) -> Result<(), StorageError> {
        self.home().beat(node_id, now, alive_until, kinds).await
    }

    async fn leave(&self, node_id: &NodeId) -> Result<(), StorageError> {
        self.home().leave(node_id).await
    }

    async fn members(&self, now: DateTime<Utc>) -> Result<Vec<Member>, StorageError> {
        self.home().members(now).await
    }

    async fn clock_now(&self) -> Result<Option<DateTime<Utc>>, StorageError> {
        self.home().clock_now().await
    }
}

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
    DatabasePlace, Lease, Member, ReshardAnnouncement, ReshardMoves, ReshardSwitch, ShardLayout,
    ShardSession, WorkRegistry,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;

impl Databases {
    /// Records each database's place in the list, or checks the one recorded: a node that
    /// lists the databases in another order, or more or fewer of them, would place targets in
    /// other databases than the nodes before it did. Refused by name.
    async fn claim_places(&self) -> Result<(), StorageError> {
        let of = self.map.count();
        for (d, db) in self.dbs.iter().enumerate() {
            let ours = DatabasePlace {
                index: d as u32,
                of,
            };
            let recorded = db.claim_database_place(ours).await?;
            if recorded != ours {
                return Err(StorageError::Unsupported {
                    what: format!(
                        "{} as database {} of {of}",
                        db.describe(),
                        d
                    ),
                    reason: format!(
                        "it records itself as database {} of {}: list the databases in the same order, home first, on every node and tool",
                        recorded.index, recorded.of
                    ),
                });
            }
        }
        Ok(())
    }

    /// The global count once every database records its share (another node's claim is
    /// under way), waiting up to ten seconds for it to finish.
    async fn awaited_count(&self) -> Result<u32, StorageError> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let each = self.each(|_, db| db.recorded_shard_count()).await?;
            if let Some(counts) = each.iter().copied().collect::<Option<Vec<u32>>>() {
                return self
                    .map
                    .global_count(&counts)
                    .ok_or_else(|| self.disagreeing(&counts));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StorageError::Corrupt(format!(
                    "the shard count is recorded in some of the {} databases only ({each:?}): the node that first claimed it stopped part way; start a node with the shard count whose shares these are",
                    self.dbs.len()
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

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
        self.claim_places().await?;
        // In database order, the same for every claimant: the first to reach a database
        // records its share there. A claimant that finds another share recorded stops and
        // reads what the one ahead of it records, so the shares all come from one count.
        let mut counts = Vec::with_capacity(self.dbs.len());
        for (d, db) in self.dbs.iter().enumerate() {
            let share = self.map.shard_count_of(d as u32, shard_count);
            let recorded = db.claim_shard_count(share).await?;
            if recorded != share {
                return self.awaited_count().await;
            }
            counts.push(recorded);
        }
        self.map
            .global_count(&counts)
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

    async fn claim_database_place(
        &self,
        _place: DatabasePlace,
    ) -> Result<DatabasePlace, StorageError> {
        Err(StorageError::Unsupported {
            what: "a place for a storage over several databases".into(),
            reason: "each of its databases records its own place; the set has none".into(),
        })
    }

    async fn recorded_database_place(&self) -> Result<Option<DatabasePlace>, StorageError> {
        // The set is whole: nothing it does is limited to one of its databases.
        Ok(None)
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

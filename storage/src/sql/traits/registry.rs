//! `WorkRegistry` for [`SqlStorage`]: leases, members, the clock, the layout and re-sharding,
//! the recorded count and strategy.

use super::{SqlConnection, SqlStorage, StorageBackend};

#[async_trait::async_trait]
impl<C: SqlConnection, B: StorageBackend<Conn = C>> shardbox_core::WorkRegistry
    for SqlStorage<C, B>
{
    async fn pick_up(
        &self,
        shard: shardbox_core::ShardIndex,
        node_id: &shardbox_core::NodeId,
        worker_id: shardbox_core::WorkerId,
        now: chrono::DateTime<chrono::Utc>,
        lease_until: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<shardbox_core::Lease>, shardbox_core::StorageError> {
        let node_id = node_id.clone();
        self.db
            .run(move |conn| {
                crate::sql::registry::pick_up(conn, shard, node_id, worker_id, now, lease_until)
            })
            .await
    }

    async fn renew(
        &self,
        lease: &shardbox_core::Lease,
        lease_until: chrono::DateTime<chrono::Utc>,
    ) -> Result<shardbox_core::Lease, shardbox_core::StorageError> {
        let lease = lease.clone();
        self.db
            .run(move |conn| crate::sql::registry::renew(conn, lease, lease_until))
            .await
    }

    async fn release(
        &self,
        lease: &shardbox_core::Lease,
    ) -> Result<(), shardbox_core::StorageError> {
        let lease = lease.clone();
        self.db
            .run(move |conn| crate::sql::registry::release(conn, lease))
            .await
    }

    async fn sessions(
        &self,
    ) -> Result<Vec<shardbox_core::storage::ShardSession>, shardbox_core::StorageError> {
        self.db.run(crate::sql::registry::sessions).await
    }

    async fn beat(
        &self,
        node_id: &shardbox_core::NodeId,
        now: chrono::DateTime<chrono::Utc>,
        alive_until: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), shardbox_core::StorageError> {
        let node_id = node_id.clone();
        self.db
            .run(move |conn| crate::sql::registry::beat(conn, node_id, now, alive_until))
            .await
    }

    async fn leave(
        &self,
        node_id: &shardbox_core::NodeId,
    ) -> Result<(), shardbox_core::StorageError> {
        let node_id = node_id.clone();
        self.db
            .run(move |conn| crate::sql::registry::leave(conn, node_id))
            .await
    }

    async fn clock_now(
        &self,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, shardbox_core::StorageError> {
        self.db.run(crate::sql::registry::clock_now).await
    }

    async fn members(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<shardbox_core::storage::Member>, shardbox_core::StorageError> {
        self.db
            .run(move |conn| crate::sql::registry::members(conn, now))
            .await
    }

    async fn layout(
        &self,
    ) -> Result<shardbox_core::storage::ShardLayout, shardbox_core::StorageError> {
        self.db.run(crate::sql::reshard::layout).await
    }

    async fn announce_reshard(
        &self,
        announcement: &shardbox_core::storage::ReshardAnnouncement,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<shardbox_core::storage::ReshardAnnouncement, shardbox_core::StorageError> {
        let announcement = announcement.clone();
        self.db
            .run(move |conn| crate::sql::reshard::announce_reshard(conn, announcement, now))
            .await
    }

    async fn withdraw_reshard(
        &self,
        by: &shardbox_core::NodeId,
    ) -> Result<(), shardbox_core::StorageError> {
        let by = by.clone();
        self.db
            .run(move |conn| crate::sql::reshard::withdraw_reshard(conn, by))
            .await
    }

    async fn reshard(
        &self,
        switch: shardbox_core::storage::ReshardSwitch,
    ) -> Result<shardbox_core::storage::ReshardMoves, shardbox_core::StorageError> {
        let moves = self
            .db
            .run(move |conn| crate::sql::reshard::reshard(conn, switch))
            .await?;
        Ok(moves)
    }

    async fn recorded_shard_count(&self) -> Result<Option<u32>, shardbox_core::StorageError> {
        self.db
            .run(crate::sql::registry::recorded_shard_count)
            .await
    }

    async fn record_shard_strategy(
        &self,
        record: &shardbox_core::StrategyRecord,
    ) -> Result<Option<shardbox_core::StrategyRecord>, shardbox_core::StorageError> {
        let record = record.clone();
        self.db
            .run(move |conn| crate::sql::registry::record_shard_strategy(conn, record))
            .await
    }

    async fn recorded_shard_strategy(
        &self,
    ) -> Result<Option<shardbox_core::StrategyRecord>, shardbox_core::StorageError> {
        self.db
            .run(crate::sql::registry::recorded_shard_strategy)
            .await
    }

    async fn claim_shard_count(
        &self,
        shard_count: u32,
    ) -> Result<u32, shardbox_core::StorageError> {
        self.db
            .run(move |conn| crate::sql::registry::claim_shard_count(conn, shard_count))
            .await
    }
}

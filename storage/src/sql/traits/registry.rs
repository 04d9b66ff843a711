//! `WorkRegistry` for a diesel backend: leases, membership beats, the storage clock, the
//! shard layout and re-sharding, and the recorded shard count and strategy.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `WorkRegistry` for `$storage` over the unit functions of module `$units`.
macro_rules! work_registry_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::WorkRegistry for $storage {
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
                        $units::pick_up(conn, shard, node_id, worker_id, now, lease_until)
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
                    .run(move |conn| $units::renew(conn, lease, lease_until))
                    .await
            }

            async fn release(
                &self,
                lease: &shardbox_core::Lease,
            ) -> Result<(), shardbox_core::StorageError> {
                let lease = lease.clone();
                self.db.run(move |conn| $units::release(conn, lease)).await
            }

            async fn sessions(
                &self,
            ) -> Result<Vec<shardbox_core::storage::ShardSession>, shardbox_core::StorageError>
            {
                self.db.run($units::sessions).await
            }

            async fn beat(
                &self,
                node_id: &shardbox_core::NodeId,
                now: chrono::DateTime<chrono::Utc>,
                alive_until: chrono::DateTime<chrono::Utc>,
                kinds: &[shardbox_core::RegisteredKind],
            ) -> Result<(), shardbox_core::StorageError> {
                let node_id = node_id.clone();
                let kinds = shardbox_core::encode_kinds(kinds);
                self.db
                    .run(move |conn| $units::beat(conn, node_id, now, alive_until, kinds))
                    .await
            }

            async fn leave(
                &self,
                node_id: &shardbox_core::NodeId,
            ) -> Result<(), shardbox_core::StorageError> {
                let node_id = node_id.clone();
                self.db.run(move |conn| $units::leave(conn, node_id)).await
            }

            async fn clock_now(
                &self,
            ) -> Result<Option<chrono::DateTime<chrono::Utc>>, shardbox_core::StorageError> {
                self.db.run($units::clock_now).await
            }

            async fn members(
                &self,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Vec<shardbox_core::storage::Member>, shardbox_core::StorageError> {
                self.db.run(move |conn| $units::members(conn, now)).await
            }

            async fn layout(
                &self,
            ) -> Result<shardbox_core::storage::ShardLayout, shardbox_core::StorageError> {
                self.db.run($units::layout).await
            }

            async fn announce_reshard(
                &self,
                announcement: &shardbox_core::storage::ReshardAnnouncement,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::storage::ReshardAnnouncement, shardbox_core::StorageError>
            {
                let announcement = announcement.clone();
                self.db
                    .run(move |conn| $units::announce_reshard(conn, announcement, now))
                    .await
            }

            async fn withdraw_reshard(
                &self,
                by: &shardbox_core::NodeId,
            ) -> Result<(), shardbox_core::StorageError> {
                let by = by.clone();
                self.db
                    .run(move |conn| $units::withdraw_reshard(conn, by))
                    .await
            }

            async fn reshard(
                &self,
                switch: shardbox_core::storage::ReshardSwitch,
            ) -> Result<shardbox_core::storage::ReshardMoves, shardbox_core::StorageError> {
                let moves = self
                    .db
                    .run(move |conn| $units::reshard(conn, switch))
                    .await?;
                Ok(moves)
            }

            async fn claim_database_place(
                &self,
                place: shardbox_core::storage::DatabasePlace,
            ) -> Result<shardbox_core::storage::DatabasePlace, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::claim_database_place(conn, place))
                    .await
            }

            async fn recorded_database_place(
                &self,
            ) -> Result<Option<shardbox_core::storage::DatabasePlace>, shardbox_core::StorageError>
            {
                self.db.run($units::recorded_database_place).await
            }

            async fn recorded_shard_count(
                &self,
            ) -> Result<Option<u32>, shardbox_core::StorageError> {
                self.db.run($units::recorded_shard_count).await
            }

            async fn record_shard_strategy(
                &self,
                record: &shardbox_core::StrategyRecord,
            ) -> Result<Option<shardbox_core::StrategyRecord>, shardbox_core::StorageError> {
                let record = record.clone();
                self.db
                    .run(move |conn| $units::record_shard_strategy(conn, record))
                    .await
            }

            async fn recorded_shard_strategy(
                &self,
            ) -> Result<Option<shardbox_core::StrategyRecord>, shardbox_core::StorageError> {
                self.db.run($units::recorded_shard_strategy).await
            }

            async fn claim_shard_count(
                &self,
                shard_count: u32,
            ) -> Result<u32, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::claim_shard_count(conn, shard_count))
                    .await
            }
        }
    };
}
pub(crate) use work_registry_impl;

//! `CatchUpStore` for a diesel backend: starting, reading, updating, cancelling and purging
//! catch-up jobs; read models' versions.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `CatchUpStore` for `$storage` over the unit functions of module `$units`.
macro_rules! catch_up_store_impl {
    ($storage:ty, $units:ident) => {
        #[async_trait::async_trait]
        impl shardbox_core::CatchUpStore for $storage {
            async fn start_catch_up(
                &self,
                job: shardbox_core::storage::NewCatchUp,
                shard_count: u32,
            ) -> Result<shardbox_core::storage::CatchUpJob, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::start_catch_up(conn, job, shard_count))
                    .await
            }

            async fn has_pending_replay(
                &self,
                projection_kind: &str,
                tenant: &str,
                shards: &[shardbox_core::ShardIndex],
                cursor: i64,
            ) -> Result<bool, shardbox_core::StorageError> {
                let (kind, tenant, shards) = (
                    projection_kind.to_owned(),
                    tenant.to_owned(),
                    shards.to_vec(),
                );
                self.db
                    .run(move |conn| $units::has_pending_replay(conn, kind, tenant, shards, cursor))
                    .await
            }

            async fn catch_up(
                &self,
                id: i64,
            ) -> Result<Option<shardbox_core::storage::CatchUpJob>, shardbox_core::StorageError>
            {
                self.db.run(move |conn| $units::catch_up(conn, id)).await
            }

            async fn cancel_catch_up(
                &self,
                id: i64,
                at: chrono::DateTime<chrono::Utc>,
            ) -> Result<Option<shardbox_core::storage::CatchUpJob>, shardbox_core::StorageError>
            {
                self.db
                    .run(move |conn| $units::cancel_catch_up(conn, id, at))
                    .await
            }

            async fn running_catch_ups(
                &self,
            ) -> Result<Vec<shardbox_core::storage::CatchUpJob>, shardbox_core::StorageError> {
                self.db.run($units::running_catch_ups).await
            }

            async fn update_catch_up(
                &self,
                job: &shardbox_core::storage::CatchUpJob,
            ) -> Result<(), shardbox_core::StorageError> {
                let job = job.clone();
                self.db
                    .run(move |conn| $units::update_catch_up(conn, job))
                    .await
            }

            async fn purge_catch_ups(
                &self,
                before: chrono::DateTime<chrono::Utc>,
            ) -> Result<usize, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::purge_catch_ups(conn, before))
                    .await
            }

            async fn read_model_versions(
                &self,
            ) -> Result<Vec<shardbox_core::storage::ReadModelVersion>, shardbox_core::StorageError>
            {
                self.db
                    .run(move |conn| $units::read_model_versions(conn))
                    .await
            }

            async fn retire_version(
                &self,
                model: &str,
                kind: &str,
            ) -> Result<u64, shardbox_core::StorageError> {
                let (model, kind) = (model.to_owned(), kind.to_owned());
                self.db
                    .run(move |conn| $units::retire_version(conn, model, kind))
                    .await
            }

            async fn prepare_catch_up(
                &self,
                spec: &shardbox_core::storage::NewCatchUp,
                own: Option<shardbox_core::ShardIndex>,
            ) -> Result<i64, shardbox_core::StorageError> {
                let spec = spec.clone();
                self.db
                    .run(move |conn| $units::prepare_catch_up(conn, spec, own))
                    .await
            }

            async fn store_positions(
                &self,
            ) -> Result<shardbox_core::storage::StorePositions, shardbox_core::StorageError> {
                self.db.run($units::store_positions).await
            }

            async fn has_unsettled_rows(
                &self,
                projection_kind: &str,
                tenant: &str,
                shards: &[shardbox_core::ShardIndex],
                up_to_seq: i64,
            ) -> Result<bool, shardbox_core::StorageError> {
                let (kind, tenant, shards) = (
                    projection_kind.to_owned(),
                    tenant.to_owned(),
                    shards.to_vec(),
                );
                self.db
                    .run(move |conn| {
                        $units::has_unsettled_rows(conn, kind, tenant, shards, up_to_seq)
                    })
                    .await
            }

            async fn released_catch_ups(&self) -> Result<Vec<i64>, shardbox_core::StorageError> {
                self.db.run($units::released_catch_ups).await
            }

            async fn release_parked(
                &self,
                job: &shardbox_core::storage::CatchUpJob,
                own: Option<shardbox_core::ShardIndex>,
            ) -> Result<usize, shardbox_core::StorageError> {
                let job = job.clone();
                self.db
                    .run(move |conn| $units::release_catch_up_parked(conn, job, own))
                    .await
            }
        }
    };
}
pub(crate) use catch_up_store_impl;

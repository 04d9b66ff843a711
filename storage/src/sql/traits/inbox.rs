//! `InboxStore` for a diesel backend: writes (one unit of work per group of batches, then the
//! writers' wake-ups), page reads, stage commits and the inbox's counts.
//!
//! Written inside a macro so that it is stamped for each backend (see [`super`]).

/// Implements `InboxStore` for `$storage` over the unit functions of module `$units`.
macro_rules! inbox_store_impl {
    ($storage:ty, $units:ident) => {
        impl $storage {
            /// `write_all` and `write_all_addressed` (with the count the rows were addressed
            /// by): one unit of work, then the writers' wake-ups for the shards written.
            async fn write_batches(
                &self,
                batches: Vec<shardbox_core::storage::WriteBatch>,
                shard_count: Option<u32>,
            ) -> Result<Vec<shardbox_core::storage::WriteReport>, shardbox_core::StorageError> {
                if batches.iter().all(|b| b.is_empty()) {
                    return Ok(vec![Default::default(); batches.len()]);
                }
                let reports = self
                    .db
                    .run(move |conn| $units::write_addressed(conn, batches, shard_count))
                    .await?;
                let mut shards: Vec<shardbox_core::ShardIndex> = reports
                    .iter()
                    .flat_map(|r| r.shards.iter().copied())
                    .collect();
                shards.sort_unstable();
                shards.dedup();
                self.written_backend(&shards);
                Ok(reports)
            }
        }

        #[async_trait::async_trait]
        impl shardbox_core::InboxStore for $storage {
            async fn write(
                &self,
                batch: shardbox_core::storage::WriteBatch,
            ) -> Result<shardbox_core::storage::WriteReport, shardbox_core::StorageError> {
                // One path for one batch and for a group (see `write_all`).
                let mut reports = self.write_all(vec![batch]).await?;
                Ok(reports.pop().unwrap_or_default())
            }

            async fn write_all(
                &self,
                batches: Vec<shardbox_core::storage::WriteBatch>,
            ) -> Result<Vec<shardbox_core::storage::WriteReport>, shardbox_core::StorageError> {
                self.write_batches(batches, None).await
            }

            async fn write_all_addressed(
                &self,
                batches: Vec<shardbox_core::storage::WriteBatch>,
                shard_count: u32,
            ) -> Result<Vec<shardbox_core::storage::WriteReport>, shardbox_core::StorageError> {
                self.write_batches(batches, Some(shard_count)).await
            }

            async fn read_page(
                &self,
                shard: shardbox_core::ShardIndex,
                now: chrono::DateTime<chrono::Utc>,
                limit: usize,
            ) -> Result<shardbox_core::storage::Page, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::read_page(conn, shard, now, limit))
                    .await
            }

            async fn commit_stage(
                &self,
                commit: shardbox_core::storage::StageCommit,
            ) -> Result<shardbox_core::storage::CommitReport, shardbox_core::StorageError> {
                let decided = commit.outcomes_decided.then_some(commit.lease.shard);
                let report = self
                    .db
                    .run(move |conn| $units::commit_stage(conn, commit))
                    .await?;
                self.written_backend(&report.written.shards);
                if let Some(shard) = decided {
                    self.decided_backend(&[shard]);
                }
                Ok(report)
            }

            async fn outcome(
                &self,
                key: &shardbox_core::DedupKey,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::OutcomeLookup, shardbox_core::StorageError> {
                let key = key.clone();
                self.db
                    .run(move |conn| $units::read_outcome(conn, &key, now))
                    .await
            }

            async fn next_due(
                &self,
                shard: shardbox_core::ShardIndex,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Option<chrono::DateTime<chrono::Utc>>, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::next_due(conn, shard, now))
                    .await
            }

            async fn counts(
                &self,
                shard: Option<shardbox_core::ShardIndex>,
            ) -> Result<shardbox_core::storage::InboxCounts, shardbox_core::StorageError> {
                self.db.run(move |conn| $units::counts(conn, shard)).await
            }

            async fn depths(
                &self,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Vec<shardbox_core::storage::ShardDepth>, shardbox_core::StorageError> {
                self.db.run(move |conn| $units::depths(conn, now)).await
            }

            async fn kind_depths(
                &self,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Vec<shardbox_core::storage::KindDepth>, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::kind_depths(conn, now))
                    .await
            }

            async fn purge_due_shards(
                &self,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Vec<shardbox_core::ShardIndex>, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::purge_due_shards(conn, now))
                    .await
            }

            async fn expired_shards(
                &self,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<Vec<shardbox_core::ShardIndex>, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::expired_shards(conn, now))
                    .await
            }

            async fn read_expired(
                &self,
                shard: shardbox_core::ShardIndex,
                now: chrono::DateTime<chrono::Utc>,
                limit: usize,
            ) -> Result<Vec<shardbox_core::InboxMessage>, shardbox_core::StorageError> {
                self.db
                    .run(move |conn| $units::read_expired(conn, shard, now, limit))
                    .await
            }
        }
    };
}
pub(crate) use inbox_store_impl;

//! The storage traits of shardbox-core for a diesel backend, written once.
//!
//! Each async method moves its arguments into one closure that runs on the blocking pool
//! (checkout, transaction and queries together, see [`crate::pool`]) and calls the matching
//! unit of work of the backend's `units` module.

/// Implements `InboxStore`, `WorkRegistry`, `EventStore`, `EntityStore`, `CatchUpStore`,
/// `DeadLetterStore`, `KindControlStore`, `Storage` and [`crate::Inspect`] for `$storage` (which implements
/// `SchemaCheck` itself; a struct with a
/// `db: Db<Conn>` field and
/// `describe_backend()`, `written_backend(&[ShardIndex])` — told of every committed write —,
/// `decided_backend(&[ShardIndex])` — told of every commit that decided command outcomes —,
/// `write_listener_backend()` and `async node_stopped_backend()` methods) over the unit
/// functions of module `$units`.
macro_rules! storage_impls {
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

        #[async_trait::async_trait]
        impl shardbox_core::DeadLetterStore for $storage {
            async fn list_dead_letters(
                &self,
                filter: &shardbox_core::storage::DeadLetterFilter,
            ) -> Result<Vec<shardbox_core::storage::StoredDeadLetter>, shardbox_core::StorageError>
            {
                let filter = filter.clone();
                self.db
                    .run(move |conn| $units::list_dead_letters(conn, filter))
                    .await
            }

            async fn count_dead_letters(
                &self,
                filter: &shardbox_core::storage::DeadLetterFilter,
            ) -> Result<u64, shardbox_core::StorageError> {
                let filter = filter.clone();
                self.db
                    .run(move |conn| $units::count_dead_letters(conn, filter))
                    .await
            }

            async fn requeue_dead_letters(
                &self,
                requeue: Vec<shardbox_core::storage::Requeue>,
                shard_count: u32,
                _now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::storage::RequeueReport, shardbox_core::StorageError> {
                if requeue.is_empty() {
                    return Ok(Default::default());
                }
                self.db
                    .run(move |conn| $units::requeue_dead_letters(conn, requeue, shard_count))
                    .await
            }

            async fn purge_dead_letters(
                &self,
                filter: &shardbox_core::storage::DeadLetterFilter,
            ) -> Result<u64, shardbox_core::StorageError> {
                let filter = filter.clone();
                self.db
                    .run(move |conn| $units::purge_dead_letters(conn, filter))
                    .await
            }

            async fn blocked_targets(
                &self,
                limit: usize,
            ) -> Result<Vec<shardbox_core::storage::BlockedTarget>, shardbox_core::StorageError>
            {
                self.db
                    .run(move |conn| $units::blocked_targets(conn, limit))
                    .await
            }

            async fn unblock_target(
                &self,
                target: &shardbox_core::storage::EntityKey,
                action: shardbox_core::storage::Unblock,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::storage::UnblockReport, shardbox_core::StorageError> {
                let target = target.clone();
                self.db
                    .run(move |conn| $units::unblock_target(conn, target, action, now))
                    .await
            }
        }

        #[async_trait::async_trait]
        impl shardbox_core::KindControlStore for $storage {
            async fn kind_controls(
                &self,
            ) -> Result<Vec<shardbox_core::KindControl>, shardbox_core::StorageError> {
                self.db.run(move |conn| $units::kind_controls(conn)).await
            }

            async fn pause_kind(
                &self,
                kind: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<bool, shardbox_core::StorageError> {
                let kind = kind.to_owned();
                self.db
                    .run(move |conn| $units::pause_kind(conn, kind, now))
                    .await
            }

            async fn resume_kind(
                &self,
                kind: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<shardbox_core::storage::ResumeReport, shardbox_core::StorageError> {
                let kind = kind.to_owned();
                let report = self
                    .db
                    .run(move |conn| $units::resume_kind(conn, kind, now))
                    .await?;
                self.written_backend(&report.shards);
                Ok(report)
            }

            async fn set_kind_settings(
                &self,
                kind: &str,
                settings: &shardbox_core::KindSettings,
                now: chrono::DateTime<chrono::Utc>,
            ) -> Result<(), shardbox_core::StorageError> {
                let (kind, settings) = (kind.to_owned(), settings.clone());
                self.db
                    .run(move |conn| $units::set_kind_settings(conn, kind, settings, now))
                    .await
            }
        }

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

        #[async_trait::async_trait]
        impl shardbox_core::EventStore for $storage {
            async fn read_events(
                &self,
                after_seq: i64,
                event_types: &[String],
                since: Option<chrono::DateTime<chrono::Utc>>,
                limit: usize,
            ) -> Result<Vec<shardbox_core::StoredEvent>, shardbox_core::StorageError> {
                let event_types = event_types.to_vec();
                self.db
                    .run(move |conn| {
                        $units::read_events(conn, after_seq, event_types, since, limit)
                    })
                    .await
            }

            async fn read_source_events(
                &self,
                tenant: &str,
                source: &shardbox_core::EventSource,
                after_seq: i64,
                limit: usize,
            ) -> Result<Vec<shardbox_core::StoredEvent>, shardbox_core::StorageError> {
                let (tenant, source) = (tenant.to_owned(), source.clone());
                self.db
                    .run(move |conn| {
                        $units::read_source_events(conn, tenant, source, after_seq, limit)
                    })
                    .await
            }

            async fn last_event_seq(&self) -> Result<i64, shardbox_core::StorageError> {
                self.db.run($units::last_event_seq).await
            }

            async fn event_seqs(
                &self,
                ids: &[shardbox_core::SignalId],
            ) -> Result<Vec<(shardbox_core::SignalId, i64)>, shardbox_core::StorageError> {
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let ids = ids.to_vec();
                self.db.run(move |conn| $units::event_seqs(conn, ids)).await
            }

            async fn count_events(
                &self,
                event_types: &[String],
                since: Option<chrono::DateTime<chrono::Utc>>,
            ) -> Result<i64, shardbox_core::StorageError> {
                let event_types = event_types.to_vec();
                self.db
                    .run(move |conn| $units::count_events(conn, event_types, since))
                    .await
            }
        }

        #[async_trait::async_trait]
        impl shardbox_core::EntityStore for $storage {
            async fn load_states(
                &self,
                keys: &[shardbox_core::storage::EntityKey],
            ) -> Result<Vec<shardbox_core::storage::EntityState>, shardbox_core::StorageError> {
                if keys.is_empty() {
                    return Ok(Vec::new());
                }
                let keys = keys.to_vec();
                self.db
                    .run(move |conn| $units::load_states(conn, keys))
                    .await
            }
        }

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
        }

        #[async_trait::async_trait]
        impl shardbox_core::Storage for $storage {
            fn describe(&self) -> String {
                self.describe_backend()
            }

            fn write_listener(&self) -> Option<&dyn shardbox_core::WriteListener> {
                self.write_listener_backend()
            }

            async fn node_stopped(&self) -> Result<(), shardbox_core::StorageError> {
                self.node_stopped_backend().await
            }

            fn runs_writes_in_transaction(&self) -> bool {
                true
            }

            fn schema_check(&self) -> Option<&dyn shardbox_core::storage::SchemaCheck> {
                Some(self)
            }
        }

        impl $storage {
            /// The dead letters, oldest first.
            pub async fn dead_letters(
                &self,
            ) -> Result<Vec<shardbox_core::storage::DeadLetter>, shardbox_core::StorageError> {
                self.db.run($units::dead_letters).await
            }

            /// Every row of the Inbox, in `seq` order. Loads the whole table: for tests and
            /// inspection of small databases, not for production monitoring (use
            /// [`counts`](shardbox_core::InboxStore::counts)).
            pub async fn rows(
                &self,
            ) -> Result<Vec<shardbox_core::InboxMessage>, shardbox_core::StorageError> {
                self.db.run($units::rows).await
            }
        }

        #[async_trait::async_trait]
        impl $crate::Inspect for $storage {
            async fn dead_letters(
                &self,
            ) -> Result<Vec<shardbox_core::storage::DeadLetter>, shardbox_core::StorageError> {
                <$storage>::dead_letters(self).await
            }

            async fn rows(
                &self,
            ) -> Result<Vec<shardbox_core::InboxMessage>, shardbox_core::StorageError> {
                <$storage>::rows(self).await
            }

            async fn outcome_records(&self) -> Result<u64, shardbox_core::StorageError> {
                self.db.run($units::outcome_records).await
            }
        }
    };
}
pub(crate) use storage_impls;

//! A read-only view of a delivery's storage: what an application, a test or a user's station
//! may read of the backend without a way to write to it.
//!
//! ```text
//!  StorageReads ─┬─ Inbox:        counts, depths (by shard, by kind), next_due, outcome
//!                ├─ lock table:   sessions, members, recorded shard count and strategy, layout
//!                ├─ events:       read_events, read_source_events, seqs, counts
//!                ├─ states:       load_states
//!                ├─ catch-ups:    catch_up, running_catch_ups
//!                └─ dead letters: list, count, blocked targets
//! ```
//!
//! The storage is a private field: a holder of this view — `Shardbox::storage()` hands one
//! out — cannot reach a write, so everything written goes through the application's own calls
//! (sends, the operator actions) or a stage's one fenced commit.
//!
//! ```compile_fail,E0599
//! # async fn capture(reads: shardbox_core::storage::StorageReads) {
//! // No write is reachable through the view.
//! reads.write(Default::default()).await;
//! # }
//! ```

use crate::model::error::StorageError;
use crate::model::event::{EventSource, StoredEvent};
use crate::model::ids::{ShardIndex, SignalId};
use crate::model::message::DedupKey;
use crate::model::outcome::OutcomeLookup;
use crate::model::strategy::StrategyRecord;
use crate::storage::{
    BlockedTarget, CatchUpJob, DeadLetterFilter, EntityKey, EntityState, InboxCounts, KindDepth,
    Member, ShardDepth, ShardLayout, ShardSession, Storage, StoredDeadLetter,
};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// The reads of a storage, and nothing that writes (see the module docs).
#[derive(Clone)]
pub struct StorageReads {
    storage: Arc<dyn Storage>,
}

impl std::fmt::Debug for StorageReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StorageReads")
            .field(&self.storage.describe())
            .finish()
    }
}

impl StorageReads {
    /// The reads of `storage`.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        StorageReads { storage }
    }

    /// A short description of the backend and database (no secrets).
    pub fn describe(&self) -> String {
        self.storage.describe()
    }

    /// Inbox rows by status, of one shard or all (`InboxStore::counts`).
    pub async fn counts(&self, shard: Option<ShardIndex>) -> Result<InboxCounts, StorageError> {
        self.storage.counts(shard).await
    }

    /// Each shard's depth by wait at `now` (`InboxStore::depths`).
    pub async fn depths(&self, now: DateTime<Utc>) -> Result<Vec<ShardDepth>, StorageError> {
        self.storage.depths(now).await
    }

    /// Each entity kind's pending rows by wait at `now` (`InboxStore::kind_depths`).
    pub async fn kind_depths(&self, now: DateTime<Utc>) -> Result<Vec<KindDepth>, StorageError> {
        self.storage.kind_depths(now).await
    }

    /// When `shard`'s next delayed row is due, after `now` (`InboxStore::next_due`).
    pub async fn next_due(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StorageError> {
        self.storage.next_due(shard, now).await
    }

    /// What became of the command with `key` (`InboxStore::outcome`).
    pub async fn outcome(
        &self,
        key: &DedupKey,
        now: DateTime<Utc>,
    ) -> Result<OutcomeLookup, StorageError> {
        self.storage.outcome(key, now).await
    }

    /// Every row of the lock table (`WorkRegistry::sessions`).
    pub async fn sessions(&self) -> Result<Vec<ShardSession>, StorageError> {
        self.storage.sessions().await
    }

    /// The members at `now` (`WorkRegistry::members`).
    pub async fn members(&self, now: DateTime<Utc>) -> Result<Vec<Member>, StorageError> {
        self.storage.members(now).await
    }

    /// The recorded shard count, if a node recorded one.
    pub async fn recorded_shard_count(&self) -> Result<Option<u32>, StorageError> {
        self.storage.recorded_shard_count().await
    }

    /// The recorded shard strategy, if a node recorded one.
    pub async fn recorded_shard_strategy(&self) -> Result<Option<StrategyRecord>, StorageError> {
        self.storage.recorded_shard_strategy().await
    }

    /// The recorded shard count and the re-sharding in progress (`WorkRegistry::layout`).
    pub async fn layout(&self) -> Result<ShardLayout, StorageError> {
        self.storage.layout().await
    }

    /// The storage's own clock, if it has one (`WorkRegistry::clock_now`).
    pub async fn clock_now(&self) -> Result<Option<DateTime<Utc>>, StorageError> {
        self.storage.clock_now().await
    }

    /// Events after `after_seq` in `seq` order (`EventStore::read_events`).
    pub async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        self.storage
            .read_events(after_seq, event_types, since, limit)
            .await
    }

    /// Events after `after_seq` within a replay's set (`EventStore::read_events_within`).
    pub async fn read_events_within(
        &self,
        after_seq: i64,
        set: &[i64],
        event_types: &[String],
        since: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        self.storage
            .read_events_within(after_seq, set, event_types, since, limit)
            .await
    }

    /// Where the end of a job over several databases stands (`CatchUpStore::spread_progress`):
    /// a read; what it says to record is stored with the job's step.
    pub async fn spread_progress(
        &self,
        job: &CatchUpJob,
    ) -> Result<super::SpreadProgress, StorageError> {
        self.storage.spread_progress(job).await
    }

    /// One producer's events after `after_seq` (`EventStore::read_source_events`).
    pub async fn read_source_events(
        &self,
        tenant: &str,
        source: &EventSource,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        self.storage
            .read_source_events(tenant, source, after_seq, limit)
            .await
    }

    /// The highest event `seq` (`EventStore::last_event_seq`).
    pub async fn last_event_seq(&self) -> Result<i64, StorageError> {
        self.storage.last_event_seq().await
    }

    /// The `seq`s of the events with these ids (`EventStore::event_seqs`).
    pub async fn event_seqs(&self, ids: &[SignalId]) -> Result<Vec<(SignalId, i64)>, StorageError> {
        self.storage.event_seqs(ids).await
    }

    /// How many events of these types occurred since then (`EventStore::count_events`).
    pub async fn count_events(
        &self,
        event_types: &[String],
        since: Option<DateTime<Utc>>,
    ) -> Result<i64, StorageError> {
        self.storage.count_events(event_types, since).await
    }

    /// The framework-kept states of `keys` (`EntityStore::load_states`).
    pub async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError> {
        self.storage.load_states(keys).await
    }

    /// Catch-up job `id` (`CatchUpStore::catch_up`).
    pub async fn catch_up(&self, id: i64) -> Result<Option<CatchUpJob>, StorageError> {
        self.storage.catch_up(id).await
    }

    /// The catch-ups not finished (`CatchUpStore::running_catch_ups`).
    pub async fn running_catch_ups(&self) -> Result<Vec<CatchUpJob>, StorageError> {
        self.storage.running_catch_ups().await
    }

    /// Every read model's version record (`CatchUpStore::read_model_versions`).
    pub async fn read_model_versions(&self) -> Result<Vec<super::ReadModelVersion>, StorageError> {
        self.storage.read_model_versions().await
    }

    /// Whether, in `shards`, a replayed row of projection `kind` (tenant `tenant`) is still
    /// undelivered, or a live event row of that kind with an event `seq <= cursor` is pending
    /// (`CatchUpStore::has_pending_replay`).
    pub async fn has_pending_replay(
        &self,
        kind: &str,
        tenant: &str,
        shards: &[ShardIndex],
        cursor: i64,
    ) -> Result<bool, StorageError> {
        self.storage
            .has_pending_replay(kind, tenant, shards, cursor)
            .await
    }

    /// The dead letters matching `filter` (`DeadLetterStore::list_dead_letters`).
    pub async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<StoredDeadLetter>, StorageError> {
        self.storage.list_dead_letters(filter).await
    }

    /// How many dead letters match `filter` (`DeadLetterStore::count_dead_letters`).
    pub async fn count_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError> {
        self.storage.count_dead_letters(filter).await
    }

    /// At most `limit` blocked targets (`DeadLetterStore::blocked_targets`).
    pub async fn blocked_targets(&self, limit: usize) -> Result<Vec<BlockedTarget>, StorageError> {
        self.storage.blocked_targets(limit).await
    }
}

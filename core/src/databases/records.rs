//! Dead letters, kind controls, entity states and inspection over several databases: each
//! database keeps its own targets' records; reads merge them, operator actions reach every
//! database, and ids are made unique (`local × N + database`).

use super::Databases;
use crate::model::error::StorageError;
use crate::model::kind_controls::{KindControl, KindSettings};
use crate::model::message::InboxMessage;
use crate::storage::{
    BlockedTarget, DeadLetter, DeadLetterFilter, DeadLetterId, DeadLetterStore, EntityKey,
    EntityState, EntityStore, Inspect, KindControlStore, OutboxRow, OutboxStore, RelayCopy,
    RelayOutcome, Requeue, RequeueReport, ResumeReport, StoredDeadLetter, Unblock, UnblockReport,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

impl Databases {
    /// `filter` as `database` reads it: its own ids, its local cursor; `None` when the filter
    /// names ids and none is of this database.
    fn local_filter(&self, database: u32, filter: &DeadLetterFilter) -> Option<DeadLetterFilter> {
        let mut local = filter.clone();
        if !filter.ids.is_empty() {
            local.ids = filter
                .ids
                .iter()
                .map(|id| self.map.split_seq(id.0))
                .filter(|(d, _)| *d == database)
                .map(|(_, id)| DeadLetterId(id))
                .collect();
            if local.ids.is_empty() {
                return None;
            }
        }
        local.after = filter
            .after
            .map(|after| DeadLetterId(self.map.local_after(database, after.0)));
        Some(local)
    }
}

#[async_trait]
impl DeadLetterStore for Databases {
    async fn list_dead_letters(
        &self,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<StoredDeadLetter>, StorageError> {
        let mut all = Vec::new();
        for (d, db) in self.dbs.iter().enumerate() {
            let d = d as u32;
            let Some(local) = self.local_filter(d, filter) else {
                continue;
            };
            for stored in db.list_dead_letters(&local).await? {
                all.push(self.map.stored_letter_to_global(d, stored));
            }
        }
        all.sort_by_key(|s| s.id.0);
        if let Some(limit) = filter.limit {
            all.truncate(limit);
        }
        Ok(all)
    }

    async fn count_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError> {
        let mut total = 0;
        for (d, db) in self.dbs.iter().enumerate() {
            if let Some(local) = self.local_filter(d as u32, filter) {
                total += db.count_dead_letters(&local).await?;
            }
        }
        Ok(total)
    }

    async fn requeue_dead_letters(
        &self,
        requeue: Vec<Requeue>,
        shard_count: u32,
        now: DateTime<Utc>,
    ) -> Result<RequeueReport, StorageError> {
        if let Some(r) = requeue
            .iter()
            .find(|r| self.map.split_seq(r.id.0).0 != self.map.database_of(r.shard))
        {
            return Err(StorageError::Unsupported {
                what: format!("requeueing dead letter {} into shard {}", r.id, r.shard),
                reason: format!(
                    "the dead letter is in database {} and the shard in database {}; a dead letter goes back to its target's shard, which is in its own database",
                    self.map.split_seq(r.id.0).0,
                    self.map.database_of(r.shard)
                ),
            });
        }
        let mut report = RequeueReport::default();
        for (d, db) in self.dbs.iter().enumerate() {
            let d = d as u32;
            let mine: Vec<Requeue> = requeue
                .iter()
                .filter(|r| self.map.split_seq(r.id.0).0 == d)
                .map(|r| Requeue {
                    id: DeadLetterId(self.map.split_seq(r.id.0).1),
                    shard: self.map.local(r.shard),
                })
                .collect();
            if mine.is_empty() {
                continue;
            }
            let share = self.map.shard_count_of(d, shard_count);
            let mut part = match db.requeue_dead_letters(mine, share, now).await {
                Ok(part) => part,
                Err(e) => return Err(self.refusal(e, shard_count).await),
            };
            part.shards = self.map.shards_to_global(d, part.shards);
            report.merge(part);
        }
        Ok(report)
    }

    async fn purge_dead_letters(&self, filter: &DeadLetterFilter) -> Result<u64, StorageError> {
        let mut total = 0;
        for (d, db) in self.dbs.iter().enumerate() {
            if let Some(local) = self.local_filter(d as u32, filter) {
                total += db.purge_dead_letters(&local).await?;
            }
        }
        Ok(total)
    }

    async fn blocked_targets(&self, limit: usize) -> Result<Vec<BlockedTarget>, StorageError> {
        let each = self.each(|_, db| db.blocked_targets(limit)).await?;
        let mut all: Vec<BlockedTarget> = each
            .into_iter()
            .enumerate()
            .flat_map(|(d, b)| b.into_iter().map(move |x| (d as u32, x)))
            .map(|(d, x)| self.map.blocked_to_global(d, x))
            .collect();
        all.sort_by_key(|b| b.blocked_at);
        all.truncate(limit);
        Ok(all)
    }

    async fn unblock_target(
        &self,
        target: &EntityKey,
        action: Unblock,
        now: DateTime<Utc>,
    ) -> Result<UnblockReport, StorageError> {
        let d = self.database_of_target(&target.kind, &target.id);
        let mut report = self.db(d).unblock_target(target, action, now).await?;
        report.shards = self.map.shards_to_global(d, report.shards);
        Ok(report)
    }
}

#[async_trait]
impl KindControlStore for Databases {
    async fn kind_controls(&self) -> Result<Vec<KindControl>, StorageError> {
        self.home().kind_controls().await
    }

    async fn pause_kind(&self, kind: &str, now: DateTime<Utc>) -> Result<bool, StorageError> {
        let each = self.each(|_, db| db.pause_kind(kind, now)).await?;
        Ok(each[0])
    }

    async fn resume_kind(
        &self,
        kind: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeReport, StorageError> {
        let each = self.each(|_, db| db.resume_kind(kind, now)).await?;
        let mut report = ResumeReport {
            was_paused: each[0].was_paused,
            ..ResumeReport::default()
        };
        for (d, part) in each.into_iter().enumerate() {
            report.released += part.released;
            report
                .shards
                .extend(self.map.shards_to_global(d as u32, part.shards));
        }
        report.shards.sort_unstable();
        Ok(report)
    }

    async fn set_kind_settings(
        &self,
        kind: &str,
        settings: &KindSettings,
        now: DateTime<Utc>,
    ) -> Result<(), StorageError> {
        self.each(|_, db| db.set_kind_settings(kind, settings, now))
            .await
            .map(drop)
    }
}

#[async_trait]
impl EntityStore for Databases {
    async fn load_states(&self, keys: &[EntityKey]) -> Result<Vec<EntityState>, StorageError> {
        // A target's state lives in its database only: ask just the databases of `keys`.
        let groups = self.keys_by_database(keys.iter().map(|k| (k.kind.as_str(), k.id.as_str())));
        let mut states = Vec::new();
        for (d, group) in groups.iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            let mine: Vec<EntityKey> = group.iter().map(|i| keys[*i].clone()).collect();
            states.extend(self.db(d as u32).load_states(&mine).await?);
        }
        Ok(states)
    }
}

#[async_trait]
impl Inspect for Databases {
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StorageError> {
        let each = self.each(|_, db| db.dead_letters()).await?;
        Ok(each
            .into_iter()
            .enumerate()
            .flat_map(|(d, l)| l.into_iter().map(move |x| (d as u32, x)))
            .map(|(d, x)| self.map.letter_to_global(d, x))
            .collect())
    }

    async fn rows(&self) -> Result<Vec<InboxMessage>, StorageError> {
        let each = self.each(|_, db| db.rows()).await?;
        let mut all: Vec<InboxMessage> = each
            .into_iter()
            .enumerate()
            .flat_map(|(d, r)| r.into_iter().map(move |x| (d as u32, x)))
            .map(|(d, x)| self.map.row_to_global(d, x))
            .collect();
        all.sort_by_key(|r| r.seq);
        Ok(all)
    }

    async fn outcome_records(&self) -> Result<u64, StorageError> {
        let each = self.each(|_, db| db.outcome_records()).await?;
        Ok(each.into_iter().sum())
    }
}

/// The outbox is each database's own: the storage over them moves a stage's rows for other
/// databases into its database's outbox and runs the relays (see `relays.rs`), so these calls
/// on the whole are refused.
#[async_trait]
impl OutboxStore for Databases {
    async fn outbox_page(
        &self,
        _database: u32,
        _after: i64,
        _limit: usize,
    ) -> Result<Vec<OutboxRow>, StorageError> {
        Err(outbox_is_per_database())
    }

    async fn trim_outbox(&self, _database: u32, _up_to: i64) -> Result<usize, StorageError> {
        Err(outbox_is_per_database())
    }

    async fn relay_position(&self, _from: u32) -> Result<i64, StorageError> {
        Err(outbox_is_per_database())
    }

    async fn relay_into(&self, _copy: RelayCopy) -> Result<RelayOutcome, StorageError> {
        Err(outbox_is_per_database())
    }
}

fn outbox_is_per_database() -> StorageError {
    StorageError::Unsupported {
        what: "the outbox of a storage over several databases".to_owned(),
        reason: "each database has its own outbox; the storage runs the relays between them (Databases::relay_round)".to_owned(),
    }
}

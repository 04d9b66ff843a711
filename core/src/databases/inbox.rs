//! The Inbox over several databases: shard-scoped calls go to the shard's database; a write
//! is split by database; a stage's rows for other databases go to its outbox.
//!
//! ```text
//!  write(batch) ─► rows grouped by their shard's database, events by their source's; one
//!                  write per database
//!  commit_stage ─► the lease's database; fan-out rows of other databases ─► commit.outbox
//! ```
//!
//! A write that spans databases is one transaction per database: a send that fails half way
//! returns the error and, sent again with the same signal ids, writes the rest (the rows
//! already written are duplicates and ignored).

use super::Databases;
use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::model::message::DedupKey;
use crate::model::message::InboxMessage;
use crate::model::outcome::OutcomeLookup;
use crate::storage::{
    CommitReport, InboxCounts, InboxStore, KindDepth, OutboxWrite, Page, ShardDepth, StageCommit,
    WorkRegistry, WriteBatch, WriteReport,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

impl Databases {
    /// `batch` as one batch per database, in database order, its rows still addressed to
    /// global shards: each row in its shard's database, each event in its source's (where a
    /// stage of its source appends the source's other events, so one database holds a
    /// source's stream). The send path queues each part with its database's sends.
    pub fn by_database(&self, batch: WriteBatch) -> BTreeMap<u32, WriteBatch> {
        let mut parts: BTreeMap<u32, WriteBatch> = BTreeMap::new();
        for write in batch.messages {
            let d = self.map.database_of(write.shard);
            parts.entry(d).or_default().messages.push(write);
        }
        for event in batch.events {
            let d = self.database_of_target(&event.source.kind, &event.source.id);
            parts.entry(d).or_default().events.push(event);
        }
        parts
    }

    /// [`Databases::by_database`] with every row addressed to its local shard.
    fn split(&self, batch: WriteBatch) -> BTreeMap<u32, WriteBatch> {
        let mut parts = self.by_database(batch);
        for part in parts.values_mut() {
            for write in &mut part.messages {
                write.shard = self.map.local(write.shard);
            }
        }
        parts
    }

    /// A refusal of `database` for its own share of the count, told as the global counts.
    pub(super) async fn refusal(&self, error: StorageError, expected: u32) -> StorageError {
        match error {
            StorageError::ShardCountChanged { .. } => match self.recorded_shard_count().await {
                Ok(Some(recorded)) => StorageError::ShardCountChanged { expected, recorded },
                Ok(None) => error,
                Err(e) => e,
            },
            other => other,
        }
    }

    /// An error of `database` with the shard it names in its global form.
    pub(super) fn global_error(&self, database: u32, error: StorageError) -> StorageError {
        match error {
            StorageError::LeaseLost {
                shard,
                held,
                current,
            } => StorageError::LeaseLost {
                shard: self.map.global(database, shard),
                held,
                current,
            },
            other => other,
        }
    }

    /// The stage's commit as its database takes it: local shards and seqs, and the fan-out
    /// rows of other databases moved to its outbox.
    /// Refused ([`StorageError::Corrupt`], nothing written) when it changes a row of another
    /// database, which no shard of its own can hold.
    fn commit_to_local(&self, mut commit: StageCommit) -> Result<(u32, StageCommit), StorageError> {
        let (database, lease) = self.map.lease_to_local(&commit.lease);
        commit.lease = lease;
        let foreign = commit
            .updates
            .iter()
            .map(|u| u.seq)
            .chain(commit.dead_letters.iter().map(|l| l.original.seq))
            .find(|seq| self.map.split_seq(*seq).0 != database);
        if let Some(seq) = foreign {
            return Err(StorageError::Corrupt(format!(
                "a stage of shard {} changes row {seq}, which is in database {}, not the shard's database {database}; nothing was written",
                commit.lease.shard,
                self.map.split_seq(seq).0
            )));
        }
        commit.updates = commit
            .updates
            .into_iter()
            .map(|u| self.map.update_to_local(u))
            .collect();
        let messages = std::mem::take(&mut commit.writes.messages);
        for write in messages {
            let (d, local) = self.map.write_to_local(write);
            if d == database {
                commit.writes.messages.push(local);
            } else {
                commit.outbox.push(OutboxWrite {
                    database: d,
                    write: local,
                });
            }
        }
        commit.dead_letters = commit
            .dead_letters
            .into_iter()
            .map(|l| self.map.letter_to_local(l))
            .collect();
        commit.outcomes = commit
            .outcomes
            .into_iter()
            .map(|o| self.map.outcome_to_local(o))
            .collect();
        Ok((database, commit))
    }
}

#[async_trait]
impl InboxStore for Databases {
    async fn write(&self, batch: WriteBatch) -> Result<WriteReport, StorageError> {
        let mut report = WriteReport::default();
        for (d, part) in self.split(batch) {
            let written = self.db(d).write(part).await?;
            report.merge(self.map.report_to_global(d, written));
        }
        Ok(report)
    }

    async fn write_all_addressed(
        &self,
        batches: Vec<WriteBatch>,
        shard_count: u32,
    ) -> Result<Vec<WriteReport>, StorageError> {
        self.map.check_count(shard_count)?;
        let mut reports = vec![WriteReport::default(); batches.len()];
        // Per database: its parts of the batches, and which batch each part is of.
        let mut per_db: BTreeMap<u32, (Vec<WriteBatch>, Vec<usize>)> = BTreeMap::new();
        for (i, batch) in batches.into_iter().enumerate() {
            for (d, part) in self.split(batch) {
                let entry = per_db.entry(d).or_default();
                entry.0.push(part);
                entry.1.push(i);
            }
        }
        for (d, (parts, owners)) in per_db {
            let share = self.map.shard_count_of(d, shard_count);
            let written = match self.db(d).write_all_addressed(parts, share).await {
                Ok(written) => written,
                Err(e) => return Err(self.refusal(e, shard_count).await),
            };
            for (report, i) in written.into_iter().zip(owners) {
                reports[i].merge(self.map.report_to_global(d, report));
            }
        }
        Ok(reports)
    }

    async fn read_page(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Page, StorageError> {
        let d = self.map.database_of(shard);
        let mut page = self
            .db(d)
            .read_page(self.map.local(shard), now, limit)
            .await?;
        page.messages = page
            .messages
            .into_iter()
            .map(|m| self.map.row_to_global(d, m))
            .collect();
        Ok(page)
    }

    async fn commit_stage(&self, mut commit: StageCommit) -> Result<CommitReport, StorageError> {
        if !commit.catch_ups.is_empty() {
            self.around_catch_ups(&mut commit).await?;
        }
        let (d, local) = self.commit_to_local(commit)?;
        let relayed = !local.outbox.is_empty();
        let mut report = self
            .db(d)
            .commit_stage(local)
            .await
            .map_err(|e| self.global_error(d, e))?;
        if relayed {
            self.outbox_written.notify_one();
        }
        report.lease = self.map.lease_to_global(d, report.lease);
        report.written = self.map.report_to_global(d, report.written);
        Ok(report)
    }

    async fn outcome(
        &self,
        key: &DedupKey,
        now: DateTime<Utc>,
    ) -> Result<OutcomeLookup, StorageError> {
        // A command's row and record live in its target's database only.
        let d = self.database_of_target(&key.target_kind, &key.target_id);
        self.db(d).outcome(key, now).await
    }

    async fn next_due(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StorageError> {
        let d = self.map.database_of(shard);
        self.db(d).next_due(self.map.local(shard), now).await
    }

    async fn counts(&self, shard: Option<ShardIndex>) -> Result<InboxCounts, StorageError> {
        if let Some(shard) = shard {
            let d = self.map.database_of(shard);
            return self.db(d).counts(Some(self.map.local(shard))).await;
        }
        let mut total = InboxCounts::default();
        for c in self.each(|_, db| db.counts(None)).await? {
            total.to_deliver += c.to_deliver;
            total.delivered += c.delivered;
            total.to_catch_up += c.to_catch_up;
            total.blocked += c.blocked;
        }
        Ok(total)
    }

    async fn depths(&self, now: DateTime<Utc>) -> Result<Vec<ShardDepth>, StorageError> {
        let each = self.each(|_, db| db.depths(now)).await?;
        let mut all: Vec<ShardDepth> = each
            .into_iter()
            .enumerate()
            .flat_map(|(d, depths)| {
                depths
                    .into_iter()
                    .map(move |x| self.map.depth_to_global(d as u32, x))
            })
            .collect();
        all.sort_by_key(|x| x.shard);
        Ok(all)
    }

    async fn kind_depths(&self, now: DateTime<Utc>) -> Result<Vec<KindDepth>, StorageError> {
        let mut by_kind: BTreeMap<String, KindDepth> = BTreeMap::new();
        for depths in self.each(|_, db| db.kind_depths(now)).await? {
            for k in depths {
                match by_kind.get_mut(&k.kind) {
                    None => {
                        by_kind.insert(k.kind.clone(), k);
                    }
                    Some(sum) => {
                        sum.due += k.due;
                        sum.waiting += k.waiting;
                        sum.blocked += k.blocked;
                        sum.oldest_due_at = match (sum.oldest_due_at, k.oldest_due_at) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                }
            }
        }
        Ok(by_kind.into_values().collect())
    }

    async fn expired_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError> {
        let each = self.each(|_, db| db.expired_shards(now)).await?;
        Ok(self.all_shards(each))
    }

    async fn purge_due_shards(&self, now: DateTime<Utc>) -> Result<Vec<ShardIndex>, StorageError> {
        let each = self.each(|_, db| db.purge_due_shards(now)).await?;
        Ok(self.all_shards(each))
    }

    async fn read_expired(
        &self,
        shard: ShardIndex,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<InboxMessage>, StorageError> {
        let d = self.map.database_of(shard);
        let rows = self
            .db(d)
            .read_expired(self.map.local(shard), now, limit)
            .await?;
        Ok(rows
            .into_iter()
            .map(|m| self.map.row_to_global(d, m))
            .collect())
    }
}

impl Databases {
    /// Every database's shards (one list each, in database order) as sorted global shards.
    pub(super) fn all_shards(&self, each: Vec<Vec<ShardIndex>>) -> Vec<ShardIndex> {
        let mut all: Vec<ShardIndex> = each
            .into_iter()
            .enumerate()
            .flat_map(|(d, shards)| self.map.shards_to_global(d as u32, shards))
            .collect();
        all.sort_unstable();
        all
    }
}

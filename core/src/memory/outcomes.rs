//! The in-memory command outcomes: one record per command key, indexed per shard by when it
//! is forgotten, so that a purge costs O(purged).

use crate::model::ids::ShardIndex;
use crate::model::message::{DedupKey, MessageStatus};
use crate::model::outcome::{OutcomeLookup, OutcomeRecord};
use chrono::{DateTime, Utc};
use std::collections::{BTreeSet, HashMap};

/// The records and their purge index.
#[derive(Default)]
pub(super) struct Outcomes {
    records: HashMap<DedupKey, OutcomeRecord>,
    /// Per shard, by (keep_until, key).
    expiry: HashMap<ShardIndex, BTreeSet<(DateTime<Utc>, DedupKey)>>,
}

impl Outcomes {
    /// Stores `records`, each replacing an earlier one of its key.
    pub(super) fn record(&mut self, records: Vec<OutcomeRecord>) {
        for record in records {
            if let Some(old) = self.records.remove(&record.key) {
                if let Some(index) = self.expiry.get_mut(&old.shard) {
                    index.remove(&(old.keep_until, old.key));
                }
            }
            self.expiry
                .entry(record.shard)
                .or_default()
                .insert((record.keep_until, record.key.clone()));
            self.records.insert(record.key.clone(), record);
        }
    }

    /// Deletes up to `limit` records of `shard` forgotten at `now`.
    pub(super) fn purge(&mut self, shard: ShardIndex, now: DateTime<Utc>, limit: usize) {
        let Some(index) = self.expiry.get_mut(&shard) else {
            return;
        };
        for _ in 0..limit {
            match index.first() {
                Some((keep_until, _)) if *keep_until <= now => {}
                _ => break,
            }
            if let Some((_, key)) = index.pop_first() {
                self.records.remove(&key);
            }
        }
    }

    /// What is known of `key` at `now`, its row (if any) in `status`.
    pub(super) fn lookup(
        &self,
        key: &DedupKey,
        row: Option<MessageStatus>,
        now: DateTime<Utc>,
    ) -> OutcomeLookup {
        if matches!(
            row,
            Some(MessageStatus::ToDeliver | MessageStatus::ToCatchUp)
        ) {
            return OutcomeLookup::Pending;
        }
        match self.records.get(key) {
            Some(r) if r.keep_until > now => OutcomeLookup::Decided {
                outcome: r.outcome.clone(),
                decided_at: r.decided_at,
            },
            _ => OutcomeLookup::Unknown,
        }
    }
}

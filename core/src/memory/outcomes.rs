//! The in-memory command outcomes: one record per command key, indexed per shard by when it
//! is forgotten, so that a purge costs O(purged). A handled command's record names no events:
//! they are read back from the event store when asked (as the SQL storages do). A delivered
//! event copy is remembered the same way, apart (read-your-writes reads it, as the SQL
//! storages read its delivered row), and is no outcome record.

use crate::model::ids::ShardIndex;
use crate::model::ids::SignalId;
use crate::model::message::{DedupKey, MessageKind, MessageStatus};
use crate::model::outcome::{CommandOutcome, OutcomeLookup, OutcomeRecord};
use chrono::{DateTime, Utc};
use std::collections::{BTreeSet, HashMap};

/// The records and their purge index.
#[derive(Default)]
pub(super) struct Outcomes {
    records: HashMap<DedupKey, OutcomeRecord>,
    /// Delivered event copies, kept as long as their rows.
    copies: HashMap<DedupKey, OutcomeRecord>,
    /// Per shard, by (keep_until, key), of both.
    expiry: HashMap<ShardIndex, BTreeSet<(DateTime<Utc>, DedupKey)>>,
}

impl Outcomes {
    /// Stores `records`, each replacing an earlier one of its key.
    pub(super) fn record(&mut self, records: Vec<OutcomeRecord>) {
        for record in records {
            file(&mut self.records, &mut self.expiry, record);
        }
    }

    /// Records that the command or event copy `key` was handled at `at` (its row marked
    /// delivered, kept until `keep_until`).
    pub(super) fn handled(
        &mut self,
        key: DedupKey,
        kind: MessageKind,
        shard: ShardIndex,
        at: DateTime<Utc>,
        keep_until: DateTime<Utc>,
    ) {
        let record = OutcomeRecord {
            key,
            shard,
            outcome: CommandOutcome::Handled { events: Vec::new() },
            decided_at: at,
            keep_until,
        };
        let map = match kind {
            MessageKind::Command => &mut self.records,
            MessageKind::Event | MessageKind::CatchUp => &mut self.copies,
        };
        file(map, &mut self.expiry, record);
    }

    /// Decides `key` anew as `outcome` at `at`, if its record is still kept (its window
    /// unchanged): an operator's unblock.
    pub(super) fn decide_again(
        &mut self,
        key: &DedupKey,
        outcome: CommandOutcome,
        at: DateTime<Utc>,
    ) {
        if let Some(record) = self.records.get_mut(key) {
            record.outcome = outcome;
            record.decided_at = at;
        }
    }

    /// How many records are kept (inspection).
    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether a record of `shard` is forgotten at `now` (a purge has work).
    pub(super) fn purge_due(&self, shard: ShardIndex, now: DateTime<Utc>) -> bool {
        self.expiry
            .get(&shard)
            .and_then(|index| index.first())
            .is_some_and(|(keep_until, _)| *keep_until <= now)
    }

    /// The shards holding a record forgotten at `now`.
    pub(super) fn purge_due_shards(
        &self,
        now: DateTime<Utc>,
    ) -> impl Iterator<Item = ShardIndex> + '_ {
        self.expiry
            .keys()
            .copied()
            .filter(move |shard| self.purge_due(*shard, now))
    }

    /// Files every record under its target's shard by `route` (a re-sharding); returns how
    /// many moved.
    pub(super) fn reshard(&mut self, route: impl Fn(&str, &str) -> ShardIndex) -> u64 {
        let mut moved = 0;
        self.expiry.clear();
        for record in self.records.values_mut().chain(self.copies.values_mut()) {
            let to = route(&record.key.target_kind, &record.key.target_id);
            if record.shard != to {
                record.shard = to;
                moved += 1;
            }
            self.expiry
                .entry(to)
                .or_default()
                .insert((record.keep_until, record.key.clone()));
        }
        moved
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
                self.copies.remove(&key);
            }
        }
    }

    /// What is known of `key` at `now`, its row (if any) in `status`; a handled command's
    /// events are those of its emitted ids that `stored` finds.
    pub(super) fn lookup(
        &self,
        key: &DedupKey,
        row: Option<MessageStatus>,
        now: DateTime<Utc>,
        stored: impl Fn(&SignalId) -> bool,
    ) -> OutcomeLookup {
        if matches!(
            row,
            Some(MessageStatus::ToDeliver | MessageStatus::ToCatchUp)
        ) {
            return OutcomeLookup::Pending;
        }
        match self.records.get(key).or_else(|| self.copies.get(key)) {
            Some(r) if r.keep_until > now => OutcomeLookup::Decided {
                outcome: match &r.outcome {
                    CommandOutcome::Handled { .. } => CommandOutcome::Handled {
                        events: crate::model::outcome::handled_events(key, |ids| {
                            Ok::<_, std::convert::Infallible>(
                                ids.iter().filter(|id| stored(id)).count(),
                            )
                        })
                        .unwrap_or_else(|never| match never {}),
                    },
                    other => other.clone(),
                },
                decided_at: r.decided_at,
            },
            _ => OutcomeLookup::Unknown,
        }
    }
}

/// Stores `record` in `map`, replacing an earlier one of its key, and indexes it by when it is
/// forgotten.
fn file(
    map: &mut HashMap<DedupKey, OutcomeRecord>,
    expiry: &mut HashMap<ShardIndex, BTreeSet<(DateTime<Utc>, DedupKey)>>,
    record: OutcomeRecord,
) {
    if let Some(old) = map.remove(&record.key) {
        if let Some(index) = expiry.get_mut(&old.shard) {
            index.remove(&(old.keep_until, old.key));
        }
    }
    expiry
        .entry(record.shard)
        .or_default()
        .insert((record.keep_until, record.key.clone()));
    map.insert(record.key.clone(), record);
}

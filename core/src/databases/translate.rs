//! The global ↔ local forms of what crosses the [`super::Databases`] storage: shards, Inbox
//! seqs, event seqs and dead-letter ids (see [`DatabaseMap`]). Every value a database hands
//! back goes through `*_to_global`, every value given to it through `*_to_local`.

use super::map::DatabaseMap;
use crate::model::event::StoredEvent;
use crate::model::ids::ShardIndex;
use crate::model::message::{InboxMessage, InboxWrite};
use crate::model::outcome::OutcomeRecord;
use crate::storage::{
    BlockedTarget, DeadLetter, DeadLetterId, Lease, RowUpdate, ShardDepth, ShardSession,
    StoredDeadLetter, WriteReport,
};

impl DatabaseMap {
    /// The database and local lease of a global one.
    pub(super) fn lease_to_local(&self, lease: &Lease) -> (u32, Lease) {
        let mut local = lease.clone();
        local.shard = self.local(lease.shard);
        (self.database_of(lease.shard), local)
    }

    /// The global form of a lease of `database`.
    pub(super) fn lease_to_global(&self, database: u32, mut lease: Lease) -> Lease {
        lease.shard = self.global(database, lease.shard);
        lease
    }

    /// The global form of a row of `database`.
    pub(super) fn row_to_global(&self, database: u32, mut row: InboxMessage) -> InboxMessage {
        row.seq = self.global_seq(database, row.seq);
        row.shard = self.global(database, row.shard);
        row
    }

    /// The local form of a row (a dead letter's original carries one back to its database).
    pub(super) fn row_to_local(&self, mut row: InboxMessage) -> InboxMessage {
        row.seq = self.split_seq(row.seq).1;
        row.shard = self.local(row.shard);
        row
    }

    /// The database and local form of a row to write.
    pub(super) fn write_to_local(&self, mut write: InboxWrite) -> (u32, InboxWrite) {
        let database = self.database_of(write.shard);
        write.shard = self.local(write.shard);
        (database, write)
    }

    /// The local form of a row change (its row is in the stage's database).
    pub(super) fn update_to_local(&self, mut update: RowUpdate) -> RowUpdate {
        update.seq = self.split_seq(update.seq).1;
        update
    }

    /// The global shards of a list of `database`'s.
    pub(super) fn shards_to_global(
        &self,
        database: u32,
        shards: Vec<ShardIndex>,
    ) -> Vec<ShardIndex> {
        shards
            .into_iter()
            .map(|s| self.global(database, s))
            .collect()
    }

    /// The global form of a write report of `database`.
    pub(super) fn report_to_global(&self, database: u32, mut report: WriteReport) -> WriteReport {
        report.shards = self.shards_to_global(database, report.shards);
        report.shards.sort_unstable();
        report
    }

    /// The global form of a dead letter of `database`.
    pub(super) fn letter_to_global(&self, database: u32, mut letter: DeadLetter) -> DeadLetter {
        letter.original = self.row_to_global(database, letter.original);
        letter
    }

    /// The local form of a dead letter.
    pub(super) fn letter_to_local(&self, mut letter: DeadLetter) -> DeadLetter {
        letter.original = self.row_to_local(letter.original);
        letter
    }

    /// The global form of a stored dead letter of `database`.
    pub(super) fn stored_letter_to_global(
        &self,
        database: u32,
        stored: StoredDeadLetter,
    ) -> StoredDeadLetter {
        StoredDeadLetter {
            id: DeadLetterId(self.global_seq(database, stored.id.0)),
            letter: self.letter_to_global(database, stored.letter),
        }
    }

    /// The local form of an outcome record.
    pub(super) fn outcome_to_local(&self, mut record: OutcomeRecord) -> OutcomeRecord {
        record.shard = self.local(record.shard);
        record
    }

    /// The global form of an event of `database`.
    pub(super) fn event_to_global(&self, database: u32, mut event: StoredEvent) -> StoredEvent {
        event.seq = self.global_seq(database, event.seq);
        event
    }

    /// The global form of a blocked target of `database`.
    pub(super) fn blocked_to_global(&self, database: u32, mut b: BlockedTarget) -> BlockedTarget {
        b.shard = self.global(database, b.shard);
        b.seq = self.global_seq(database, b.seq);
        b
    }

    /// The global form of a lock-table row of `database`.
    pub(super) fn session_to_global(&self, database: u32, mut s: ShardSession) -> ShardSession {
        s.shard = self.global(database, s.shard);
        s
    }

    /// The global form of a shard's depth in `database`.
    pub(super) fn depth_to_global(&self, database: u32, mut d: ShardDepth) -> ShardDepth {
        d.shard = self.global(database, d.shard);
        d
    }
}

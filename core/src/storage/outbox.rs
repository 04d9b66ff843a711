//! [`OutboxStore`]: messages for another database, written by a stage into its own database's
//! outbox in its fenced commit, and copied into their database by a relay whose progress is
//! recorded there (the first brick of storages over several databases; see
//! docs/clustering.md, "Past one database").
//!
//! ```text
//!  source database                                   target database
//!  stage commit ─► outbox rows (ids in commit order)
//!  relay: relay_position(from) ◄──────────────────── recorded position P of source `from`
//!         outbox_page(to, after: P) ─► rows ─► relay_into(RelayCopy { from, after: P, rows })
//!                                                     one transaction: P still recorded? then
//!                                                     the rows written (deduplicated) and the
//!                                                     position moved to the last row's id;
//!                                                     else `Moved`, nothing written
//!         trim_outbox(to, up_to) ─► rows at or below the copied position deleted
//! ```
//!
//! The compare-and-set on the recorded position fences the relay the way an epoch fences a
//! stage: two relays of one source, or one that stalled and came back, never both copy a row,
//! and a copy that committed is never made again, whatever the Inbox's deduplication window
//! says. A row's id is taken in commit order (PostgreSQL appends outbox rows under the same
//! lock as events), so a relay that read past an id never finds an earlier one committed
//! later.

use crate::model::error::StorageError;
use crate::model::message::InboxWrite;
use crate::storage::write::WriteReport;
use async_trait::async_trait;

/// A message for a target in another database, as a stage's commit writes it into its own
/// database's outbox ([`super::StageCommit::outbox`]).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxWrite {
    /// The database the target lives in (its index in the storage's list of databases).
    pub database: u32,
    /// The row to write there, addressed to its shard.
    pub write: InboxWrite,
}

/// One row of an outbox, as a relay reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// Its id: increasing in the order the rows' commits took effect.
    pub id: i64,
    /// The database it is for.
    pub database: u32,
    /// The row to write there.
    pub write: InboxWrite,
}

/// What a relay copies into the target database in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayCopy {
    /// The source database (its index).
    pub from: u32,
    /// The position the relay read from the target ([`OutboxStore::relay_position`]) before
    /// it read the rows: the copy is made only if it is still the recorded one.
    pub after: i64,
    /// The rows, in id order, every id above `after`.
    pub rows: Vec<OutboxRow>,
}

/// What a copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayOutcome {
    /// The rows were written (duplicates of rows already in the Inbox ignored and counted)
    /// and the position moved to `position`, the last row's id.
    Copied {
        /// The recorded position now.
        position: i64,
        /// What the write of the rows did.
        written: WriteReport,
    },
    /// Another copy moved the position since the relay read it: nothing was written.
    Moved {
        /// The recorded position.
        recorded: i64,
    },
}

/// The outbox of a database, and the relay positions recorded in it as a target.
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Up to `limit` outbox rows for `database` with an id above `after`, in id order.
    async fn outbox_page(
        &self,
        database: u32,
        after: i64,
        limit: usize,
    ) -> Result<Vec<OutboxRow>, StorageError>;

    /// Deletes the outbox rows for `database` with an id at or below `up_to`; returns how many.
    async fn trim_outbox(&self, database: u32, up_to: i64) -> Result<usize, StorageError>;

    /// The position recorded for relays from database `from`: the id of the last row copied
    /// (0 before the first copy).
    async fn relay_position(&self, from: u32) -> Result<i64, StorageError>;

    /// Writes `copy`'s rows into this database's Inbox (deduplicated as any write) and records
    /// the last row's id as `copy.from`'s position, in one transaction — if `copy.after` is
    /// still the recorded position; else writes nothing and says [`RelayOutcome::Moved`].
    /// Rows out of id order, or at or below `after`, are refused with
    /// [`StorageError::Corrupt`], writing nothing. No rows: nothing written, the position
    /// unchanged.
    async fn relay_into(&self, copy: RelayCopy) -> Result<RelayOutcome, StorageError>;
}

impl RelayCopy {
    /// The id of the last row: the position a copy records. An error if the rows are not in
    /// increasing id order above `after` (what every backend checks before writing).
    pub fn checked_end(&self) -> Result<Option<i64>, StorageError> {
        let mut last = self.after;
        for row in &self.rows {
            if row.id <= last {
                return Err(StorageError::Corrupt(format!(
                    "relay copy from database {}: row id {} is not above {last} (rows must be in \
                     increasing id order above the position {})",
                    self.from, row.id, self.after
                )));
            }
            last = row.id;
        }
        Ok(self.rows.last().map(|r| r.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::{ShardIndex, SignalId};
    use crate::model::message::{MessageKind, NewMessage};

    fn row(id: i64) -> OutboxRow {
        OutboxRow {
            id,
            database: 1,
            write: InboxWrite {
                shard: ShardIndex(0),
                message: NewMessage {
                    signal_id: SignalId(format!("s{id}")),
                    kind: MessageKind::Command,
                    target_kind: "k".into(),
                    target_id: "t".into(),
                    tenant: String::new(),
                    payload: Vec::new(),
                    payload_type: "p".into(),
                    payload_version: 1,
                    metadata: Default::default(),
                    received_at: chrono::DateTime::UNIX_EPOCH,
                    deliver_after: None,
                    expires_at: None,
                },
            },
        }
    }

    fn copy(after: i64, ids: &[i64]) -> RelayCopy {
        RelayCopy {
            from: 0,
            after,
            rows: ids.iter().map(|&id| row(id)).collect(),
        }
    }

    #[test]
    fn a_copy_ends_at_its_last_row_and_needs_increasing_ids_above_its_position() {
        assert_eq!(copy(3, &[4, 7, 9]).checked_end().unwrap(), Some(9));
        assert_eq!(copy(3, &[]).checked_end().unwrap(), None);
        assert!(copy(3, &[3]).checked_end().is_err(), "at the position");
        assert!(copy(3, &[5, 4]).checked_end().is_err(), "out of order");
        assert!(copy(3, &[5, 5]).checked_end().is_err(), "twice");
    }
}

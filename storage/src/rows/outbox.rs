//! Rows of the outbox: a message for another database, stored as its JSON envelope (every
//! field but the payload) and its payload's bytes.

use super::shard;
use crate::error::Failure;
use crate::schema::shardbox_outbox;
use diesel::prelude::*;
use shardbox_core::storage::{OutboxRow, OutboxWrite};
use shardbox_core::InboxWrite;

/// An outbox row to insert (`id` is given by the database).
#[derive(Debug, Insertable, Queryable, Selectable)]
#[diesel(table_name = shardbox_outbox)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct NewOutboxRow {
    pub to_database: i32,
    pub shard: i32,
    pub envelope: String,
    pub payload: Vec<u8>,
}

impl NewOutboxRow {
    /// The row of `write`; an error for a database or shard number past `i32`.
    pub(crate) fn from_write(write: OutboxWrite) -> Result<Self, Failure> {
        let OutboxWrite { database, write } = write;
        let InboxWrite { shard, mut message } = write;
        let payload = std::mem::take(&mut message.payload);
        let envelope = serde_json::to_string(&message)
            .map_err(|e| Failure::corrupt(format!("an outbox message as JSON: {e}")))?;
        Ok(NewOutboxRow {
            to_database: i32::try_from(database).map_err(|_| {
                Failure::corrupt(format!("database number {database} is past 2^31"))
            })?,
            shard: shard.as_i32(),
            envelope,
            payload,
        })
    }
}

/// An outbox row as read.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = shardbox_outbox)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct StoredOutboxRow {
    pub id: i64,
    #[diesel(embed)]
    pub row: NewOutboxRow,
}

impl StoredOutboxRow {
    /// The row as core sees it.
    pub(crate) fn into_row(self) -> Result<OutboxRow, Failure> {
        let NewOutboxRow {
            to_database,
            shard: stored_shard,
            envelope,
            payload,
        } = self.row;
        let mut message: shardbox_core::NewMessage = serde_json::from_str(&envelope)
            .map_err(|e| Failure::corrupt(format!("outbox row {}: {e}", self.id)))?;
        message.payload = payload;
        Ok(OutboxRow {
            id: self.id,
            database: u32::try_from(to_database).map_err(|_| {
                Failure::corrupt(format!("outbox row {}: database {to_database}", self.id))
            })?,
            write: InboxWrite {
                shard: shard(stored_shard)?,
                message,
            },
        })
    }
}

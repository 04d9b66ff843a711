//! Inbox rows and dead letters: the two tables that hold a whole message.

use super::{
    attempts, attempts_column, error_history, metadata, metadata_json, micros, opt_micros,
    opt_time, parsed, shard, time, version, version_column,
};
use crate::error::Failure;
use crate::schema::{dead_letters, inbox_messages};
use diesel::prelude::*;
use shardbox_core::storage::{DeadLetter, DeadLetterId, StoredDeadLetter};
use shardbox_core::InboxWrite;
use shardbox_core::{InboxMessage, MessageKind, MessageStatus, NewMessage, SignalId};

/// An inbox row as read.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = inbox_messages)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct InboxRow {
    pub seq: i64,
    pub shard: i32,
    pub signal_id: String,
    pub target_kind: String,
    pub target_id: String,
    pub tenant: String,
    pub kind: String,
    pub status: String,
    pub received_at: i64,
    pub deliver_after: Option<i64>,
    pub expires_at: Option<i64>,
    pub keep_until: Option<i64>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub payload: Vec<u8>,
    pub payload_type: String,
    pub metadata: String,
    pub first_failed_at: Option<i64>,
    /// When it was delivered (see `schema::inbox_messages::delivered_at`). Read because a
    /// page query returns the table's row type; core's messages do not carry it (the outcome
    /// read selects it by itself).
    #[expect(
        dead_code,
        reason = "part of the table's row type, which page reads return"
    )]
    pub delivered_at: Option<i64>,
    pub payload_version: i32,
    pub error_history: Option<String>,
}

impl InboxRow {
    /// The row as core sees it.
    pub(crate) fn into_message(self) -> Result<InboxMessage, Failure> {
        Ok(InboxMessage {
            seq: self.seq,
            shard: shard(self.shard)?,
            status: parsed("message status", &self.status, MessageStatus::parse)?,
            attempts: attempts(self.attempts)?,
            last_error: self.last_error,
            first_failed_at: opt_time(self.first_failed_at)?,
            errors: error_history(self.error_history.as_deref())?,
            keep_until: opt_time(self.keep_until)?,
            message: NewMessage {
                signal_id: SignalId(self.signal_id),
                kind: parsed("message kind", &self.kind, MessageKind::parse)?,
                target_kind: self.target_kind,
                target_id: self.target_id,
                tenant: self.tenant,
                payload: self.payload,
                payload_type: self.payload_type,
                payload_version: version(self.payload_version)?,
                metadata: metadata(&self.metadata)?,
                received_at: time(self.received_at)?,
                deliver_after: opt_time(self.deliver_after)?,
                expires_at: opt_time(self.expires_at)?,
            },
        })
    }
}

/// An inbox row to insert: a message not yet delivered nor failed, so `keep_until`,
/// `attempts`, `last_error` and `first_failed_at` take their column defaults (`seq` is drawn
/// by PostgreSQL's identity, by SQLite's writer from `inbox_sequence`).
#[derive(Debug, Insertable)]
#[diesel(table_name = inbox_messages)]
#[diesel(treat_none_as_default_value = false)]
pub(crate) struct NewInboxRow {
    pub shard: i32,
    pub signal_id: String,
    pub target_kind: String,
    pub target_id: String,
    pub tenant: String,
    pub kind: String,
    pub status: String,
    pub received_at: i64,
    pub deliver_after: Option<i64>,
    pub expires_at: Option<i64>,
    pub payload: Vec<u8>,
    pub payload_type: String,
    pub metadata: String,
    pub payload_version: i32,
}

impl NewInboxRow {
    /// A fresh row: `to_catch_up` for replayed history, `to_deliver` otherwise.
    pub(crate) fn from_write(w: InboxWrite) -> Result<Self, Failure> {
        let m = w.message;
        let status = m.fresh_status();
        Ok(NewInboxRow {
            shard: w.shard.as_i32(),
            metadata: metadata_json(&m.metadata)?,
            signal_id: m.signal_id.0,
            target_kind: m.target_kind,
            target_id: m.target_id,
            tenant: m.tenant,
            kind: m.kind.as_str().to_owned(),
            status: status.as_str().to_owned(),
            received_at: micros(m.received_at),
            deliver_after: opt_micros(m.deliver_after),
            expires_at: opt_micros(m.expires_at),
            payload: m.payload,
            payload_type: m.payload_type,
            payload_version: version_column(m.payload_version)?,
        })
    }
}

/// A dead letter as read, with its id.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = dead_letters)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct StoredDeadLetterRow {
    pub id: i64,
    #[diesel(embed)]
    pub row: DeadLetterRow,
}

impl StoredDeadLetterRow {
    /// The stored dead letter as core sees it.
    pub(crate) fn into_stored(self) -> Result<StoredDeadLetter, Failure> {
        Ok(StoredDeadLetter {
            id: DeadLetterId(self.id),
            letter: self.row.into_dead_letter()?,
        })
    }
}

/// A dead letter with its whole original message (all columns but `id`).
#[derive(Debug, Insertable, Queryable, Selectable)]
#[diesel(table_name = dead_letters)]
#[diesel(treat_none_as_default_value = false)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct DeadLetterRow {
    pub original_seq: i64,
    pub shard: i32,
    pub tenant: String,
    pub target_kind: String,
    pub target_id: String,
    pub signal_id: String,
    pub kind: String,
    pub status: String,
    pub received_at: i64,
    pub deliver_after: Option<i64>,
    pub expires_at: Option<i64>,
    pub keep_until: Option<i64>,
    pub row_attempts: i32,
    pub row_last_error: Option<String>,
    pub attempts: i32,
    pub reason: String,
    pub first_attempt_at: Option<i64>,
    pub last_attempt_at: i64,
    pub payload: Vec<u8>,
    pub payload_type: String,
    pub metadata: String,
    pub row_first_failed_at: Option<i64>,
    pub payload_version: i32,
    pub row_error_history: Option<String>,
}

impl DeadLetterRow {
    /// The dead letter as core sees it.
    pub(crate) fn into_dead_letter(self) -> Result<DeadLetter, Failure> {
        let r = self;
        // The original row, parsed as an inbox row is.
        let original = InboxRow {
            seq: r.original_seq,
            shard: r.shard,
            signal_id: r.signal_id,
            target_kind: r.target_kind,
            target_id: r.target_id,
            tenant: r.tenant,
            kind: r.kind,
            status: r.status,
            received_at: r.received_at,
            deliver_after: r.deliver_after,
            expires_at: r.expires_at,
            keep_until: r.keep_until,
            attempts: r.row_attempts,
            last_error: r.row_last_error,
            payload: r.payload,
            payload_type: r.payload_type,
            metadata: r.metadata,
            first_failed_at: r.row_first_failed_at,
            delivered_at: None,
            payload_version: r.payload_version,
            error_history: r.row_error_history,
        }
        .into_message()?;
        Ok(DeadLetter {
            original,
            reason: r.reason,
            attempts: attempts(r.attempts)?,
            first_attempt_at: opt_time(r.first_attempt_at)?,
            last_attempt_at: time(r.last_attempt_at)?,
        })
    }

    /// The row for a dead letter, with its whole original message.
    pub(crate) fn from_dead_letter(d: DeadLetter) -> Result<Self, Failure> {
        let o = d.original;
        let m = o.message;
        Ok(DeadLetterRow {
            original_seq: o.seq,
            shard: o.shard.as_i32(),
            metadata: metadata_json(&m.metadata)?,
            tenant: m.tenant,
            target_kind: m.target_kind,
            target_id: m.target_id,
            signal_id: m.signal_id.0,
            kind: m.kind.as_str().to_owned(),
            status: o.status.as_str().to_owned(),
            received_at: micros(m.received_at),
            deliver_after: opt_micros(m.deliver_after),
            expires_at: opt_micros(m.expires_at),
            keep_until: opt_micros(o.keep_until),
            row_attempts: attempts_column(o.attempts),
            row_first_failed_at: opt_micros(o.first_failed_at),
            row_last_error: o.last_error,
            row_error_history: o.errors.to_stored(),
            attempts: attempts_column(d.attempts),
            reason: d.reason,
            first_attempt_at: opt_micros(d.first_attempt_at),
            last_attempt_at: micros(d.last_attempt_at),
            payload: m.payload,
            payload_type: m.payload_type,
            payload_version: version_column(m.payload_version)?,
        })
    }
}

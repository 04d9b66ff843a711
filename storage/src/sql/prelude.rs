//! Names the unit-of-work macros use, imported once into each backend's `units` module.

pub(crate) use crate::error::Failure;
pub(crate) use crate::rows::{
    self, micros, CatchUpRow, DeadLetterRow, EventRow, InboxRow, NewCatchUpRow, NewEntityStateRow,
    NewEventRow, NewInboxRow, SessionRow, StoredDeadLetterRow,
};
pub(crate) use crate::schema::{catch_ups, dead_letters, events, inbox_messages, shard_sessions};
pub(crate) use crate::sql::page_read::{PagePart, PageRead};
pub(crate) use crate::sql::predicate::{
    BLOCKED, CATCHING_UP, DELAYED, EXPIRING, IMMEDIATE, NOT_DELIVERED,
};
pub(crate) use crate::sql::prepared::SetLease;
pub(crate) use crate::sql::{Dialect, INSERT_CHUNK, IN_CHUNK};
pub(crate) use chrono::{DateTime, Utc};
pub(crate) use diesel::dsl::sql;
pub(crate) use diesel::prelude::*;
pub(crate) use diesel::sql_types::{BigInt, Bool};
pub(crate) use shardbox_core::storage::{
    CatchUpJob, CatchUpStatus, CommitReport, DeadLetter, EntityKey, EntityState, EntityStateWrite,
    InboxCounts, Lease, NewCatchUp, Page, RowUpdate, ShardSession, StageCommit, WriteBatch,
    WriteReport,
};
pub(crate) use shardbox_core::{
    InboxMessage, LeaseEpoch, MessageStatus, NodeId, ShardIndex, StorageError, StoredEvent,
    WorkerId,
};
pub(crate) use std::collections::BTreeMap;

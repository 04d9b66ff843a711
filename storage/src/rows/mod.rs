//! Rows as diesel reads and writes them, and their mapping to and from shardbox-core types.
//!
//! ```text
//!  core type ──from_*──► New…Row (Insertable)      …Row (Queryable) ──into_*──► core type
//! ```
//!
//! Written once for both backends: the row structs are checked against SQLite and PostgreSQL.
//! Conversions that can fail on stored data (a negative shard, an unknown status, a time out
//! of range, bad JSON) return [`Failure`] with a `Corrupt` error instead of panicking.

mod inbox;
mod outbox;
mod records;

pub(crate) use inbox::{DeadLetterRow, InboxRow, NewInboxRow, StoredDeadLetterRow};
pub(crate) use outbox::{NewOutboxRow, StoredOutboxRow};
pub(crate) use records::{
    CatchUpRow, EntityStateRow, EventRow, NewCatchUpRow, NewEntityStateRow, NewEventRow, SessionRow,
};

use crate::error::Failure;
use chrono::{DateTime, Utc};
use shardbox_core::Metadata;
use shardbox_core::ShardIndex;

/// The rows of messages to insert, in their order.
pub(crate) fn inbox_rows(
    messages: Vec<shardbox_core::InboxWrite>,
) -> Result<Vec<NewInboxRow>, Failure> {
    messages.into_iter().map(NewInboxRow::from_write).collect()
}

/// The outbox rows of messages for other databases, in their order.
pub(crate) fn outbox_rows(
    writes: Vec<shardbox_core::storage::OutboxWrite>,
) -> Result<Vec<NewOutboxRow>, Failure> {
    writes.into_iter().map(NewOutboxRow::from_write).collect()
}

/// The rows of events to append, in their order.
pub(crate) fn event_rows(
    events: Vec<shardbox_core::NewEvent>,
) -> Result<Vec<NewEventRow>, Failure> {
    events.into_iter().map(NewEventRow::from_event).collect()
}

/// Microseconds since the Unix epoch: how every time is stored.
///
/// Nanoseconds are truncated, on both backends alike, so a time read back may be up to a
/// microsecond earlier than the one written.
pub(crate) fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// [`micros`] of an optional time.
pub(crate) fn opt_micros(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(micros)
}

/// A stored time.
pub(crate) fn time(us: i64) -> Result<DateTime<Utc>, Failure> {
    DateTime::from_timestamp_micros(us)
        .ok_or_else(|| Failure::corrupt(format!("time {us} µs since the epoch is out of range")))
}

/// A stored error history (NULL: none).
pub(crate) fn error_history(stored: Option<&str>) -> Result<shardbox_core::ErrorHistory, Failure> {
    shardbox_core::ErrorHistory::from_stored(stored).map_err(Failure::corrupt)
}

/// A stored optional time.
pub(crate) fn opt_time(us: Option<i64>) -> Result<Option<DateTime<Utc>>, Failure> {
    us.map(time).transpose()
}

/// A stored shard number.
pub(crate) fn shard(n: i32) -> Result<ShardIndex, Failure> {
    u32::try_from(n)
        .map(ShardIndex)
        .map_err(|_| Failure::corrupt(format!("shard number {n} is negative")))
}

/// An attempt counter as stored (saturating: 2^31 failed attempts are as good as infinite).
pub(crate) fn attempts_column(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A stored attempt counter.
pub(crate) fn attempts(n: i32) -> Result<u32, Failure> {
    u32::try_from(n).map_err(|_| Failure::corrupt(format!("attempt count {n} is negative")))
}

/// A payload version as stored (see `Message::VERSION`): one past `i32::MAX` cannot be.
pub(crate) fn version_column(v: u32) -> Result<i32, Failure> {
    i32::try_from(v).map_err(|_| {
        Failure::corrupt(format!(
            "payload version {v} is out of range (at most {})",
            i32::MAX
        ))
    })
}

/// A stored payload version (1 and up).
pub(crate) fn version(v: i32) -> Result<u32, Failure> {
    u32::try_from(v)
        .ok()
        .filter(|&v| v >= shardbox_core::FIRST_VERSION)
        .ok_or_else(|| Failure::corrupt(format!("payload version {v} is below 1")))
}

/// Metadata as stored: a JSON object.
pub(crate) fn metadata_json(m: &Metadata) -> Result<String, Failure> {
    serde_json::to_string(m).map_err(|e| Failure::corrupt(format!("metadata: {e}")))
}

/// Stored metadata.
pub(crate) fn metadata(json: &str) -> Result<Metadata, Failure> {
    serde_json::from_str(json).map_err(|e| Failure::corrupt(format!("metadata {json:?}: {e}")))
}

/// A stored name that must parse (kind, status).
pub(crate) fn parsed<T>(
    what: &str,
    stored: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, Failure> {
    parse(stored).ok_or_else(|| Failure::corrupt(format!("unknown {what} {stored:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_at_microsecond_precision() {
        let t = DateTime::from_timestamp(1_700_000_000, 123_456_789).unwrap_or_default();
        let back = time(micros(t)).unwrap_or_default();
        assert_eq!(back.timestamp_subsec_nanos(), 123_456_000);
        assert_eq!(back.timestamp(), 1_700_000_000);
        assert!(time(i64::MAX).is_err());
    }

    #[test]
    fn counters_and_shards_refuse_negative_values() {
        assert!(shard(-1).is_err());
        assert_eq!(shard(7).ok(), Some(ShardIndex(7)));
        assert!(attempts(-3).is_err());
        assert_eq!(attempts_column(u32::MAX), i32::MAX);
        assert!(version(0).is_err() && version(-1).is_err());
        assert_eq!(version(3).ok(), Some(3));
        assert!(version_column(u32::MAX).is_err());
        assert_eq!(version_column(2).ok(), Some(2));
    }

    #[test]
    fn metadata_round_trips_and_bad_json_is_corrupt() {
        let mut m = Metadata::new();
        m.insert("trace".into(), "a\"b".into());
        let json = metadata_json(&m).unwrap_or_default();
        assert_eq!(metadata(&json).ok(), Some(m));
        assert!(metadata("[1]").is_err());
    }
}

//! The parked time: the `deliver_after` of a row that waits for an event rather than a time —
//! the live rows of a target under catch-up (released when the job completes) and the rows
//! behind a blocked message (released by the unblock). One value for both, so every reader
//! has one rule: a parked row is never due by itself and never a shard's next due time.

use chrono::{DateTime, Utc};

/// The `deliver_after` of a parked row: a live event row of a target under catch-up that the
/// replay had not reached when a stage read it. No page reads it, no due-time timer waits for
/// it, and the job's completion (committed with the stage that completes it) removes the
/// parked rows whose event the replay applied and makes the others due at once, in their
/// `seq` order. Parking instead of holding for a while keeps the cost of a backlog of live
/// rows at two writes per row, however long the replay runs.
///
/// Rows waiting behind a blocked message of their target are parked the same way (see
/// `RowChange::BehindBlock`) and made due by the unblock. Either release
/// makes a row due; a stage that reads it then parks it again if it still has to wait for
/// the other (a target both blocked and under catch-up). Sharing the value keeps one rule
/// for every reader: a parked row is never due by itself, never a shard's next due time.
///
/// 9999-12-31T23:59:59Z; a message scheduled for exactly that instant would be taken for a
/// parked one.
pub fn parked_until() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Whether a row due at `deliver_after` is parked (by a catch-up or behind a block).
pub fn is_parked(deliver_after: Option<DateTime<Utc>>) -> bool {
    deliver_after == Some(parked_until())
}

//! The event store's SQL: pages by `seq`, filtered by type and time.
//!
//! Appends are in [`crate::sql::inbox`] (`append_events`), because an event is always written
//! with its fan-out in one transaction.

use crate::sql::prelude::*;
use crate::sql::run::{columns_of, RunSql};

/// `EventStore::read_events`.
pub(crate) fn read_events<C: Dialect>(
    conn: &mut C,
    after_seq: i64,
    event_types: Vec<String>,
    since: Option<DateTime<Utc>>,
    limit: usize,
) -> Result<Vec<StoredEvent>, Failure> {
    use crate::schema::events::dsl as ev;
    ev::events
        .filter(ev::seq.gt(after_seq))
        .filter(of_types(event_types))
        .filter(Maybe(since.map(|since| ev::occurred_at.ge(micros(since)))))
        .select(columns_of::<EventRow>())
        .order(ev::seq.asc())
        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
        .load(conn)?
        .into_iter()
        .map(EventRow::into_event)
        .collect()
}

/// Events of `event_types`, or of every type if none is given.
fn of_types(
    event_types: Vec<String>,
) -> Maybe<diesel::dsl::EqAny<crate::schema::events::event_type, Vec<String>>> {
    Maybe((!event_types.is_empty()).then(|| events::event_type.eq_any(event_types)))
}

/// `EventStore::read_source_events`: forward from `after_seq` along the primary key,
/// filtered (no index of its own: a read for debugging and tests must not make every
/// append pay for one).
pub(crate) fn read_source_events<C: Dialect>(
    conn: &mut C,
    tenant: String,
    source: shardbox_core::EventSource,
    after_seq: i64,
    limit: usize,
) -> Result<Vec<StoredEvent>, Failure> {
    use crate::schema::events::dsl as ev;
    ev::events
        .filter(ev::tenant.eq(tenant))
        .filter(ev::source_kind.eq(source.kind))
        .filter(ev::source_id.eq(source.id))
        .filter(ev::seq.gt(after_seq))
        .select(columns_of::<EventRow>())
        .order(ev::seq.asc())
        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
        .load(conn)?
        .into_iter()
        .map(EventRow::into_event)
        .collect()
}

/// `EventStore::event_seqs` (by the unique index on `id`).
pub(crate) fn event_seqs<C: Dialect>(
    conn: &mut C,
    ids: Vec<shardbox_core::SignalId>,
) -> Result<Vec<(shardbox_core::SignalId, i64)>, Failure> {
    use crate::schema::events::dsl as ev;
    let mut found = Vec::with_capacity(ids.len());
    let ids: Vec<String> = ids.into_iter().map(|id| id.0).collect();
    for chunk in ids.chunks(INSERT_CHUNK) {
        let rows: Vec<(String, i64)> = ev::events
            .filter(ev::id.eq_any(chunk))
            .select((ev::id, ev::seq))
            .load(conn)?;
        found.extend(
            rows.into_iter()
                .map(|(id, seq)| (shardbox_core::SignalId(id), seq)),
        );
    }
    Ok(found)
}

/// `EventStore::count_events`.
pub(crate) fn count_events<C: Dialect>(
    conn: &mut C,
    event_types: Vec<String>,
    since: Option<DateTime<Utc>>,
) -> Result<i64, Failure> {
    use crate::schema::events::dsl as ev;
    Ok(ev::events
        .filter(of_types(event_types))
        .filter(Maybe(since.map(|since| ev::occurred_at.ge(micros(since)))))
        .count()
        .get_result(conn)?)
}

/// `EventStore::last_event_seq`.
pub(crate) fn last_event_seq<C: Dialect>(conn: &mut C) -> Result<i64, Failure> {
    let last: Option<i64> = events::table
        .select(diesel::dsl::max(events::seq))
        .first(conn)?;
    Ok(last.unwrap_or(0))
}

//! The event store's SQL: pages by `seq`, filtered by type and time.
//!
//! Appends are in [`crate::sql::inbox`] (`append_events`), because an event is always written
//! with its fan-out in one transaction.

/// Stamps the event-store units; see [`crate::sql`].
macro_rules! event_units {
    () => {
        /// `EventStore::read_events`.
        pub(crate) fn read_events(
            conn: &mut Conn,
            after_seq: i64,
            event_types: Vec<String>,
            since: Option<DateTime<Utc>>,
            limit: usize,
        ) -> Result<Vec<StoredEvent>, Failure> {
            use $crate::schema::events::dsl as ev;
            let mut query = ev::events
                .filter(ev::seq.gt(after_seq))
                .select(EventRow::as_select())
                .order(ev::seq.asc())
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .into_boxed();
            if !event_types.is_empty() {
                query = query.filter(ev::event_type.eq_any(event_types));
            }
            if let Some(since) = since {
                query = query.filter(ev::occurred_at.ge(micros(since)));
            }
            query
                .load(conn)?
                .into_iter()
                .map(EventRow::into_event)
                .collect()
        }

        /// `EventStore::last_event_seq`.
        pub(crate) fn last_event_seq(conn: &mut Conn) -> Result<i64, Failure> {
            let last: Option<i64> = events::table
                .select(diesel::dsl::max(events::seq))
                .first(conn)?;
            Ok(last.unwrap_or(0))
        }
    };
}
pub(crate) use event_units;

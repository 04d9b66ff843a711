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

        /// `EventStore::read_source_events`: forward from `after_seq` along the primary key,
        /// filtered (no index of its own: a read for debugging and tests must not make every
        /// append pay for one).
        pub(crate) fn read_source_events(
            conn: &mut Conn,
            tenant: String,
            source: shardbox_core::EventSource,
            after_seq: i64,
            limit: usize,
        ) -> Result<Vec<StoredEvent>, Failure> {
            use $crate::schema::events::dsl as ev;
            ev::events
                .filter(ev::tenant.eq(tenant))
                .filter(ev::source_kind.eq(source.kind))
                .filter(ev::source_id.eq(source.id))
                .filter(ev::seq.gt(after_seq))
                .select(EventRow::as_select())
                .order(ev::seq.asc())
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .load(conn)?
                .into_iter()
                .map(EventRow::into_event)
                .collect()
        }

        /// `EventStore::event_seqs` (by the unique index on `id`).
        pub(crate) fn event_seqs(
            conn: &mut Conn,
            ids: Vec<shardbox_core::SignalId>,
        ) -> Result<Vec<(shardbox_core::SignalId, i64)>, Failure> {
            use $crate::schema::events::dsl as ev;
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
        pub(crate) fn count_events(
            conn: &mut Conn,
            event_types: Vec<String>,
            since: Option<DateTime<Utc>>,
        ) -> Result<i64, Failure> {
            use $crate::schema::events::dsl as ev;
            let mut query = ev::events.count().into_boxed();
            if !event_types.is_empty() {
                query = query.filter(ev::event_type.eq_any(event_types));
            }
            if let Some(since) = since {
                query = query.filter(ev::occurred_at.ge(micros(since)));
            }
            Ok(query.get_result(conn)?)
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

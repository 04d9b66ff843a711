//! The outbox of messages for other databases, and the relay's fenced copy into this one
//! (`OutboxStore`): rows read and trimmed by id, and a copy that moves the recorded position
//! by compare-and-set in the same transaction as the rows it writes.

/// Stamps these units; see [`crate::sql`].
macro_rules! outbox_units {
    () => {
        /// Inserts a stage commit's outbox rows, under the append lock (see
        /// `Dialect::lock_appends`), so that their ids follow commit order.
        pub(crate) fn insert_outbox(
            conn: &mut Conn,
            rows: &[rows::NewOutboxRow],
        ) -> Result<(), Failure> {
            use $crate::schema::shardbox_outbox::dsl as ob;
            if rows.is_empty() {
                return Ok(());
            }
            <Conn as Dialect>::lock_appends(conn)?;
            for chunk in rows.chunks(INSERT_CHUNK) {
                diesel::insert_into(ob::shardbox_outbox)
                    .values(chunk)
                    .execute(conn)?;
            }
            Ok(())
        }

        /// `OutboxStore::outbox_page`.
        pub(crate) fn outbox_page(
            conn: &mut Conn,
            database: u32,
            after: i64,
            limit: usize,
        ) -> Result<Vec<shardbox_core::storage::OutboxRow>, Failure> {
            use $crate::schema::shardbox_outbox::dsl as ob;
            let Ok(database) = i32::try_from(database) else {
                return Ok(Vec::new());
            };
            ob::shardbox_outbox
                .filter(ob::to_database.eq(database))
                .filter(ob::id.gt(after))
                .order(ob::id.asc())
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(rows::StoredOutboxRow::as_select())
                .load(conn)?
                .into_iter()
                .map(rows::StoredOutboxRow::into_row)
                .collect()
        }

        /// `OutboxStore::trim_outbox`.
        pub(crate) fn trim_outbox(
            conn: &mut Conn,
            database: u32,
            up_to: i64,
        ) -> Result<usize, Failure> {
            use $crate::schema::shardbox_outbox::dsl as ob;
            let Ok(database) = i32::try_from(database) else {
                return Ok(0);
            };
            <Conn as Dialect>::write_statement(conn, |conn| {
                Ok(diesel::delete(
                    ob::shardbox_outbox
                        .filter(ob::to_database.eq(database))
                        .filter(ob::id.le(up_to)),
                )
                .execute(conn)?)
            })
        }

        /// `OutboxStore::relay_position`.
        pub(crate) fn relay_position(conn: &mut Conn, from: u32) -> Result<i64, Failure> {
            use $crate::schema::shardbox_relay_positions::dsl as rp;
            let Ok(from) = i32::try_from(from) else {
                return Ok(0);
            };
            Ok(rp::shardbox_relay_positions
                .find(from)
                .select(rp::position)
                .first(conn)
                .optional()?
                .unwrap_or(0))
        }

        /// `OutboxStore::relay_into`: the position moved from `copy.after` to the last row's
        /// id by compare-and-set (an update of the row, or its insert for a first copy), then
        /// the rows written, in one write transaction; a position that moved meanwhile
        /// writes nothing.
        pub(crate) fn relay_into(
            conn: &mut Conn,
            copy: shardbox_core::storage::RelayCopy,
        ) -> Result<shardbox_core::storage::RelayOutcome, Failure> {
            use shardbox_core::storage::RelayOutcome;
            use $crate::schema::shardbox_relay_positions::dsl as rp;
            let end = copy.checked_end().map_err(Failure::Storage)?;
            let from = i32::try_from(copy.from).map_err(|_| {
                Failure::corrupt(format!("database number {} is past 2^31", copy.from))
            })?;
            let Some(end) = end else {
                let recorded = relay_position(conn, copy.from)?;
                return Ok(if recorded == copy.after {
                    RelayOutcome::Copied {
                        position: recorded,
                        written: WriteReport::default(),
                    }
                } else {
                    RelayOutcome::Moved { recorded }
                });
            };
            // Made before the transaction (a write transaction holds SQLite's write lock).
            let messages = rows::inbox_rows(copy.rows.into_iter().map(|r| r.write).collect())?;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                let moved = diesel::update(
                    rp::shardbox_relay_positions
                        .filter(rp::from_database.eq(from))
                        .filter(rp::position.eq(copy.after)),
                )
                .set(rp::position.eq(end))
                .execute(conn)?;
                let claimed = moved == 1
                    || (copy.after == 0
                        && diesel::insert_into(rp::shardbox_relay_positions)
                            .values((rp::from_database.eq(from), rp::position.eq(end)))
                            .on_conflict_do_nothing()
                            .execute(conn)?
                            == 1);
                if !claimed {
                    let recorded = relay_position(conn, copy.from)?;
                    return Ok(RelayOutcome::Moved { recorded });
                }
                let mut written = WriteReport::default();
                insert_rows(conn, &messages, &mut written)?;
                finish_report(&mut written);
                Ok(RelayOutcome::Copied {
                    position: end,
                    written,
                })
            })
        }
    };
}
pub(crate) use outbox_units;

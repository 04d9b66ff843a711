//! Rows that leave the inbox in a stage commit: dead letters stored with their original rows,
//! and delivered rows purged past their window.

/// Stamps these units; see [`crate::sql`].
macro_rules! commit_retired_units {
    () => {
        /// Inserts dead letters with their original rows.
        fn insert_dead_letters(conn: &mut Conn, letters: Vec<DeadLetter>) -> Result<(), Failure> {
            let rows = letters
                .into_iter()
                .map(DeadLetterRow::from_dead_letter)
                .collect::<Result<Vec<_>, _>>()?;
            for chunk in rows.chunks(INSERT_CHUNK) {
                diesel::insert_into(dead_letters::table)
                    .values(chunk)
                    .execute(conn)?;
            }
            Ok(())
        }

        /// Deletes at most `limit` delivered rows of `shard` whose window passed at `now`,
        /// oldest window first.
        fn purge(
            conn: &mut Conn,
            shard: ShardIndex,
            now: DateTime<Utc>,
            limit: usize,
        ) -> Result<usize, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            if limit == 0 {
                return Ok(0);
            }
            // Two statements: diesel does not take a LIMITed subselect as a DELETE filter.
            let expired: Vec<i64> = im::inbox_messages
                .filter(im::shard.eq(shard.as_i32()))
                .filter(im::keep_until.le(micros(now)))
                .filter(im::status.eq(MessageStatus::Delivered.as_str()))
                .order((im::keep_until.asc(), im::seq.asc()))
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(im::seq)
                .load(conn)?;
            if expired.is_empty() {
                return Ok(0);
            }
            Ok(
                diesel::delete(im::inbox_messages.filter(im::seq.eq_any(&expired)))
                    .execute(conn)?,
            )
        }
    };
}
pub(crate) use commit_retired_units;

//! Whole-table reads (every inbox row, every dead letter, the number of outcome records), for
//! tests and the inspection of small databases.

/// Stamps these units; see [`crate::sql`].
macro_rules! inbox_inspect_units {
    () => {
        /// Every inbox row in `seq` order (inspection).
        pub(crate) fn rows(conn: &mut Conn) -> Result<Vec<InboxMessage>, Failure> {
            inbox_messages::table
                .order(inbox_messages::seq.asc())
                .select(InboxRow::as_select())
                .load(conn)?
                .into_iter()
                .map(InboxRow::into_message)
                .collect()
        }

        /// How many command outcome records are stored (inspection).
        pub(crate) fn outcome_records(conn: &mut Conn) -> Result<u64, Failure> {
            let n: i64 = $crate::schema::command_outcomes::table
                .count()
                .get_result(conn)?;
            Ok(u64::try_from(n).unwrap_or(0))
        }

        /// Every dead letter, oldest first (inspection).
        pub(crate) fn dead_letters(conn: &mut Conn) -> Result<Vec<DeadLetter>, Failure> {
            dead_letters::table
                .order(dead_letters::id.asc())
                .select(DeadLetterRow::as_select())
                .load(conn)?
                .into_iter()
                .map(DeadLetterRow::into_dead_letter)
                .collect()
        }
    };
}
pub(crate) use inbox_inspect_units;

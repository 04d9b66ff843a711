//! [`PageRead`]: a shard's due page, with the targets waiting behind a retry and the blocked
//! ones, in one statement.
//!
//! ```text
//!  SELECT 0, … FROM (inbox_immediate range, LIMIT n)                     due, no delay
//!  UNION ALL SELECT 1, … FROM (inbox_delayed range up to now, LIMIT n)   due, delay passed
//!  UNION ALL SELECT 2, … inbox_retrying, retry still ahead               waiting targets
//!  UNION ALL SELECT 3, … inbox_blocked_by_shard                          blocked targets
//!  UNION ALL SELECT 4, … FROM (inbox_delayed after now, LIMIT 1)         the next due row
//!  UNION ALL SELECT 5, … FROM (inbox_purge up to now, LIMIT 1)            one row to purge
//! ```
//!
//! The four parts must agree with each other (a row moving from waiting to due between two
//! reads must not be missed by both), which four statements could only give inside a
//! `REPEATABLE READ` transaction: six round trips on PostgreSQL. One statement reads one
//! snapshot on both backends, in one round trip. Its text is the same at every call and it
//! has a static query id, so diesel keeps it prepared. The partial indexes' predicates are
//! stated literally, as [`crate::sql::predicate`] explains; the plan tests check that each
//! part reads its index.

use super::predicate::{Predicate, BLOCKED, DELAYED, IMMEDIATE, KEPT, NOT_BLOCKED, RETRYING};
use crate::schema::inbox_messages;
use diesel::backend::Backend;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType, Integer};
use diesel::{QueryResult, RunQueryDsl};

/// Which part of a [`PageRead`] a row came from (the first column of each row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PagePart {
    /// Due now: no delay, or its delay has passed.
    Due,
    /// Failed before and retried later than now: its target waits.
    Waiting,
    /// Blocked: its target waits for an operator.
    Blocked,
    /// The row due next after now (its `deliver_after` is the shard's next due time).
    NextDue,
    /// A delivered row whose deduplication window has passed: a purge has work.
    Purgeable,
}

impl PagePart {
    /// The part a row's first column names.
    pub(crate) fn of(column: i32) -> Option<Self> {
        match column {
            0 | 1 => Some(Self::Due),
            2 => Some(Self::Waiting),
            3 => Some(Self::Blocked),
            4 => Some(Self::NextDue),
            5 => Some(Self::Purgeable),
            _ => None,
        }
    }
}

/// The columns of an inbox row, in the order of the table (and of `InboxRow`).
const COLUMNS: &str = "seq, shard, signal_id, target_kind, target_id, tenant, kind, status, \
     received_at, deliver_after, expires_at, keep_until, attempts, last_error, payload, \
     payload_type, metadata, first_failed_at, delivered_at, payload_version, error_history";

/// The same columns with an empty payload and no error history, for the parts that only need
/// a row's target (a blocked row's history can be 20 KiB, read at every page otherwise).
const COLUMNS_NO_PAYLOAD: &str = "seq, shard, signal_id, target_kind, target_id, tenant, kind, \
     status, received_at, deliver_after, expires_at, keep_until, attempts, last_error, \
     substr(payload, 1, 0), payload_type, metadata, first_failed_at, delivered_at, \
     payload_version, CAST(NULL AS TEXT)";

/// One shard's page read: the first `limit` due rows of `shard` at `now` by seq (at most
/// `limit` from each index, merged by the caller), the rows whose retry is still ahead, the
/// blocked rows and the row due next (before `parked`). Rows come as `(part, row)`,
/// unordered.
pub(crate) struct PageRead {
    pub(crate) shard: i32,
    pub(crate) now: i64,
    pub(crate) limit: i64,
    /// Rows parked by a catch-up carry this `deliver_after`; they wait for it, not a time.
    pub(crate) parked: i64,
}

impl<DB> QueryFragment<DB> for PageRead
where
    DB: Backend + HasSqlType<Integer> + HasSqlType<BigInt>,
    i32: ToSql<Integer, DB>,
    i64: ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        // Due rows without a delay: one range of inbox_immediate in seq order.
        out.push_sql("SELECT 0 AS part, due_now.* FROM (SELECT ");
        out.push_sql(COLUMNS);
        self.of_shard(&mut out, IMMEDIATE)?;
        out.push_sql(" AND ");
        out.push_sql(NOT_BLOCKED.0);
        out.push_sql(" ORDER BY seq");
        self.limit(&mut out)?;
        // Rows whose delay, retry or hold has passed: a range of inbox_delayed that ends at
        // now, so rows due later are never read. Only the first `limit` of them by seq can
        // make the page; a limit by deliver_after instead would skip earlier rows of a
        // target and break its order. `seq + 0`: no index yields this order, so a planner
        // that expects many due rows cannot walk the table in seq order past every row due
        // later (PostgreSQL with statistics does that for `seq`); it sorts the range.
        out.push_sql(") AS due_now UNION ALL SELECT 1, due_later.* FROM (SELECT ");
        out.push_sql(COLUMNS);
        self.of_shard(&mut out, DELAYED)?;
        out.push_sql(" AND deliver_after <= ");
        out.push_bind_param::<BigInt, _>(&self.now)?;
        out.push_sql(" AND ");
        out.push_sql(NOT_BLOCKED.0);
        out.push_sql(" ORDER BY seq + 0");
        self.limit(&mut out)?;
        // Targets waiting behind a retry still ahead. `COALESCE` on purpose: a plain
        // `deliver_after > now` would make the larger inbox_delayed index eligible too, and
        // SQLite would pick it. A retrying row whose TTL passed is still waited for until it
        // is expired (by the TTL sweep, which releases the rows held behind it, or by the page
        // that reads it at its retry time, with those rows): the target's later rows must not
        // overtake the rows already held behind it. One parked by a catch-up waits for the
        // job, not a time (its target's replayed rows must not be held behind it).
        out.push_sql(") AS due_later UNION ALL SELECT 2, ");
        out.push_sql(COLUMNS_NO_PAYLOAD);
        self.of_shard(&mut out, RETRYING)?;
        out.push_sql(" AND COALESCE(deliver_after, 0) > ");
        out.push_bind_param::<BigInt, _>(&self.now)?;
        out.push_sql(" AND COALESCE(deliver_after, 0) < ");
        out.push_bind_param::<BigInt, _>(&self.parked)?;
        // Blocked targets.
        out.push_sql(" UNION ALL SELECT 3, ");
        out.push_sql(COLUMNS_NO_PAYLOAD);
        self.of_shard(&mut out, BLOCKED)?;
        // The row due next: the start of inbox_delayed's range after now.
        out.push_sql(" UNION ALL SELECT 4, next_due.* FROM (SELECT ");
        out.push_sql(COLUMNS_NO_PAYLOAD);
        self.of_shard(&mut out, DELAYED)?;
        out.push_sql(" AND deliver_after > ");
        out.push_bind_param::<BigInt, _>(&self.now)?;
        out.push_sql(" AND deliver_after < ");
        out.push_bind_param::<BigInt, _>(&self.parked)?;
        out.push_sql(" ORDER BY deliver_after LIMIT 1) AS next_due");
        // One delivered row past its window, if any: the start of inbox_purge's range.
        out.push_sql(" UNION ALL SELECT 5, purgeable.* FROM (SELECT ");
        out.push_sql(COLUMNS_NO_PAYLOAD);
        self.of_shard(&mut out, KEPT)?;
        out.push_sql(" AND keep_until <= ");
        out.push_bind_param::<BigInt, _>(&self.now)?;
        out.push_sql(" AND status = 'delivered' ORDER BY keep_until LIMIT 1) AS purgeable");
        Ok(())
    }
}

impl PageRead {
    /// ` FROM inbox_messages WHERE shard = ? AND <predicate>`: where every part reads.
    fn of_shard<'b, DB>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
        predicate: Predicate,
    ) -> QueryResult<()>
    where
        DB: Backend + HasSqlType<Integer>,
        i32: ToSql<Integer, DB>,
    {
        out.push_sql(" FROM inbox_messages WHERE shard = ");
        out.push_bind_param::<Integer, _>(&self.shard)?;
        out.push_sql(" AND ");
        out.push_sql(predicate.0);
        Ok(())
    }

    /// ` LIMIT (? + 0)`, not `LIMIT ?`: SQLite marks a statement whose LIMIT is a bare
    /// parameter to be prepared again whenever that parameter is bound (its planner may use
    /// the value), which diesel does at every execution; an expression it leaves alone.
    fn limit<'b, DB>(&'b self, out: &mut AstPass<'_, 'b, DB>) -> QueryResult<()>
    where
        DB: Backend + HasSqlType<BigInt>,
        i64: ToSql<BigInt, DB>,
    {
        out.push_sql(" LIMIT (");
        out.push_bind_param::<BigInt, _>(&self.limit)?;
        out.push_sql(" + 0)");
        Ok(())
    }
}

impl Query for PageRead {
    type SqlType = (Integer, inbox_messages::SqlType);
}

impl QueryId for PageRead {
    type QueryId = PageRead;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for PageRead {}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::{PagePart, PageRead};
    use crate::test_schema::{explain, pg_url, TestSchema};
    use diesel::connection::SimpleConnection;
    use diesel::pg::{Pg, PgConnection};

    #[test]
    fn parts_are_named_by_their_first_column() {
        assert_eq!(PagePart::of(0), Some(PagePart::Due));
        assert_eq!(PagePart::of(1), Some(PagePart::Due));
        assert_eq!(PagePart::of(2), Some(PagePart::Waiting));
        assert_eq!(PagePart::of(3), Some(PagePart::Blocked));
        assert_eq!(PagePart::of(4), Some(PagePart::NextDue));
        assert_eq!(PagePart::of(5), Some(PagePart::Purgeable));
        assert_eq!(PagePart::of(6), None);
    }

    /// The generic plan (what a prepared statement ends up with on PostgreSQL) of the page
    /// read as diesel sends it.
    fn generic_plan(conn: &mut PgConnection) -> String {
        let query = PageRead {
            shard: 3,
            now: 1_700_000_000_000_000,
            limit: 100,
            parked: i64::MAX,
        };
        let sql = diesel::debug_query::<Pg, _>(&query).to_string();
        let sql = sql.split(" -- binds:").next().expect("sql");
        conn.batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan; DEALLOCATE ALL; \
             PREPARE page(int, bigint, int, bigint, bigint, int, bigint, bigint, int, int, \
             bigint, bigint, int, bigint) AS {sql}"
        ))
        .expect("prepare");
        explain(
            conn,
            "EXECUTE page(3, 100, 3, 1700000000000000, 100, 3, 1700000000000000, \
             1700000000000000, 3, 3, 1700000000000000, 9223372036854775807, 3, \
             1700000000000000)",
        )
    }

    fn assert_indexed(plan: &str) {
        for index in [
            "inbox_immediate",
            "inbox_delayed",
            "inbox_retrying",
            "inbox_purge",
            // Either index over blocked rows (by shard, or by target with the shard as a
            // filter): both hold blocked rows only, and PostgreSQL takes either.
            "inbox_blocked",
        ] {
            assert!(plan.contains(index), "{index} not used: {plan}");
        }
        assert!(!plan.contains("Seq Scan"), "{plan}");
        assert_eq!(
            plan.matches("inbox_delayed").count(),
            2,
            "the rows due after a delay, and the next due row: {plan}"
        );
    }

    /// Each part of the page read is a range of its own index in its generic plan, on a new
    /// table without statistics and on one analyzed with a large backlog of rows due now,
    /// most rows delivered, and many due later.
    #[tokio::test]
    async fn each_part_reads_its_index_in_the_generic_plan() {
        let Some(url) = pg_url("page_read_plan") else {
            return;
        };
        let schema = TestSchema::new(&url, "page_read_plan");
        let storage = schema.connect(1).await;
        let mut conn = schema.raw();
        conn.batch_execute(
            "INSERT INTO inbox_messages (shard, signal_id, target_kind, target_id, tenant, \
               kind, status, received_at, payload, payload_type) \
             SELECT i % 8, 's' || i, 'counter', 't' || i, '', 'command', 'to_deliver', 0, \
               '', 'bump' FROM generate_series(0, 19999) AS i",
        )
        .expect("rows");
        assert_indexed(&generic_plan(&mut conn));

        conn.batch_execute(
            "UPDATE inbox_messages SET status = 'delivered', keep_until = 1800000000000000 \
             WHERE seq % 3 = 0; \
             UPDATE inbox_messages SET deliver_after = 1800000000000000 WHERE seq % 3 = 1; \
             ANALYZE inbox_messages",
        )
        .expect("deliver and delay rows");
        assert_indexed(&generic_plan(&mut conn));
        drop(storage);
    }
}

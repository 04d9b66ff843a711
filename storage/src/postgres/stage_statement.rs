//! A stage commit of the common shape as one statement (see `sql::stage_statement`): the
//! fence, the delivered rows, the states and the events, each a data-modifying CTE that
//! writes only if the fence renewed the lease.
//!
//! ```text
//!  WITH fenced    AS (UPDATE shard_sessions SET lease_until … WHERE shard, epoch, node RETURNING 1),
//!       delivered AS (SELECT shardbox_mark_delivered(shard, seqs, …) FROM fenced),
//!       stored    AS (INSERT INTO entity_states … SELECT * FROM unnest(…)
//!                       WHERE EXISTS (SELECT 1 FROM fenced) ON CONFLICT … RETURNING 1),
//!     [ appending AS MATERIALIZED (SELECT pg_advisory_xact_lock(…) FROM fenced),
//!       appended  AS (INSERT INTO events … FROM appending, unnest(…) … RETURNING 1) ]
//!  SELECT fenced, delivered, stored, events, and a cast that fails (rolling all back) if the lease
//!         was held but not every delivered row was a row of the shard
//! ```
//!
//! The order of the write transaction is kept: the session row is locked first (every other
//! CTE waits for `fenced` through its one-time `EXISTS` filter, so a pick-up of the shard
//! waits for this commit and then sees the renewed lease), then the inbox rows and the
//! states, and the event-append lock last (the outer query reads the CTEs in that order), so
//! the lock is held only for the append and the commit that follows it at once.

use super::arrays::{DeliveredRows, EventRows, StateRows};
use crate::sql::prepared::SetLease;
use crate::sql::stage_statement::StageStatement;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::BigInt;
use diesel::{QueryResult, RunQueryDsl};

/// The write of every CTE but the fence: only if the fence renewed the lease.
const IF_FENCED: &str = " WHERE EXISTS (SELECT 1 FROM fenced)";

/// [`StageStatement`] as PostgreSQL's one statement; loads `(fenced, delivered, stored,
/// events, 0)`. `EVENTS`: whether it appends events — the two texts are two types. Kept
/// prepared: its delivered rows are marked by [`DeliveredRows`], whose update PostgreSQL plans
/// at each call on the inbox as it is then, so no plan of the statement depends on the
/// inbox's size (planning the whole statement at every stage cost more than executing it).
pub(crate) struct StageCommitStatement<'a, const EVENTS: bool> {
    fence: SetLease<'a>,
    delivered: DeliveredRows<'a>,
    expected: i64,
    states: StateRows<'a>,
    events: Option<EventRows<'a>>,
}

impl<'a, const EVENTS: bool> StageCommitStatement<'a, EVENTS> {
    /// The statement of `stage`, appending its events (if `EVENTS`; there must be none
    /// otherwise) under the lock of class `event_lock`.
    pub(crate) fn new(stage: &'a StageStatement<'a>, event_lock: i32) -> Self {
        debug_assert_eq!(EVENTS, !stage.events.is_empty());
        StageCommitStatement {
            fence: SetLease {
                shard: stage.shard,
                epoch: stage.epoch,
                node_id: stage.node_id,
                until: Some(stage.lease_until),
            },
            delivered: DeliveredRows {
                shard: stage.shard,
                seqs: stage.delivered,
                at: stage.at,
                keep_until: stage.keep_until,
            },
            expected: i64::try_from(stage.delivered.len()).unwrap_or(i64::MAX),
            states: StateRows::new(stage.states).gated(IF_FENCED),
            events: EVENTS.then(|| EventRows::new(stage.events, event_lock)),
        }
    }
}

impl<const EVENTS: bool> QueryFragment<Pg> for StageCommitStatement<'_, EVENTS> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("WITH fenced AS (");
        self.fence.walk_ast(out.reborrow())?;
        out.push_sql(" RETURNING 1 AS one), delivered AS (");
        self.delivered.walk_ast(out.reborrow())?;
        out.push_sql(" FROM fenced), stored AS (");
        self.states.walk_ast(out.reborrow())?;
        out.push_sql(" RETURNING 1 AS one)");
        if let Some(events) = &self.events {
            out.push_sql(", appending AS MATERIALIZED (");
            events.push_lock(&mut out)?;
            out.push_sql(" FROM fenced), appended AS (");
            events.push_insert(&mut out)?;
            out.push_sql(" RETURNING 1 AS one)");
        }
        // OFFSET 0 keeps the counts one subquery whose values the check uses. Every count is
        // a column of the result, so that each CTE runs in this order (one the result did not
        // use would run after the query, past the event-append lock).
        out.push_sql(
            " SELECT c.fenced, c.delivered, c.stored, c.events, \
             CASE WHEN c.fenced = 1 AND c.delivered <> ",
        );
        out.push_bind_param::<BigInt, _>(&self.expected)?;
        out.push_sql(
            " THEN CAST('shardbox: a stage commit found ' || c.delivered || \
             ' of its delivered rows in its shard' AS BIGINT) ELSE 0 END \
             FROM (SELECT (SELECT count(*) FROM fenced) AS fenced, \
             (SELECT COALESCE(max(marked), 0) FROM delivered) AS delivered, \
             (SELECT count(*) FROM stored) AS stored, ",
        );
        out.push_sql(if self.events.is_some() {
            "(SELECT count(*) FROM appended) AS events OFFSET 0) AS c"
        } else {
            "0::BIGINT AS events OFFSET 0) AS c"
        });
        Ok(())
    }
}

impl<const EVENTS: bool> Query for StageCommitStatement<'_, EVENTS> {
    type SqlType = (BigInt, BigInt, BigInt, BigInt, BigInt);
}

impl<const EVENTS: bool> QueryId for StageCommitStatement<'_, EVENTS> {
    type QueryId = StageCommitStatement<'static, EVENTS>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const EVENTS: bool> RunQueryDsl<Conn> for StageCommitStatement<'_, EVENTS> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::Dialect;
    use crate::test_schema::{pg_url, prepared_plans, TestSchema};
    use diesel::connection::{Connection, SimpleConnection};
    use diesel::sql_types::BigInt;
    use diesel::{PgConnection, QueryableByName};

    #[derive(QueryableByName)]
    struct Scanned {
        #[diesel(sql_type = BigInt)]
        read: i64,
    }

    /// Rows `from..=to` of the inbox, in shard 0.
    fn insert_rows(conn: &mut PgConnection, from: i64, to: i64) {
        conn.batch_execute(&format!(
            "INSERT INTO inbox_messages (seq, shard, signal_id, target_kind, target_id, tenant, \
             kind, status, received_at, payload, payload_type) \
             SELECT i, 0, 's-' || i, 'counter', 't-' || i, '', 'command', 'to_deliver', 0, \
             '\\x00', 'bump' FROM generate_series({from}, {to}) AS i"
        ))
        .expect("inbox rows");
    }

    /// Marks `seqs` of shard 0 delivered the way a stage's write transaction does.
    fn mark(conn: &mut PgConnection, seqs: &[i64]) -> usize {
        <PgConnection as Dialect>::mark_delivered_rows(conn, 0, seqs, 1, 2).expect("delivered")
    }

    /// Rows the current transaction read by sequential scans of the inbox so far.
    fn inbox_rows_scanned(conn: &mut PgConnection) -> i64 {
        diesel::sql_query(
            "SELECT COALESCE(sum(seq_tup_read), 0)::BIGINT AS read FROM pg_stat_xact_user_tables \
             WHERE relname = 'inbox_messages' AND schemaname = current_schema()",
        )
        .get_result::<Scanned>(conn)
        .expect("scanned")
        .read
    }

    fn stage<'a>(delivered: &'a [i64]) -> StageStatement<'a> {
        StageStatement {
            shard: 0,
            epoch: 1,
            node_id: "n",
            lease_until: i64::MAX / 2,
            delivered,
            at: 1,
            keep_until: 2,
            states: &[],
            events: &[],
        }
    }

    /// A stage's delivered rows are found by their key however much the inbox grew since the
    /// statement was first run on the connection: PostgreSQL would otherwise keep the plan it
    /// made for the small inbox, a sequential scan, and read the whole inbox at every stage.
    /// And the stage commit keeps one plan (no planning at every stage): the update that
    /// needs a fresh plan is the function's.
    #[tokio::test]
    async fn delivered_rows_are_found_by_key_after_the_inbox_grew() {
        let Some(url) = pg_url("delivered_rows_plan") else {
            return;
        };
        let schema = TestSchema::new(&url, "delivered_rows_plan");
        let storage = schema.connect(1).await;
        let mut conn = schema.raw();
        conn.batch_execute(
            "INSERT INTO shard_sessions (shard, node_id, epoch, lease_until) VALUES (0, 'n', 1, 0)",
        )
        .expect("session");
        insert_rows(&mut conn, 1, 60);
        // More executions on the small inbox than PostgreSQL needs to settle on one plan.
        for i in 0..10 {
            let seqs = [2 * i + 1, 2 * i + 2];
            let stage = stage(&seqs);
            let statement = StageCommitStatement::<false>::new(&stage, 0);
            let counts: (i64, i64, i64, i64, i64) =
                statement.get_result(&mut conn).expect("stage commit");
            assert_eq!((counts.0, counts.1), (1, 2));
            // The write transaction's path, with two rows and with one.
            assert_eq!(mark(&mut conn, &[2 * i + 21, 2 * i + 22]), 2);
            assert_eq!(mark(&mut conn, &[i + 41]), 1);
        }
        let (generic, custom) = prepared_plans(&mut conn, "WITH fenced AS");
        assert!(
            generic >= 4 && custom <= 6,
            "the stage commit is planned at every stage: {generic} runs with its kept plan, \
             {custom} planned for their parameters"
        );
        insert_rows(&mut conn, 61, 20_060);
        conn.transaction::<_, diesel::result::Error, _>(|conn| {
            let seqs = [20_001, 20_002];
            let stage = stage(&seqs);
            let statement = StageCommitStatement::<false>::new(&stage, 0);
            let counts: (i64, i64, i64, i64, i64) = statement.get_result(conn)?;
            assert_eq!((counts.0, counts.1), (1, 2));
            assert_eq!(mark(conn, &[20_003, 20_004]), 2);
            assert_eq!(mark(conn, &[20_005]), 1);
            let scanned = inbox_rows_scanned(conn);
            assert!(
                scanned < 1_000,
                "the delivered rows were looked for in a scan of the inbox: {scanned} rows read"
            );
            Ok(())
        })
        .expect("stage on the grown inbox");
        drop(storage);
    }
}

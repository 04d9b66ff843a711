//! A stage commit of the common shape as one statement (see `sql::stage_statement`): the
//! fence, the delivered rows, the states and the events, each a data-modifying CTE that
//! writes only if the fence renewed the lease.
//!
//! ```text
//!  WITH fenced    AS (UPDATE shard_sessions SET lease_until … WHERE shard, epoch, node RETURNING 1),
//!       delivered AS (UPDATE inbox_messages SET status = 'delivered' … WHERE shard AND seq = ANY(…)
//!                       AND EXISTS (SELECT 1 FROM fenced) RETURNING 1),
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
/// events, 0)`. `EVENTS`: whether it appends events — the two texts are two types, each kept
/// prepared by its type like the other array statements.
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
        out.push_sql(" AND EXISTS (SELECT 1 FROM fenced) RETURNING 1 AS one), stored AS (");
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
             (SELECT count(*) FROM delivered) AS delivered, \
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

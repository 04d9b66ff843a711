//! [`StatesById`]: entity states of one kind and tenant by id, one primary-key probe per id
//! whatever statistics the planner has.
//!
//! ```text
//!  WHERE kind = $1 AND tenant = $2 AND id = ANY($3)   generic plan on a table never analyzed:
//!                                                     Index Cond (kind, tenant), Filter id —
//!                                                     every state of the kind, per page
//!  unnest((SELECT $3)) × LATERAL (… id = u.id         one probe of (kind, tenant, id) per id
//!    OFFSET 0)
//! ```
//!
//! Diesel keeps the statement prepared, and after five executions PostgreSQL may keep one
//! generic plan for it. On a table not yet analyzed (a new database, for the first minute or
//! so) it estimates one row for `kind = $1 AND tenant = $2` and plans the `ANY` as a filter:
//! each load then read every state of the kind and its dead versions (about 850 buffers per
//! load in the `latency` benchmark, a third of the server's CPU). The lateral subquery cannot
//! be flattened (`OFFSET 0`), so the id is always part of the index condition.
//!
//! The ids are `unnest((SELECT $1))`, not `unnest($1)`: a plan made for the parameters knows
//! the array's length (one or two ids, one or two probes) and the generic plan guesses ten,
//! so PostgreSQL found every plan for the parameters cheaper than the generic one and planned
//! the load anew at every page (0.11 ms a load, a tenth of a millisecond per message in the
//! two-node `latency` benchmark). A sub-select's value is unknown to both, the costs are
//! equal, and PostgreSQL keeps the generic plan after five executions.

use crate::rows::EntityStateRow;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Binary, Integer, Text};
use diesel::{PgConnection, QueryResult, RunQueryDsl};

/// The states of `ids` (of `kind` and `tenant`) that exist, as rows.
pub(crate) struct StatesById<'a> {
    pub(crate) kind: &'a str,
    pub(crate) tenant: &'a str,
    pub(crate) ids: &'a [String],
}

impl StatesById<'_> {
    /// Runs the query.
    pub(crate) fn load(self, conn: &mut PgConnection) -> QueryResult<Vec<EntityStateRow>> {
        RunQueryDsl::load(self, conn)
    }
}

impl QueryFragment<Pg> for StatesById<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        // `unnest((SELECT $1))`: the ids come from a sub-select, so no plan knows how many
        // they are; see the module's docs.
        out.push_sql(
            "SELECT s.kind, s.tenant, s.id, s.version, s.state, s.updated_at, s.state_version \
             FROM unnest((SELECT ",
        );
        out.push_bind_param::<Array<Text>, _>(self.ids)?;
        out.push_sql(
            "::text[])) AS u(id) CROSS JOIN LATERAL (SELECT es.kind, es.tenant, es.id, es.version, \
             es.state, es.updated_at, es.state_version FROM entity_states es WHERE es.kind = ",
        );
        out.push_bind_param::<Text, _>(self.kind)?;
        out.push_sql(" AND es.tenant = ");
        out.push_bind_param::<Text, _>(self.tenant)?;
        out.push_sql(" AND es.id = u.id OFFSET 0) AS s");
        Ok(())
    }
}

impl QueryId for StatesById<'_> {
    type QueryId = StatesById<'static>;
    // The SQL text never changes, so diesel may cache the prepared statement by type.
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for StatesById<'_> {
    type SqlType = (Text, Text, Text, BigInt, Binary, BigInt, Integer);
}

impl RunQueryDsl<PgConnection> for StatesById<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_schema::{explain, pg_url, prepared_plans, TestSchema};
    use diesel::connection::SimpleConnection;

    /// The generic plan (what a prepared statement ends up with) of the statement as diesel
    /// sends it, on a table of states that was never analyzed.
    fn generic_plan(conn: &mut PgConnection, sql: &str) -> String {
        conn.batch_execute(&format!(
            "SET plan_cache_mode = force_generic_plan; DEALLOCATE ALL; \
             PREPARE load_states(text[], text, text) AS {sql}"
        ))
        .expect("prepare");
        explain(
            conn,
            "EXECUTE load_states(ARRAY['t-1', 't-2'], 'counter', '')",
        )
    }

    #[tokio::test]
    async fn each_id_is_part_of_the_index_condition_without_statistics() {
        let Some(url) = pg_url("states_by_id_plan") else {
            return;
        };
        let schema = TestSchema::new(&url, "states_by_id_plan");
        let storage = schema.connect(1).await;
        let mut conn = schema.raw();
        conn.batch_execute(
            "INSERT INTO entity_states SELECT 'counter', '', 't-' || i, 1, '', 0 \
             FROM generate_series(0, 999) AS i",
        )
        .expect("states");
        let ids = ["t-1".to_owned(), "t-2".to_owned()];
        let query = StatesById {
            kind: "counter",
            tenant: "",
            ids: &ids,
        };
        let sql = diesel::debug_query::<Pg, _>(&query).to_string();
        let sql = sql.split(" -- binds:").next().expect("sql");
        let plan = generic_plan(&mut conn, sql);
        assert!(plan.contains("id = u.id"), "{plan}");
        assert!(!plan.contains("Filter"), "{plan}");
        // What it replaces: the id list only filters a scan of the kind's states.
        let any = generic_plan(
            &mut conn,
            "SELECT * FROM entity_states WHERE id = ANY($1) AND kind = $2 AND tenant = $3",
        );
        assert!(any.contains("Filter: (id = ANY ($1))"), "{any}");
        // And it finds what is there, with one kept plan after five executions.
        conn.batch_execute("RESET plan_cache_mode").expect("reset");
        for _ in 0..10 {
            let query = StatesById {
                kind: "counter",
                tenant: "",
                ids: &ids,
            };
            let rows = query.load(&mut conn).expect("load");
            let mut found: Vec<_> = rows.into_iter().map(|r| r.id).collect();
            found.sort();
            assert_eq!(found, ids);
        }
        let (generic, custom) = prepared_plans(&mut conn, "SELECT s.kind");
        assert!(
            generic >= 4 && custom <= 6,
            "the state load is planned at every page: {generic} runs with its kept plan, \
             {custom} planned for their parameters"
        );
        drop(storage);
    }
}

//! A page's multi-row writes on PostgreSQL as one statement each, with one array parameter
//! per column: the same text for any number of rows, so diesel prepares it once per
//! connection and PostgreSQL plans it once.
//!
//! ```text
//!  InboxRows      INSERT INTO inbox_messages (…) SELECT … FROM unnest($1, …, $14)
//!                   WITH ORDINALITY ORDER BY ordinality ON CONFLICT DO NOTHING RETURNING shard
//!  AddressedInboxRows  the same, guarded by the recorded shard count read FOR KEY SHARE
//!  EventRows      WITH appending AS (the event-append lock) INSERT INTO events (…)
//!                   SELECT … FROM appending, unnest($2, …, $10) … ON CONFLICT (id)
//!  StateRows      INSERT INTO entity_states (…) SELECT * FROM unnest($1, …, $7)
//!                   ON CONFLICT (kind, tenant, id) DO UPDATE (version moves up by the row's)
//!  DeliveredRows  SELECT shardbox_mark_delivered($1, $2, $3, $4): the schema's function runs
//!                   UPDATE inbox_messages … WHERE shard AND seq = ANY(…) (see the type)
//! ```
//!
//! On SQLite the same writes are cut into arrays of fixed sizes (`ladder!`), a statement per
//! size: it has no array parameters, and a statement there costs no round trip. Here a page of
//! 190 rows would take ten round trips that way. Inserts keep the rows' order (`ORDER BY
//! ordinality`), so `seq` follows it as it does for a multi-row `VALUES`.

use crate::rows::{NewEntityStateRow, NewEventRow, NewInboxRow};
use crate::sql::prepared::{
    insert_states, EVENT_COLUMNS, INBOX_COLUMNS, ON_EVENT_DUPLICATE, ON_INBOX_DUPLICATE,
    ON_STATE_CONFLICT,
};
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Binary, Integer, Nullable, Text};
use diesel::{QueryResult, RunQueryDsl};

/// Pushes `, $n` binding one column's values.
macro_rules! column {
    ($out:ident, $ty:ty, $values:expr) => {
        $out.push_sql(", ");
        $out.push_bind_param::<Array<$ty>, _>($values)?;
    };
}

/// Inbox rows to insert, by column; duplicates of the dedup key are skipped.
pub(crate) struct InboxRows<'a> {
    shard: Vec<i32>,
    signal_id: Vec<&'a str>,
    target_kind: Vec<&'a str>,
    target_id: Vec<&'a str>,
    tenant: Vec<&'a str>,
    kind: Vec<&'a str>,
    status: Vec<&'a str>,
    received_at: Vec<i64>,
    deliver_after: Vec<Option<i64>>,
    expires_at: Vec<Option<i64>>,
    payload: Vec<&'a [u8]>,
    payload_type: Vec<&'a str>,
    metadata: Vec<&'a str>,
    payload_version: Vec<i32>,
}

impl<'a> InboxRows<'a> {
    pub(crate) fn new(rows: &'a [NewInboxRow]) -> Self {
        Self::of(&rows.iter().collect::<Vec<_>>())
    }

    /// The rows of several batches, in order.
    pub(crate) fn of(rows: &[&'a NewInboxRow]) -> Self {
        InboxRows {
            shard: rows.iter().map(|r| r.shard).collect(),
            signal_id: rows.iter().map(|r| r.signal_id.as_str()).collect(),
            target_kind: rows.iter().map(|r| r.target_kind.as_str()).collect(),
            target_id: rows.iter().map(|r| r.target_id.as_str()).collect(),
            tenant: rows.iter().map(|r| r.tenant.as_str()).collect(),
            kind: rows.iter().map(|r| r.kind.as_str()).collect(),
            status: rows.iter().map(|r| r.status.as_str()).collect(),
            received_at: rows.iter().map(|r| r.received_at).collect(),
            deliver_after: rows.iter().map(|r| r.deliver_after).collect(),
            expires_at: rows.iter().map(|r| r.expires_at).collect(),
            payload: rows.iter().map(|r| r.payload.as_slice()).collect(),
            payload_type: rows.iter().map(|r| r.payload_type.as_str()).collect(),
            metadata: rows.iter().map(|r| r.metadata.as_str()).collect(),
            payload_version: rows.iter().map(|r| r.payload_version).collect(),
        }
    }
}

impl QueryFragment<Pg> for InboxRows<'_> {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.push_insert(out, None, ON_INBOX_DUPLICATE)
    }
}

impl InboxRows<'_> {
    /// The insert; with `addressed_by`, only if no other shard count is recorded (the rows of
    /// `counted`, see [`AddressedInboxRows`]).
    fn push_insert<'b>(
        &'b self,
        mut out: AstPass<'_, 'b, Pg>,
        addressed_by: Option<&'b String>,
        on_duplicate: &'static str,
    ) -> QueryResult<()> {
        out.push_sql("INSERT INTO inbox_messages (");
        out.push_sql(INBOX_COLUMNS);
        out.push_sql(") SELECT ");
        out.push_sql(INBOX_COLUMNS);
        out.push_sql(" FROM unnest(");
        out.push_bind_param::<Array<Integer>, _>(&self.shard)?;
        column!(out, Text, &self.signal_id);
        column!(out, Text, &self.target_kind);
        column!(out, Text, &self.target_id);
        column!(out, Text, &self.tenant);
        column!(out, Text, &self.kind);
        column!(out, Text, &self.status);
        column!(out, BigInt, &self.received_at);
        column!(out, Nullable<BigInt>, &self.deliver_after);
        column!(out, Nullable<BigInt>, &self.expires_at);
        column!(out, Binary, &self.payload);
        column!(out, Text, &self.payload_type);
        column!(out, Text, &self.metadata);
        column!(out, Integer, &self.payload_version);
        out.push_sql(") WITH ORDINALITY AS r(");
        out.push_sql(INBOX_COLUMNS);
        out.push_sql(", n)");
        if let Some(count) = addressed_by {
            out.push_sql(" WHERE NOT EXISTS (SELECT 1 FROM counted WHERE value <> ");
            out.push_bind_param::<Text, _>(count)?;
            out.push_sql(")");
        }
        out.push_sql(" ORDER BY n");
        out.push_sql(on_duplicate);
        Ok(())
    }
}

/// Inbox rows addressed by a shard count, written in one statement only if no other count
/// is recorded — the check of a send outside a transaction: the `shard_count` setting's row
/// is read under `FOR KEY SHARE` (the lock a re-sharding's switch waits for, see
/// `Dialect::read_shard_count_locked`) by a materialized CTE the insert is guarded by, and
/// held until the statement's commit. One round trip where `BEGIN`, the read, an insert per
/// batch and `COMMIT` took four or more. Returns a row per row written — the recorded count,
/// the row's shard and dedup key (so that a group's rows are counted to their batches) — or,
/// if none was written (duplicates, or another count recorded), one row with the count alone.
pub(crate) struct AddressedInboxRows<'a> {
    rows: InboxRows<'a>,
    count: String,
}

impl<'a> AddressedInboxRows<'a> {
    pub(crate) fn new(rows: &[&'a NewInboxRow], count: u32) -> Self {
        AddressedInboxRows {
            rows: InboxRows::of(rows),
            count: count.to_string(),
        }
    }
}

impl QueryFragment<Pg> for AddressedInboxRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(
            "WITH counted AS MATERIALIZED (SELECT value FROM shardbox_settings \
             WHERE name = 'shard_count' FOR KEY SHARE), written AS (",
        );
        self.rows.push_insert(
            out.reborrow(),
            Some(&self.count),
            " ON CONFLICT (tenant, target_kind, target_id, signal_id) DO NOTHING \
             RETURNING shard, tenant, target_kind, target_id, signal_id",
        )?;
        out.push_sql(
            ") SELECT (SELECT value FROM counted), w.shard, w.tenant, w.target_kind, \
             w.target_id, w.signal_id FROM (SELECT 1) AS one LEFT JOIN written AS w ON true",
        );
        Ok(())
    }
}

impl Query for AddressedInboxRows<'_> {
    type SqlType = (
        Nullable<Text>,
        Nullable<Integer>,
        Nullable<Text>,
        Nullable<Text>,
        Nullable<Text>,
        Nullable<Text>,
    );
}

impl QueryId for AddressedInboxRows<'_> {
    type QueryId = AddressedInboxRows<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for AddressedInboxRows<'_> {}

impl Query for InboxRows<'_> {
    type SqlType = Integer;
}

impl QueryId for InboxRows<'_> {
    type QueryId = InboxRows<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for InboxRows<'_> {}

/// Events to append, by column, under the event-append lock of class `lock` (taken by the
/// same statement: a materialized CTE that every inserted row joins, so the lock is held
/// before the first `seq` is drawn); an id already stored is skipped.
pub(crate) struct EventRows<'a> {
    lock: i32,
    id: Vec<&'a str>,
    event_type: Vec<&'a str>,
    source_kind: Vec<&'a str>,
    source_id: Vec<&'a str>,
    tenant: Vec<&'a str>,
    occurred_at: Vec<i64>,
    payload: Vec<&'a [u8]>,
    metadata: Vec<&'a str>,
    version: Vec<i32>,
}

impl<'a> EventRows<'a> {
    pub(crate) fn new(rows: &'a [NewEventRow], lock: i32) -> Self {
        EventRows {
            lock,
            id: rows.iter().map(|r| r.id.as_str()).collect(),
            event_type: rows.iter().map(|r| r.event_type.as_str()).collect(),
            source_kind: rows.iter().map(|r| r.source_kind.as_str()).collect(),
            source_id: rows.iter().map(|r| r.source_id.as_str()).collect(),
            tenant: rows.iter().map(|r| r.tenant.as_str()).collect(),
            occurred_at: rows.iter().map(|r| r.occurred_at).collect(),
            payload: rows.iter().map(|r| r.payload.as_slice()).collect(),
            metadata: rows.iter().map(|r| r.metadata.as_str()).collect(),
            version: rows.iter().map(|r| r.version).collect(),
        }
    }
}

impl EventRows<'_> {
    /// `SELECT pg_advisory_xact_lock(…) AS locked`: takes the event-append lock.
    pub(crate) fn push_lock<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("SELECT pg_advisory_xact_lock(");
        out.push_bind_param::<Integer, _>(&self.lock)?;
        out.push_sql(", hashtext(COALESCE(current_schema(), ''))) AS locked");
        Ok(())
    }

    /// `INSERT INTO events (…) SELECT … FROM appending, unnest(…) …`: the rows, each joined
    /// to the CTE `appending` that took the lock.
    pub(crate) fn push_insert<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("INSERT INTO events (");
        out.push_sql(EVENT_COLUMNS);
        out.push_sql(
            ") SELECT r.id, r.event_type, r.source_kind, r.source_id, r.tenant, \
             r.occurred_at, r.payload, r.metadata, r.version FROM appending, unnest(",
        );
        out.push_bind_param::<Array<Text>, _>(&self.id)?;
        column!(out, Text, &self.event_type);
        column!(out, Text, &self.source_kind);
        column!(out, Text, &self.source_id);
        column!(out, Text, &self.tenant);
        column!(out, BigInt, &self.occurred_at);
        column!(out, Binary, &self.payload);
        column!(out, Text, &self.metadata);
        column!(out, Integer, &self.version);
        out.push_sql(") WITH ORDINALITY AS r(");
        out.push_sql(EVENT_COLUMNS);
        out.push_sql(", n) ORDER BY r.n");
        out.push_sql(ON_EVENT_DUPLICATE);
        Ok(())
    }
}

impl QueryFragment<Pg> for EventRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("WITH appending AS MATERIALIZED (");
        self.push_lock(&mut out)?;
        out.push_sql(") ");
        self.push_insert(&mut out)
    }
}

impl QueryId for EventRows<'_> {
    type QueryId = EventRows<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for EventRows<'_> {}

/// States to upsert (distinct keys), by column: a new row starts at `version`, an existing
/// one moves up by it.
pub(crate) struct StateRows<'a> {
    /// A condition on inserting any row (`WHERE …`, SQL text), or empty.
    gate: &'static str,
    kind: Vec<&'a str>,
    tenant: Vec<&'a str>,
    id: Vec<&'a str>,
    version: Vec<i64>,
    state: Vec<&'a [u8]>,
    updated_at: Vec<i64>,
    state_version: Vec<i32>,
}

impl<'a> StateRows<'a> {
    pub(crate) fn new(rows: &'a [NewEntityStateRow<'a>]) -> Self {
        StateRows {
            gate: "",
            kind: rows.iter().map(|r| r.kind).collect(),
            tenant: rows.iter().map(|r| r.tenant).collect(),
            id: rows.iter().map(|r| r.id).collect(),
            version: rows.iter().map(|r| r.version).collect(),
            state: rows.iter().map(|r| r.state).collect(),
            updated_at: rows.iter().map(|r| r.updated_at).collect(),
            state_version: rows.iter().map(|r| r.state_version).collect(),
        }
    }

    /// The same rows, inserted only if `gate` (` WHERE …`, SQL text) holds.
    pub(crate) fn gated(mut self, gate: &'static str) -> Self {
        self.gate = gate;
        self
    }
}

impl QueryFragment<Pg> for StateRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        insert_states(&mut out);
        out.push_sql("SELECT * FROM unnest(");
        out.push_bind_param::<Array<Text>, _>(&self.kind)?;
        column!(out, Text, &self.tenant);
        column!(out, Text, &self.id);
        column!(out, BigInt, &self.version);
        column!(out, Binary, &self.state);
        column!(out, BigInt, &self.updated_at);
        column!(out, Integer, &self.state_version);
        out.push_sql(")");
        out.push_sql(self.gate);
        out.push_sql(ON_STATE_CONFLICT);
        Ok(())
    }
}

impl QueryId for StateRows<'_> {
    type QueryId = StateRows<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for StateRows<'_> {}

/// Marks rows of a shard delivered (each `seq` a row of `shard`), through the schema's
/// `shardbox_mark_delivered` function; loads how many rows it marked.
///
/// The update is the function's (see its migration, `2026-12-03-000001`): PL/pgSQL plans it
/// once per connection, with sequential scans off, so its one plan probes the primary key
/// whatever the inbox's size. Kept prepared as an `UPDATE` of its own, the statement ended up
/// with the generic plan PostgreSQL chose after five executions, from the inbox as it was
/// then: a new inbox is small, a sequential scan is the cheaper plan for it (the `ANY` is
/// costed as ten index probes), and nothing replaced the plan as the inbox grew while no
/// `ANALYZE` ran (a server without autovacuum, or between its runs). Every stage then read
/// the whole inbox: in the two-node `latency` benchmark the stage commits' scans were a
/// third of the server's CPU after 10 s and the latency doubled within 30 s. Planned at every
/// execution instead, the one-statement stage commit that holds it cost more to plan (0.55
/// ms) than to run. This call is the same text for any number of rows and stays prepared.
pub(crate) struct DeliveredRows<'a> {
    pub(crate) shard: i32,
    pub(crate) seqs: &'a [i64],
    /// When (µs): a handled command's outcome time.
    pub(crate) at: i64,
    /// The new `keep_until` (µs).
    pub(crate) keep_until: i64,
}

impl QueryFragment<Pg> for DeliveredRows<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("SELECT shardbox_mark_delivered(");
        out.push_bind_param::<Integer, _>(&self.shard)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(self.seqs)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.at)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.keep_until)?;
        out.push_sql(") AS marked");
        Ok(())
    }
}

impl Query for DeliveredRows<'_> {
    type SqlType = BigInt;
}

impl QueryId for DeliveredRows<'_> {
    type QueryId = DeliveredRows<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for DeliveredRows<'_> {}

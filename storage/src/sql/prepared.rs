//! Updates of a stage's commit written with constant SQL text, so that diesel keeps them
//! prepared.
//!
//! ```text
//!  diesel::update(…)   ─► marked unsafe to cache by diesel, whatever it updates: parsed
//!                         (and on PostgreSQL planned) at every execution
//!  SetLease            ─► the fence at every stage commit (and heartbeat), the release
//!  MarkDelivered<N>    ─► N delivered rows (a page's, cut by `ladder!`)
//!  UpsertStates<N>     ─► N states (a page's targets, cut by `ladder!`)
//! ```
//!
//! Diesel prepares every `UPDATE` and every upsert anew; a stage commit has three of them,
//! and a turn that ends releases its lease with a fourth. Each type here writes
//! one statement's text (the same at every call for a given `N`, with `?` or `$n`
//! placeholders from the backend) and has a static query id, so diesel prepares it once per
//! connection (and size).

use crate::rows::NewEntityStateRow;
use diesel::backend::Backend;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, Binary, HasSqlType, Integer, Nullable, Text};
use diesel::{QueryResult, RunQueryDsl};
use shardbox_core::MessageStatus;

/// What a backend writes after `INSERT` or `UPDATE` in a statement that writes several rows.
///
/// SQLite: ` OR FAIL`. A statement that writes several rows and may abort (any constraint,
/// `CHECK`s included) keeps a statement journal: a copy of every page it is about to change,
/// to undo that statement alone — 5 % of the write lock's CPU on the `live` benchmark. `OR
/// FAIL` stops at a broken constraint without undoing the rows the statement wrote before,
/// so SQLite keeps no copy; every unit of work rolls its whole transaction back on any error,
/// so nothing of a failed statement is ever committed. PostgreSQL: nothing (no such clause,
/// and no such cost).
pub(crate) trait OrFail {
    /// ` OR FAIL`, or nothing.
    const OR_FAIL: &'static str;
}

#[cfg(feature = "sqlite")]
impl OrFail for diesel::sqlite::Sqlite {
    const OR_FAIL: &'static str = " OR FAIL";
}

#[cfg(feature = "postgres")]
impl OrFail for diesel::pg::Pg {
    const OR_FAIL: &'static str = "";
}

/// `UPDATE shard_sessions SET lease_until WHERE shard, epoch, node_id`: renews a lease (a
/// new end) or releases it (`None`) if it is still held (1 row), or touches nothing (0 rows:
/// lost).
pub(crate) struct SetLease<'a> {
    pub(crate) shard: i32,
    pub(crate) epoch: i64,
    pub(crate) node_id: &'a str,
    /// The new `lease_until` (µs), or `None` to release.
    pub(crate) until: Option<i64>,
}

impl<DB> QueryFragment<DB> for SetLease<'_>
where
    DB: Backend + HasSqlType<Integer> + HasSqlType<BigInt> + HasSqlType<Text>,
    i32: ToSql<Integer, DB>,
    i64: ToSql<BigInt, DB>,
    Option<i64>: ToSql<Nullable<BigInt>, DB>,
    str: ToSql<Text, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE shard_sessions SET lease_until = ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.until)?;
        out.push_sql(" WHERE shard = ");
        out.push_bind_param::<Integer, _>(&self.shard)?;
        out.push_sql(" AND epoch = ");
        out.push_bind_param::<BigInt, _>(&self.epoch)?;
        out.push_sql(" AND node_id = ");
        out.push_bind_param::<Text, _>(self.node_id)?;
        Ok(())
    }
}

impl QueryId for SetLease<'_> {
    type QueryId = SetLease<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for SetLease<'_> {}

/// `UPDATE inbox_messages SET status = 'delivered', delivered_at, keep_until WHERE shard AND
/// seq IN (…N)`: marks `N` rows delivered (N rows) or fewer (some are not rows of the shard).
pub(crate) struct MarkDelivered<'a, const N: usize> {
    pub(crate) shard: i32,
    pub(crate) seqs: &'a [i64; N],
    /// When (µs): a handled command's outcome time.
    pub(crate) at: i64,
    /// The new `keep_until` (µs).
    pub(crate) keep_until: i64,
}

impl<DB, const N: usize> QueryFragment<DB> for MarkDelivered<'_, N>
where
    DB: Backend + HasSqlType<Integer> + HasSqlType<BigInt> + OrFail,
    i32: ToSql<Integer, DB>,
    i64: ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        mark_delivered_where_shard(&mut out, &self.at, &self.keep_until, &self.shard)?;
        out.push_sql(" AND seq IN (");
        for (i, seq) in self.seqs.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_bind_param::<BigInt, _>(seq)?;
        }
        out.push_sql(")");
        Ok(())
    }
}

/// `UPDATE [OR FAIL] inbox_messages SET status = 'delivered', delivered_at = ?, keep_until = ?
/// WHERE shard = ?`: the head of every statement that marks rows delivered (the rows follow).
pub(crate) fn mark_delivered_where_shard<'b, DB>(
    out: &mut AstPass<'_, 'b, DB>,
    at: &'b i64,
    keep_until: &'b i64,
    shard: &'b i32,
) -> QueryResult<()>
where
    DB: Backend + HasSqlType<Integer> + HasSqlType<BigInt> + OrFail,
    i32: ToSql<Integer, DB>,
    i64: ToSql<BigInt, DB>,
{
    out.push_sql("UPDATE");
    out.push_sql(DB::OR_FAIL);
    out.push_sql(" inbox_messages SET status = '");
    out.push_sql(MessageStatus::Delivered.as_str());
    out.push_sql("', delivered_at = ");
    out.push_bind_param::<BigInt, _>(at)?;
    out.push_sql(", keep_until = ");
    out.push_bind_param::<BigInt, _>(keep_until)?;
    out.push_sql(" WHERE shard = ");
    out.push_bind_param::<Integer, _>(shard)?;
    Ok(())
}

/// The columns of an inbox insert, in the order both backends bind them: not `seq` (which
/// PostgreSQL draws from the column's identity and SQLite's writer from `inbox_sequence`), nor
/// the columns of delivery and failure, which a new row leaves at their defaults.
pub(crate) const INBOX_COLUMNS: &str = "shard, signal_id, target_kind, target_id, tenant, kind, \
     status, received_at, deliver_after, expires_at, payload, payload_type, metadata, \
     payload_version";

/// What an inbox insert does with a duplicate of the dedup key: skips it, and returns the
/// shard of each row written.
pub(crate) const ON_INBOX_DUPLICATE: &str =
    " ON CONFLICT (tenant, target_kind, target_id, signal_id) DO NOTHING RETURNING shard";

/// `INSERT [OR FAIL] INTO entity_states (…) `: the head of an entity-state insert.
pub(crate) fn insert_states<DB: Backend + OrFail>(out: &mut AstPass<'_, '_, DB>) {
    out.push_sql("INSERT");
    out.push_sql(DB::OR_FAIL);
    out.push_sql(
        " INTO entity_states (kind, tenant, id, version, state, updated_at, state_version) ",
    );
}

/// The columns of an event insert (`seq` is drawn by the table), in the order both backends
/// bind them.
pub(crate) const EVENT_COLUMNS: &str =
    "id, event_type, source_kind, source_id, tenant, occurred_at, payload, metadata, version";

/// What an event insert does with an id already stored: skips it.
pub(crate) const ON_EVENT_DUPLICATE: &str = " ON CONFLICT (id) DO NOTHING";

/// What an entity-state insert does on an existing key: the version moves up by the row's,
/// the state and time are replaced.
pub(crate) const ON_STATE_CONFLICT: &str = " ON CONFLICT (kind, tenant, id) DO UPDATE SET \
     version = entity_states.version + excluded.version, \
     state = excluded.state, updated_at = excluded.updated_at, \
     state_version = excluded.state_version";

impl<const N: usize> QueryId for MarkDelivered<'_, N> {
    type QueryId = MarkDelivered<'static, N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const N: usize> RunQueryDsl<Conn> for MarkDelivered<'_, N> {}

/// `INSERT INTO entity_states … ON CONFLICT DO UPDATE` of `N` states (distinct keys): a new
/// row starts at `version`, an existing one moves up by it (diesel never keeps an upsert
/// prepared).
pub(crate) struct UpsertStates<'a, const N: usize>(pub(crate) &'a [NewEntityStateRow<'a>; N]);

impl<DB, const N: usize> QueryFragment<DB> for UpsertStates<'_, N>
where
    DB: Backend
        + HasSqlType<Text>
        + HasSqlType<BigInt>
        + HasSqlType<Binary>
        + HasSqlType<Integer>
        + OrFail,
    i64: ToSql<BigInt, DB>,
    i32: ToSql<Integer, DB>,
    str: ToSql<Text, DB>,
    [u8]: ToSql<Binary, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        insert_states(&mut out);
        out.push_sql("VALUES ");
        for (i, row) in self.0.iter().enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            out.push_bind_param::<Text, _>(row.kind)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(row.tenant)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(row.id)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.version)?;
            out.push_sql(", ");
            out.push_bind_param::<Binary, _>(row.state)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.updated_at)?;
            out.push_sql(", ");
            out.push_bind_param::<Integer, _>(&row.state_version)?;
            out.push_sql(")");
        }
        out.push_sql(ON_STATE_CONFLICT);
        Ok(())
    }
}

impl<const N: usize> QueryId for UpsertStates<'_, N> {
    type QueryId = UpsertStates<'static, N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const N: usize> RunQueryDsl<Conn> for UpsertStates<'_, N> {}

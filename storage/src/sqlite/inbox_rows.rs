//! Inbox inserts on SQLite: a write's rows stored shard by shard, `seq` in the write's order.
//!
//! ```text
//!  DrawSeqs        UPDATE inbox_sequence SET last = last + n RETURNING last
//!                    ─► the block of n seqs last-n+1 ..= last, given out in the write's order
//!  InsertInbox<N>  INSERT OR FAIL INTO inbox_messages (seq, …) VALUES (…N rows, by shard)
//!                    ON CONFLICT (dedup key) DO NOTHING RETURNING shard
//! ```
//!
//! A page reads, and its commit marks delivered, rows of one shard. The table keeps rows in
//! the order they were inserted (its rowid), so a write of many shards' rows laid out in the
//! order they came would put one row of a shard in every 16 (with 16 shards), and a page's
//! commit would rewrite a table page for every row or two. Inserted sorted by shard (stable,
//! so a target's rows keep their order), each write's rows of a shard share a page or two.
//!
//! `seq` is therefore not the rowid but a column of its own (migration `shard_runs`): one
//! counter over all shards, in the order the rows were written. The writer draws a block of
//! numbers in the same write transaction as the rows; writers are serialised, so blocks are
//! drawn in commit order. A row skipped as a duplicate leaves its number unused. Both
//! statements have constant text (for a given `N`, cut by `ladder!`) and a static query id:
//! diesel prepares them once per connection.

use crate::error::Failure;
use crate::rows::NewInboxRow;
use crate::sql::ladder;
use crate::sql::prepared::{INBOX_COLUMNS, ON_INBOX_DUPLICATE};
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text};
use diesel::sqlite::Sqlite;
use diesel::{QueryResult, RunQueryDsl, SqliteConnection};

/// Inserts `rows` with fresh `seq`s in their order, shard by shard, skipping duplicates of
/// the dedup key: the shards of the rows written.
pub(crate) fn insert(
    conn: &mut SqliteConnection,
    rows: &[NewInboxRow],
) -> Result<Vec<i32>, Failure> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // A slice holds at most isize::MAX rows: the casts are lossless.
    let last: i64 = DrawSeqs {
        count: rows.len() as i64,
    }
    .get_result(conn)?;
    let first = last - rows.len() as i64 + 1;
    let mut numbered: Vec<(i64, &NewInboxRow)> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| (first + i as i64, row))
        .collect();
    by_shard(&mut numbered);
    let mut shards = Vec::with_capacity(rows.len());
    ladder!(numbered.as_slice(), |values| {
        shards.extend(InsertInbox(values).get_results::<i32>(conn)?);
    });
    Ok(shards)
}

/// Orders numbered rows by shard, keeping the write's order within each shard.
fn by_shard(numbered: &mut [(i64, &NewInboxRow)]) {
    // Stable: a shard's rows (and so a target's) stay in seq order.
    numbered.sort_by_key(|(_, row)| row.shard);
}

/// `UPDATE inbox_sequence SET last = last + count RETURNING last`: draws `count` seqs, the
/// block ending at the value returned.
struct DrawSeqs {
    count: i64,
}

impl QueryFragment<Sqlite> for DrawSeqs {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        out.push_sql("UPDATE inbox_sequence SET last = last + ");
        out.push_bind_param::<BigInt, _>(&self.count)?;
        out.push_sql(" WHERE id = 1 RETURNING last");
        Ok(())
    }
}

impl Query for DrawSeqs {
    type SqlType = BigInt;
}

impl QueryId for DrawSeqs {
    type QueryId = DrawSeqs;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for DrawSeqs {}

/// `INSERT OR FAIL INTO inbox_messages (seq, …) VALUES (…)` of `N` rows with their seqs, in
/// this order, skipping duplicates of the dedup key, returning the shard of each row written
/// (`OR FAIL`: see `sql::prepared::OrFail`).
struct InsertInbox<'a, const N: usize>(&'a [(i64, &'a NewInboxRow); N]);

impl<const N: usize> QueryFragment<Sqlite> for InsertInbox<'_, N> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        out.push_sql("INSERT OR FAIL INTO inbox_messages (seq, ");
        out.push_sql(INBOX_COLUMNS);
        out.push_sql(") VALUES ");
        for (i, (seq, row)) in self.0.iter().enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            out.push_bind_param::<BigInt, _>(seq)?;
            out.push_sql(", ");
            out.push_bind_param::<Integer, _>(&row.shard)?;
            for text in [
                &row.signal_id,
                &row.target_kind,
                &row.target_id,
                &row.tenant,
                &row.kind,
                &row.status,
            ] {
                out.push_sql(", ");
                out.push_bind_param::<Text, _>(text)?;
            }
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.received_at)?;
            for time in [&row.deliver_after, &row.expires_at] {
                out.push_sql(", ");
                out.push_bind_param::<Nullable<BigInt>, _>(time)?;
            }
            out.push_sql(", ");
            out.push_bind_param::<Binary, _>(&row.payload)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(&row.payload_type)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(&row.metadata)?;
            out.push_sql(", ");
            out.push_bind_param::<Integer, _>(&row.payload_version)?;
            out.push_sql(")");
        }
        out.push_sql(ON_INBOX_DUPLICATE);
        Ok(())
    }
}

impl<const N: usize> Query for InsertInbox<'_, N> {
    type SqlType = Integer;
}

impl<const N: usize> QueryId for InsertInbox<'_, N> {
    type QueryId = InsertInbox<'static, N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const N: usize> RunQueryDsl<Conn> for InsertInbox<'_, N> {}

#[cfg(test)]
mod tests {
    use super::insert;
    use crate::error::Failure;
    use crate::rows::NewInboxRow;
    use diesel::{Connection, QueryDsl, RunQueryDsl, SqliteConnection};
    use shardbox_conformance::fixtures::command;

    /// A migrated database file in `dir`, and a connection of its own to it.
    async fn migrated(dir: &tempfile::TempDir) -> SqliteConnection {
        let path = dir.path().join("rows.db");
        drop(crate::SqliteStorage::open(&path).await.expect("open"));
        SqliteConnection::establish(&path.to_string_lossy()).expect("connect")
    }

    fn rows(shards: &[u32]) -> Vec<NewInboxRow> {
        shards
            .iter()
            .enumerate()
            .map(|(i, &shard)| {
                NewInboxRow::from_write(command(shard, &format!("t{i}"), &format!("s{i}")))
                    .expect("row")
            })
            .collect()
    }

    /// `OR FAIL` keeps the rows a failing statement wrote before the failure; the transaction
    /// around it, rolled back on the error, takes them away with the rest.
    #[tokio::test]
    async fn a_statement_failing_midway_leaves_nothing_once_rolled_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = migrated(&dir).await;
        let mut batch = rows(&[0, 0, 0, 0]);
        batch[2].status = "no such status".into();
        let failed = conn.immediate_transaction(|conn| insert(conn, &batch));
        assert!(matches!(failed, Err(Failure::Db(_))), "{failed:?}");
        let count: i64 = crate::schema::inbox_messages::table
            .count()
            .get_result(&mut conn)
            .expect("count");
        assert_eq!(count, 0);
        // The seqs drawn in the rolled-back transaction are drawn again.
        let shards = conn
            .immediate_transaction(|conn| insert(conn, &rows(&[1, 0])))
            .expect("insert");
        assert_eq!(shards.len(), 2);
        let seqs: Vec<(i64, i32)> = crate::schema::inbox_messages::table
            .select((
                crate::schema::inbox_messages::seq,
                crate::schema::inbox_messages::shard,
            ))
            .order(crate::schema::inbox_messages::seq)
            .load(&mut conn)
            .expect("rows");
        assert_eq!(seqs, [(1, 1), (2, 0)], "seq in the order written, from 1");
    }
}

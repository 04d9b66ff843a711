//! Event appends on SQLite.
//!
//! ```text
//!  InsertEvents<N>  INSERT OR FAIL INTO events (…) VALUES (…N rows) ON CONFLICT (id) DO NOTHING
//! ```
//!
//! Rows are cut into arrays of fixed sizes (`ladder!`), a statement text per size with a
//! static query id, so diesel prepares each once per connection. No lock is needed for
//! events to commit in `seq` order: SQLite's writers are serialised. `OR FAIL`: see
//! `sql::prepared::OrFail` (diesel's own insert would write `INSERT INTO`, and SQLite would
//! keep a statement journal for it).

use crate::error::Failure;
use crate::rows::NewEventRow;
use crate::sql::ladder;
use crate::sql::prepared::{EVENT_COLUMNS, ON_EVENT_DUPLICATE};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Binary, Integer, Text};
use diesel::sqlite::Sqlite;
use diesel::{QueryResult, RunQueryDsl, SqliteConnection};

/// Appends `rows` in their order, skipping ids already stored: how many were appended.
pub(crate) fn append(conn: &mut SqliteConnection, rows: &[NewEventRow]) -> Result<usize, Failure> {
    let mut appended = 0;
    ladder!(rows, |values| {
        appended += InsertEvents(values).execute(conn)?;
    });
    Ok(appended)
}

/// `INSERT OR FAIL INTO events (…) VALUES (…)` of `N` events, skipping ids already stored.
struct InsertEvents<'a, const N: usize>(&'a [NewEventRow; N]);

impl<const N: usize> QueryFragment<Sqlite> for InsertEvents<'_, N> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        out.push_sql("INSERT OR FAIL INTO events (");
        out.push_sql(EVENT_COLUMNS);
        out.push_sql(") VALUES ");
        for (i, row) in self.0.iter().enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            let texts = [
                &row.id,
                &row.event_type,
                &row.source_kind,
                &row.source_id,
                &row.tenant,
            ];
            for (j, text) in texts.into_iter().enumerate() {
                if j > 0 {
                    out.push_sql(", ");
                }
                out.push_bind_param::<Text, _>(text)?;
            }
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.occurred_at)?;
            out.push_sql(", ");
            out.push_bind_param::<Binary, _>(&row.payload)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(&row.metadata)?;
            out.push_sql(", ");
            out.push_bind_param::<Integer, _>(&row.version)?;
            out.push_sql(")");
        }
        out.push_sql(ON_EVENT_DUPLICATE);
        Ok(())
    }
}

impl<const N: usize> QueryId for InsertEvents<'_, N> {
    type QueryId = InsertEvents<'static, N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const N: usize> RunQueryDsl<Conn> for InsertEvents<'_, N> {}

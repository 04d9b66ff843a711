//! [`Predicate`]: a condition written as constant SQL text that keeps its statement cacheable.
//!
//! ```text
//!  diesel::dsl::sql("status <> 'delivered'")  ─► marks the statement unsafe to cache: it is
//!                                                prepared again at every execution
//!  Predicate("status <> 'delivered'")         ─► the same SQL, cached per connection by its text
//! ```
//!
//! The partial indexes are only usable when a query states their predicate with the same
//! literal constants (a bound parameter does not match), so those predicates must be SQL
//! text. Diesel cannot know that an arbitrary `sql()` fragment is the same at every call and
//! never caches a statement containing one; a profile of the `latency` benchmark had a third
//! of the page reads' CPU in `sqlite3_prepare`. A `Predicate` holds only a `&'static str`, so
//! its text never changes, and a statement using it is cached under its SQL like any other.

use diesel::backend::Backend;
use diesel::expression::{
    is_aggregate, AppearsOnTable, Expression, SelectableExpression, ValidGrouping,
};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, Nullable};
use diesel::QueryResult;

/// A boolean condition given as constant SQL text (no binds, no user input).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Predicate(pub(crate) &'static str);

impl Expression for Predicate {
    type SqlType = Bool;
}

impl<DB: Backend> QueryFragment<DB> for Predicate {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(self.0);
        Ok(())
    }
}

impl QueryId for Predicate {
    type QueryId = ();
    // Not static: the statement cache keys a query holding one by its SQL text, which
    // includes this text.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<QS> AppearsOnTable<QS> for Predicate {}

impl<QS> SelectableExpression<QS> for Predicate {}

impl<GroupByClause> ValidGrouping<GroupByClause> for Predicate {
    type IsAggregate = is_aggregate::Never;
}

/// The predicate of the partial indexes over rows not yet delivered.
pub(crate) const NOT_DELIVERED: Predicate = Predicate("status <> 'delivered'");
/// The predicate of the page index: rows without a delay, not yet delivered.
pub(crate) const IMMEDIATE: Predicate =
    Predicate("deliver_after IS NULL AND status <> 'delivered'");
/// The predicate of the partial indexes over blocked rows.
pub(crate) const BLOCKED: Predicate = Predicate("status = 'blocked'");
/// The predicate of the partial index over replayed rows of a catch-up.
pub(crate) const CATCHING_UP: Predicate = Predicate("status = 'to_catch_up'");
/// The predicate of the partial index over rows with a delay, retry or hold.
pub(crate) const DELAYED: Predicate =
    Predicate("deliver_after IS NOT NULL AND status <> 'delivered'");
/// Of the rows `DELAYED` selects, those a page may read (to_deliver and
/// to_catch_up). Not an index condition on purpose: `status = ? OR status = ?` lets
/// PostgreSQL without statistics pick `inbox_due` and read every pending row of the
/// shard, due later or not.
pub(crate) const NOT_BLOCKED: Predicate = Predicate("status <> 'blocked'");
/// The predicate of the partial index over rows that failed at least once.
pub(crate) const RETRYING: Predicate = Predicate("attempts > 0 AND status <> 'delivered'");
/// The predicate of the partial index over delivered rows kept for deduplication.
pub(crate) const KEPT: Predicate = Predicate("keep_until IS NOT NULL");
/// The predicate of the partial index over rows with a TTL not yet delivered.
pub(crate) const EXPIRING: Predicate =
    Predicate("expires_at IS NOT NULL AND status <> 'delivered'");

diesel::define_sql_function! {
    /// `COALESCE(value, otherwise)` over big integers: a condition on a nullable column that
    /// keeps a partial index over that column's non-null rows out of the planner's choice,
    /// with the statement still cacheable.
    fn coalesce(value: Nullable<BigInt>, otherwise: BigInt) -> BigInt;
}

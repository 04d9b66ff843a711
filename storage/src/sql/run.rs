//! Running a diesel statement from code generic over the connection, with no where-clause.
//!
//! ```text
//!  fn unit<C: Dialect>(conn: &mut C)      one body for every backend
//!    diesel::update(…).execute(conn)      RunSql::execute: the statement's type is concrete,
//!        │                                so the compiler checks here, once, that every
//!        │                                backend compiled in can run it (`Executable`)
//!        ▼
//!    C::execute_statement(statement)      SharedConnection, implemented by each connection
//!                                         type: diesel's own `execute` on the concrete type
//! ```
//!
//! Diesel checks a statement against one backend. A function generic over "any connection"
//! would need a where-clause per statement shape (diesel itself advises bounding on
//! `YourQuery: QueryFragment<DB>`), and most statement types cannot be named. Here the
//! bound is turned around: a statement built from the schema's tables has a concrete type,
//! which [`Executable`] (or [`Loadable`]) requires to run on each backend compiled in; the
//! connection only has to be a [`SharedConnection`]. After monomorphisation the call is
//! diesel's own `execute`/`load` on the concrete connection, as before.
//!
//! Import [`RunSql`] instead of diesel's `RunQueryDsl` (its methods have the same names) in a
//! module of generic units.

use diesel::query_dsl::methods::{ExecuteDsl, LimitDsl};
use diesel::query_dsl::LoadQuery;
use diesel::{QueryResult, RunQueryDsl};

#[cfg(feature = "postgres")]
use diesel::PgConnection;
#[cfg(feature = "sqlite")]
use diesel::SqliteConnection;

/// A statement SQLite can execute (nothing to check in a build without SQLite).
#[cfg(feature = "sqlite")]
pub(crate) trait ExecutableOnSqlite: ExecuteDsl<SqliteConnection> {}
#[cfg(feature = "sqlite")]
impl<Q: ExecuteDsl<SqliteConnection>> ExecutableOnSqlite for Q {}
#[cfg(not(feature = "sqlite"))]
pub(crate) trait ExecutableOnSqlite {}
#[cfg(not(feature = "sqlite"))]
impl<Q> ExecutableOnSqlite for Q {}

/// A statement PostgreSQL can execute (nothing to check in a build without PostgreSQL).
#[cfg(feature = "postgres")]
pub(crate) trait ExecutableOnPostgres: ExecuteDsl<PgConnection> {}
#[cfg(feature = "postgres")]
impl<Q: ExecuteDsl<PgConnection>> ExecutableOnPostgres for Q {}
#[cfg(not(feature = "postgres"))]
pub(crate) trait ExecutableOnPostgres {}
#[cfg(not(feature = "postgres"))]
impl<Q> ExecutableOnPostgres for Q {}

/// A statement every backend compiled in can execute.
pub(crate) trait Executable: ExecutableOnSqlite + ExecutableOnPostgres {}
impl<Q: ExecutableOnSqlite + ExecutableOnPostgres> Executable for Q {}

/// A query SQLite can load rows `U` from (borrowing for `'q`).
#[cfg(feature = "sqlite")]
pub(crate) trait LoadableOnSqlite<'q, U>:
    LoadQuery<'q, SqliteConnection, U> + RunQueryDsl<SqliteConnection>
{
}
#[cfg(feature = "sqlite")]
impl<'q, U, Q: LoadQuery<'q, SqliteConnection, U> + RunQueryDsl<SqliteConnection>>
    LoadableOnSqlite<'q, U> for Q
{
}
#[cfg(not(feature = "sqlite"))]
pub(crate) trait LoadableOnSqlite<'q, U> {}
#[cfg(not(feature = "sqlite"))]
impl<U, Q> LoadableOnSqlite<'_, U> for Q {}

/// A query PostgreSQL can load rows `U` from (borrowing for `'q`).
#[cfg(feature = "postgres")]
pub(crate) trait LoadableOnPostgres<'q, U>:
    LoadQuery<'q, PgConnection, U> + RunQueryDsl<PgConnection>
{
}
#[cfg(feature = "postgres")]
impl<'q, U, Q: LoadQuery<'q, PgConnection, U> + RunQueryDsl<PgConnection>> LoadableOnPostgres<'q, U>
    for Q
{
}
#[cfg(not(feature = "postgres"))]
pub(crate) trait LoadableOnPostgres<'q, U> {}
#[cfg(not(feature = "postgres"))]
impl<U, Q> LoadableOnPostgres<'_, U> for Q {}

/// A query every backend compiled in can load rows `U` from.
pub(crate) trait Loadable<'q, U>:
    LoadableOnSqlite<'q, U> + LoadableOnPostgres<'q, U>
{
}
impl<'q, U, Q: LoadableOnSqlite<'q, U> + LoadableOnPostgres<'q, U>> Loadable<'q, U> for Q {}

/// A connection type that runs any [`Executable`] or [`Loadable`] statement: diesel's
/// `RunQueryDsl` on the concrete type.
pub(crate) trait SharedConnection: diesel::Connection + Sized {
    /// `RunQueryDsl::execute`.
    fn execute_statement<Q: Executable>(&mut self, statement: Q) -> QueryResult<usize>;

    /// `RunQueryDsl::load`.
    fn load_rows<'q, U, Q: Loadable<'q, U>>(&mut self, query: Q) -> QueryResult<Vec<U>>;

    /// `RunQueryDsl::get_result`.
    fn load_row<'q, U, Q: Loadable<'q, U>>(&mut self, query: Q) -> QueryResult<U>;
}

#[cfg(feature = "sqlite")]
impl SharedConnection for SqliteConnection {
    fn execute_statement<Q: Executable>(&mut self, statement: Q) -> QueryResult<usize> {
        ExecuteDsl::execute(statement, self)
    }

    fn load_rows<'q, U, Q: Loadable<'q, U>>(&mut self, query: Q) -> QueryResult<Vec<U>> {
        RunQueryDsl::load(query, self)
    }

    fn load_row<'q, U, Q: Loadable<'q, U>>(&mut self, query: Q) -> QueryResult<U> {
        RunQueryDsl::get_result(query, self)
    }
}

#[cfg(feature = "postgres")]
impl SharedConnection for PgConnection {
    fn execute_statement<Q: Executable>(&mut self, statement: Q) -> QueryResult<usize> {
        ExecuteDsl::execute(statement, self)
    }

    fn load_rows<'q, U, Q: Loadable<'q, U>>(&mut self, query: Q) -> QueryResult<Vec<U>> {
        RunQueryDsl::load(query, self)
    }

    fn load_row<'q, U, Q: Loadable<'q, U>>(&mut self, query: Q) -> QueryResult<U> {
        RunQueryDsl::get_result(query, self)
    }
}

/// Diesel's `RunQueryDsl`, for a connection whose type is generic: the same method names,
/// checked against every backend compiled in.
pub(crate) trait RunSql: Sized {
    /// Executes the statement: the rows it touched.
    fn execute(self, conn: &mut impl SharedConnection) -> QueryResult<usize>
    where
        Self: Executable,
    {
        conn.execute_statement(self)
    }

    /// Every row of the query.
    fn load<'q, U>(self, conn: &mut impl SharedConnection) -> QueryResult<Vec<U>>
    where
        Self: Loadable<'q, U>,
    {
        conn.load_rows(self)
    }

    /// Every row of the query (a statement's `RETURNING` rows).
    fn get_results<'q, U>(self, conn: &mut impl SharedConnection) -> QueryResult<Vec<U>>
    where
        Self: Loadable<'q, U>,
    {
        conn.load_rows(self)
    }

    /// The one row of the query (`NotFound` if none).
    fn get_result<'q, U>(self, conn: &mut impl SharedConnection) -> QueryResult<U>
    where
        Self: Loadable<'q, U>,
    {
        conn.load_row(self)
    }

    /// The first row of the query (`LIMIT 1`; `NotFound` if none).
    fn first<'q, U>(self, conn: &mut impl SharedConnection) -> QueryResult<U>
    where
        Self: LimitDsl,
        diesel::dsl::Limit<Self>: Loadable<'q, U>,
    {
        conn.load_row(LimitDsl::limit(self, 1))
    }
}

// Only for diesel's statements and query sources (all have a query id): on any type, the
// by-value `first` would shadow a slice's `first` on a `Vec`.
impl<T: diesel::query_builder::QueryId> RunSql for T {}

/// A backend whose `Selectable` impls name the columns of a row type; a derived
/// `Selectable` names the same columns for every backend.
#[cfg(feature = "sqlite")]
type ColumnsBackend = diesel::sqlite::Sqlite;
#[cfg(not(feature = "sqlite"))]
type ColumnsBackend = diesel::pg::Pg;

/// The columns of row type `T` (a `#[derive(Queryable, Selectable)]` struct), to `select`
/// and then load `T` from in generic code. `T::as_select()` names the backend in its type,
/// which generic code does not know; these columns, loaded by `Queryable` in field order,
/// are the same statement.
pub(crate) fn columns_of<T>() -> <T as diesel::Selectable<ColumnsBackend>>::SelectExpression
where
    T: diesel::Selectable<ColumnsBackend>,
{
    T::construct_selection()
}

//! The SQL of every storage operation, written once for SQLite and PostgreSQL.
//!
//! ```text
//!  sql::units!()            ─► free functions `fn(&mut Conn, …) -> Result<_, Failure>`, one
//!                              per unit of work, stamped into a backend's `units` module
//!  sql::storage_impls!(S,m) ─► the async storage traits for S, each method one
//!                              `db.run(|conn| m::unit(conn, …))` on the blocking pool
//!  Dialect                  ─► what differs: transaction kinds, advisory locks
//! ```
//!
//! Diesel's query builder is typed per backend, and a function generic over "any diesel
//! connection" needs a where-clause per query shape. Instead the query code lives in macros
//! (one file per concept) that expand to ordinary functions over the concrete connection type
//! `Conn` of the module they are invoked in. Each backend supplies the few things that really
//! differ through [`Dialect`]: SQLite writes in `BEGIN IMMEDIATE` transactions and needs no
//! extra locks (writers are serialised by the database); PostgreSQL takes transaction-level
//! advisory locks where a check-then-insert must be atomic or where commit order matters.

pub(crate) mod catch_up;
pub(crate) mod commit;
pub(crate) mod dead_letters;
pub(crate) mod entities;
pub(crate) mod events;
pub(crate) mod inbox;
pub(crate) mod page_read;
pub(crate) mod predicate;
pub(crate) mod prelude;
pub(crate) mod prepared;
pub(crate) mod registry;
pub(crate) mod traits;

use crate::error::Failure;

/// Rows per multi-row `INSERT`, kept well under both backends' bind-parameter limits
/// (SQLite 32766, PostgreSQL 65535): an inbox row binds 17 values, a dead letter 22.
pub(crate) const INSERT_CHUNK: usize = 1000;

/// Runs `$statement` (a closure-like body over `$values`) with the one element of `$rows`
/// when it holds one, else with the slice. Diesel never keeps a multi-row `INSERT` or an
/// `IN (…)` list prepared (its text depends on the count), but does keep the single-row or
/// single-value form, so a stage or send of one message — the common case at low rates — does
/// not parse these statements again.
macro_rules! one_or_many {
    ($rows:expr, |$values:ident| $statement:expr) => {
        match $rows {
            [$values] => $statement,
            $values => $statement,
        }
    };
}
pub(crate) use one_or_many;

/// Values per `IN (…)` list.
pub(crate) const IN_CHUNK: usize = 1000;

/// What differs between the backends, implemented by their connection types.
pub(crate) trait Dialect: diesel::Connection + Sized {
    /// Runs `work` in a transaction that writes. SQLite: `BEGIN IMMEDIATE`, so that the
    /// write lock is taken up front (waiting up to `busy_timeout`) instead of failing with
    /// "database is locked" when a reader upgrades. PostgreSQL: `READ COMMITTED`.
    fn write_transaction<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, Failure>,
    ) -> Result<T, Failure>;

    /// Runs `work`, a single write statement, as atomic as `write_transaction` makes it.
    /// SQLite: `write_transaction` (the writer gate and the write lock up front).
    /// PostgreSQL: on its own, without `BEGIN` and `COMMIT` — one statement is a transaction
    /// of its own, and two round trips fewer.
    fn write_statement<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, Failure>,
    ) -> Result<T, Failure>;

    /// Inside a write transaction: serialises catch-up starts of one projection kind and
    /// tenant until the transaction ends, so that "check for overlap, then insert" is atomic.
    fn lock_catch_up_start(&mut self, projection_kind: &str, tenant: &str) -> Result<(), Failure>;

    /// Inside a write transaction, right before appending events: serialises event appends
    /// until the transaction ends, so that events commit in `seq` order and a reader paging
    /// by `seq` never skips an event that committed late with a lower `seq`.
    ///
    /// Nothing that can wait on another transaction may follow it in the transaction (only
    /// the event insert does), which keeps it free of deadlocks.
    fn lock_event_append(&mut self) -> Result<(), Failure>;

    /// The stored states of `ids` (of `kind` and `tenant`), in any order.
    fn load_state_rows(
        &mut self,
        kind: &str,
        tenant: &str,
        ids: &[String],
    ) -> Result<Vec<crate::rows::EntityStateRow>, Failure>;
}

/// Stamps every unit of work into the invoking module, over its type alias `Conn` (a
/// connection type implementing [`Dialect`]).
macro_rules! units {
    () => {
        #[allow(unused_imports)]
        use $crate::sql::prelude::*;
        $crate::sql::inbox::inbox_units!();
        $crate::sql::commit::commit_units!();
        $crate::sql::registry::registry_units!();
        $crate::sql::events::event_units!();
        $crate::sql::entities::entity_units!();
        $crate::sql::catch_up::catch_up_units!();
        $crate::sql::dead_letters::dead_letter_units!();
    };
}
pub(crate) use traits::storage_impls;
pub(crate) use units;

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
//!
//! How to read the macro bodies (where each unit lives, how to find one an editor cannot
//! jump to) and why they stay macros: `docs/architecture.md`, "The SQL layer of
//! `shardbox-storage`".

pub(crate) mod catch_up;
pub(crate) mod catch_up_spread;
pub(crate) mod commit;
pub(crate) mod dead_letters;
pub(crate) mod entities;
pub(crate) mod events;
pub(crate) mod in_transaction;
pub(crate) mod inbox;
pub(crate) mod kind_controls;
pub(crate) mod outbox;
pub(crate) mod outcomes;
pub(crate) mod page_read;
pub(crate) mod predicate;
pub(crate) mod prelude;
pub(crate) mod prepared;
pub(crate) mod registry;
pub(crate) mod reshard;
pub(crate) mod stage_statement;
pub(crate) mod traits;
pub(crate) mod versions;

use crate::error::Failure;
use crate::rows::{NewEntityStateRow, NewEventRow, NewInboxRow};

/// Rows per multi-row `INSERT`, kept well under both backends' bind-parameter limits
/// (SQLite 32766, PostgreSQL 65535): an inbox row binds 17 values, a dead letter 22.
pub(crate) const INSERT_CHUNK: usize = 1000;

/// Runs `$statement` (a closure-like body over `$values`, which may use `?`) over `$rows`
/// cut into fixed-size arrays: as many of [`LADDER`]'s first size as fit, then of the next,
/// down to single rows. Diesel never keeps a statement prepared whose text depends on a
/// slice's length (a multi-row `INSERT`, an `IN (…)` list), but it does keep one built from an
/// array `&[T; N]`, whose length is part of its type: so every statement here is prepared
/// once per connection and size. On SQLite that preparation happened inside the write lock,
/// for every page's delivered rows, states and events and for every batch of sends.
/// PostgreSQL, where each statement is a round trip, writes several rows with one statement
/// of array parameters instead (see `Dialect::insert_inbox_rows`); a single row takes the
/// plain one-row form on both.
macro_rules! ladder {
    ($rows:expr, |$values:ident| $statement:expr) => {{
        let mut rest = $rows;
        while !rest.is_empty() {
            if let Some(($values, tail)) = rest.split_first_chunk::<{ $crate::sql::LADDER[0] }>() {
                $statement;
                rest = tail;
            } else if let Some(($values, tail)) =
                rest.split_first_chunk::<{ $crate::sql::LADDER[1] }>()
            {
                $statement;
                rest = tail;
            } else if let Some(($values, tail)) =
                rest.split_first_chunk::<{ $crate::sql::LADDER[2] }>()
            {
                $statement;
                rest = tail;
            } else if let Some(($values, tail)) =
                rest.split_first_chunk::<{ $crate::sql::LADDER[3] }>()
            {
                $statement;
                rest = tail;
            }
        }
    }};
}
pub(crate) use ladder;

/// The array sizes [`ladder!`] cuts rows into, largest first: at most 3 statements of each
/// smaller size follow the largest ones.
pub(crate) const LADDER: [usize; 4] = [64, 16, 4, 1];

/// Values per `IN (…)` list.
pub(crate) const IN_CHUNK: usize = 1000;

/// A row of [`Dialect::insert_addressed_rows`]: the recorded `shard_count` setting (if any)
/// and a row written, if any: its shard and dedup key (tenant, target kind, target id, signal
/// id).
pub(crate) type AddressedRow = (
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

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

    /// Inside a write transaction, before any other session row is touched: locks the session
    /// rows of `shards` (sorted, distinct) in ascending order until the transaction ends.
    /// Every transaction that locks more than one shard's row (a catch-up start, a stage
    /// commit completing a catch-up) takes them this way, and every other takes one row, so
    /// no two can wait on each other in a circle. PostgreSQL: `SELECT … ORDER BY shard FOR
    /// UPDATE`; SQLite needs nothing, its write transactions exclude each other.
    fn lock_sessions_in_order(&mut self, shards: &[i32]) -> Result<(), Failure>;

    /// The clause a sub-select appends to hold the rows it read until the transaction ends,
    /// against a concurrent update (see `sql::kind_controls`). PostgreSQL: ` FOR SHARE`;
    /// SQLite: nothing, its write transactions exclude each other.
    const SHARE_LOCK: &'static str;

    /// Inside a write transaction: the recorded `shard_count` setting, read under a lock that
    /// holds until the transaction ends — `exclusive` for a re-sharding's switch, shared for
    /// a write that addresses rows by the count — so that no write commits rows addressed by
    /// a count a switch replaced meanwhile: a write that locked first is moved by the switch,
    /// one that locks after it reads the new count. PostgreSQL: `FOR UPDATE` / `FOR KEY
    /// SHARE` on the setting's row (a shared lock re-reads the row a switch committed while
    /// it waited); SQLite needs none, its write transactions exclude each other.
    fn read_shard_count_locked(&mut self, exclusive: bool) -> Result<Option<String>, Failure>;

    /// Inside a write transaction: serialises catch-up starts of one projection kind and
    /// tenant until the transaction ends, so that "check for overlap, then insert" is atomic.
    fn lock_catch_up_start(&mut self, projection_kind: &str, tenant: &str) -> Result<(), Failure>;

    /// Inside a write transaction, as its last statement but for other event appends: appends
    /// events in their order, skipping ids already stored, under a lock that serialises event
    /// appends until the transaction ends — so that events commit in `seq` order and a reader
    /// paging by `seq` never skips an event that committed late with a lower `seq`. Returns
    /// how many were appended.
    ///
    /// PostgreSQL takes the lock in the same statement as the insert (one round trip,
    /// `postgres::arrays`); SQLite needs none, its writers being serialised, and writes the
    /// rows in statements of fixed sizes (`sqlite::event_rows`). Nothing that can wait on
    /// another transaction may follow the append in the transaction, which keeps the lock
    /// free of deadlocks.
    fn append_event_rows(&mut self, rows: &[NewEventRow]) -> Result<usize, Failure>;

    /// Inside a write transaction, before outbox rows are inserted: takes the lock event
    /// appends take (PostgreSQL; held to the end of the transaction), so that outbox ids, like
    /// event `seq`s, are handed out in commit order and a relay that read past an id never
    /// finds an earlier one committed later. SQLite needs none, its writers being
    /// serialised. Only the event append may follow it in the transaction.
    fn lock_appends(&mut self) -> Result<(), Failure>;

    /// The database's clock in µs since the epoch, as an SQL expression of type `BIGINT`: the
    /// clock every node's lease and membership times are read off (`WorkRegistry::clock_now`).
    /// PostgreSQL: the server's `clock_timestamp()`. SQLite: `julianday('now')`, the clock of
    /// the machine that holds the file (ms precision), one clock for every process on it.
    const CLOCK_NOW_MICROS: &'static str;

    /// Whether `rows` inbox rows (with no events) are written by one statement, which then
    /// needs no transaction around it (see `write_statement`).
    fn inserts_in_one_statement(rows: usize) -> bool;

    /// Each kind of rows a write or a stage commit writes in numbers is written by the backend
    /// its own way. PostgreSQL, where each statement is a round trip, writes several rows
    /// with one statement of array parameters (`postgres::arrays`) and a single row in the
    /// plain one-row form, which measured cheaper. SQLite cuts the rows into statements of
    /// fixed sizes (`ladder!`), each kept prepared.
    ///
    /// Inbox rows in their order, skipping duplicates of the dedup key: the shards of the rows
    /// written. PostgreSQL draws `seq` from the column's identity; SQLite draws a block of
    /// `seq`s first and stores a write's rows shard by shard (`sqlite::inbox_rows`).
    fn insert_inbox_rows(&mut self, rows: &[NewInboxRow]) -> Result<Vec<i32>, Failure>;

    /// Outside a transaction: inbox rows (of one batch or of a group's, in order) addressed
    /// by `expected` shards, written by one statement that is a transaction of its own, only
    /// if no other shard count is recorded — read under the lock of
    /// [`Dialect::read_shard_count_locked`] in that statement. `Some(rows)`, one per row
    /// written or one for none (see [`AddressedRow`]); `None` where the backend has no such
    /// statement and a write transaction checks first (SQLite, where that costs no round
    /// trip). PostgreSQL: `postgres::arrays::AddressedInboxRows`.
    fn insert_addressed_rows(
        &mut self,
        rows: &[&NewInboxRow],
        expected: u32,
    ) -> Option<Result<Vec<AddressedRow>, Failure>>;

    /// Whether the backend has [`Dialect::commit_stage_statement`]: if not (the default), a
    /// stage commit takes the write transaction without even looking at its shape.
    const STAGE_STATEMENT: bool = false;

    /// Outside a transaction: a stage commit of the common shape (see `sql::stage_statement`)
    /// as one statement that is a transaction of its own, taking the locks the write
    /// transaction takes in its order. `None` where the backend has no such statement
    /// (the default; SQLite, where the transaction's statements cost no round trip).
    /// PostgreSQL: `postgres::stage_statement`.
    fn commit_stage_statement(
        &mut self,
        _stage: &stage_statement::StageStatement<'_>,
    ) -> Option<Result<stage_statement::StageCounts, Failure>> {
        None
    }

    /// States of distinct keys: a new row starts at its `version`, an existing one moves up
    /// by it (see [`Dialect::insert_inbox_rows`]).
    fn upsert_state_rows(&mut self, rows: &[NewEntityStateRow<'_>]) -> Result<(), Failure>;

    /// Rows `seqs` (distinct) of `shard` marked delivered at `at` until `keep_until` (both
    /// µs): the rows touched (see [`Dialect::insert_inbox_rows`]).
    fn mark_delivered_rows(
        &mut self,
        shard: i32,
        seqs: &[i64],
        at: i64,
        keep_until: i64,
    ) -> Result<usize, Failure>;

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
        $crate::sql::reshard::reshard_units!();
        $crate::sql::events::event_units!();
        $crate::sql::entities::entity_units!();
        $crate::sql::catch_up::catch_up_units!();
        $crate::sql::catch_up_spread::catch_up_spread_units!();
        $crate::sql::dead_letters::dead_letter_units!();
        $crate::sql::outcomes::outcome_units!();
        $crate::sql::kind_controls::kind_control_units!();
        $crate::sql::versions::version_units!();
        $crate::sql::outbox::outbox_units!();
    };
}
pub(crate) use traits::storage_impls;
pub(crate) use units;

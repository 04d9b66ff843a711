//! The Inbox's SQL: deduplicating writes, due pages in `seq` order, next due time, counts.
//!
//! Index use (see the migrations):
//!
//! ```text
//!  read_page  one range of inbox_immediate (shard, seq) WHERE deliver_after IS NULL AND
//!             not delivered, LIMIT n, plus the rows whose delay has passed from
//!             inbox_delayed (shard, deliver_after) up to now, the first n by seq, merged
//!             by seq: rows due later are never read, whatever their number, and at most n
//!             of the due ones are loaded
//!  waiting    inbox_retrying (shard, seq) WHERE attempts > 0 AND not delivered
//!  blocked    inbox_blocked_by_shard (shard, seq) WHERE status = 'blocked'
//!  next_due   inbox_delayed  (shard, deliver_after) WHERE deliver_after set AND not delivered
//!  expired    inbox_expiring (expires_at) WHERE expires_at set AND not delivered
//! ```
//!
//! The literal predicates (`attempts > 0`, `status <> 'delivered'`) are written as SQL text on
//! purpose: a partial index is only usable when the query states its predicate with the same
//! constants, which a bound parameter does not.
//!
//! ```text
//!  write    deduplicating inserts, addressed writes, the written shards' report
//!  read     due pages, expired rows, next due time, shards with work to purge
//!  counts   the inbox's counts and per-shard and per-kind depths
//!  inspect  whole-table reads for tests and small databases
//! ```

pub(crate) mod counts;
pub(crate) mod inspect;
pub(crate) mod read;
pub(crate) mod write;

/// Stamps every unit of this folder; see [`crate::sql`].
macro_rules! inbox_units {
    () => {
        $crate::sql::inbox::write::inbox_write_units!();
        $crate::sql::inbox::read::inbox_read_units!();
        $crate::sql::inbox::counts::inbox_count_units!();
        $crate::sql::inbox::inspect::inbox_inspect_units!();
    };
}
pub(crate) use inbox_units;

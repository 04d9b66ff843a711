//! The stage commit: everything a stage decided, in one fenced write transaction.
//!
//! ```text
//!  1 fence      UPDATE shard_sessions SET lease_until WHERE shard, epoch, node   0 rows → LeaseLost
//!  1b app       the application's writes (SQL projections), a savepoint per target; a
//!               target whose writes failed gets its rows' failure changes (`sql::in_transaction`)
//!  2 rows       delivered / held / retried / blocked / removed, each touching exactly one
//!               row of the shard                                                  else → Corrupt;
//!               then parked behind a block, if the target is still blocked
//!  3 states     upsert (version + 1) or delete
//!  4 dead letters
//!  5 fan-out    inbox rows (deduplicated)
//!  6 purge      delivered rows of the shard past keep_until, at most purge_delivered
//!               (and as many command outcomes past theirs)
//!  6b outcomes  the commands' outcomes, upserted by key (see `sql::outcomes`)
//!  6c outbox    rows for targets in other databases, under the append lock
//!  7 events     appended last (see Dialect::append_event_rows)
//! ```
//!
//! A stage that only delivers rows, stores states and appends events — most stages — is
//! first offered to the backend as one statement (`sql::stage_statement`; PostgreSQL: one
//! round trip instead of six), with the same locks in the same order; the transaction above
//! commits everything else, and names the fault where that statement was refused.
//!
//! Any error rolls the whole transaction back. The fence comes first so that on PostgreSQL the
//! session row stays locked for the rest of the commit: a pick-up of the shard by another node
//! waits for it, and then sees the renewed lease.
//!
//! ```text
//!  stage   the commit's order (1–7 above), the one-statement form, the fence, held rows
//!          released
//!  rows    step 2: the row changes, grouped into few statements, each checked
//!  states  step 3: entity states upserted or deleted
//!  retired steps 4 and 6: dead letters stored, delivered rows past their window purged
//! ```

pub(crate) mod retired;
pub(crate) mod rows;
pub(crate) mod stage;
pub(crate) mod states;

/// Stamps every unit of this folder; see [`crate::sql`].
macro_rules! commit_units {
    () => {
        $crate::sql::commit::stage::commit_stage_units!();
        $crate::sql::commit::rows::commit_row_units!();
        $crate::sql::commit::states::commit_state_units!();
        $crate::sql::commit::retired::commit_retired_units!();
    };
}
pub(crate) use commit_units;

//! The application's writes inside a stage commit (SQL projections), each target's in a
//! savepoint of its own.
//!
//! ```text
//!  per target: SAVEPOINT ─► apply 0 … n-1 ─► RELEASE                       all written
//!                              └ j failed ─► ROLLBACK TO ─► SAVEPOINT ─► apply 0 … j-1 again
//!                                            (until a prefix writes whole; j = 0: nothing)
//!              ─► its rows' changes replaced by the work's `settle_failure(j, error)`
//!  work for no row (a rebuild's reset) that fails ─► the whole commit fails
//! ```
//!
//! Runs after the fence and before the row changes, inside the commit's transaction: the
//! writes land with the rows they handle or not at all, and never under a lost lease. A write
//! that breaks the connection fails the whole commit (the rollback to the savepoint fails), so
//! the stage is retried as after any storage error.
//!
//! Plain code generic over the connection (no unit macro): nothing here differs between the
//! backends but the connection handed to the application.

use crate::error::Failure;
use crate::sql::outcomes::OutcomeRow;
use diesel::Connection;
use shardbox_core::storage::{
    apply_failed_batch, DeadLetter, FailedWrites, InTransaction, RowUpdate, TransactionError,
    TransactionalWork,
};
use std::any::Any;

/// Why a savepoint's writes stopped.
enum Stop {
    /// The application's write of message `.0` failed.
    App(usize, TransactionError),
    /// The driver failed on the savepoint itself.
    Db(diesel::result::Error),
}

impl From<diesel::result::Error> for Stop {
    fn from(e: diesel::result::Error) -> Self {
        Stop::Db(e)
    }
}

/// Runs every target's writes of `work` on `conn` (inside the commit's transaction) and
/// settles the targets whose writes failed: returns the commit's row changes and dead letters
/// with theirs replaced and added (and their outcomes added to `outcomes`), and the failed
/// rows' fates counted.
pub(crate) fn run<C: Connection + 'static>(
    conn: &mut C,
    work: &[InTransaction],
    (mut updates, mut dead_letters): (Vec<RowUpdate>, Vec<DeadLetter>),
    outcomes: &mut Vec<OutcomeRow>,
) -> Result<(Vec<RowUpdate>, Vec<DeadLetter>, FailedWrites), Failure> {
    let mut failed_writes = FailedWrites::default();
    for target in work {
        let Some((failed, error)) = write_longest_prefix(conn, &*target.work)? else {
            continue;
        };
        if target.seqs.is_empty() {
            // Work that stands for no row (a rebuild's reset) cannot fail alone.
            return Err(Failure::Storage(shardbox_core::StorageError::Query {
                database: "the application's tables".into(),
                reason: format!(
                    "the writes of `{}` inside the stage's transaction failed: {error}",
                    target.target.kind
                ),
                source: None,
            }));
        }
        let settled = target.work.settle_failure(failed, error);
        let mut records = Vec::new();
        let counts = apply_failed_batch(settled, &mut updates, &mut dead_letters, &mut records);
        failed_writes.add(&counts);
        outcomes.extend(records.into_iter().map(OutcomeRow::new));
    }
    Ok((updates, dead_letters, failed_writes))
}

/// Writes as many of `work`'s messages as succeed in order, in one savepoint: all of them, or
/// the ones before the first that fails, and returns that failure.
fn write_longest_prefix<C: Connection + 'static>(
    conn: &mut C,
    work: &dyn TransactionalWork,
) -> Result<Option<(usize, TransactionError)>, Failure> {
    let mut upto = work.len();
    let mut failure = None;
    while upto > 0 {
        match conn.transaction::<(), Stop, _>(|conn| {
            for i in 0..upto {
                let conn: &mut dyn Any = conn;
                work.apply(conn, i).map_err(|e| Stop::App(i, e))?;
            }
            Ok(())
        }) {
            Ok(()) => break,
            Err(Stop::App(i, e)) => {
                // Rolled back to the savepoint: write the messages before it again.
                upto = i;
                failure = Some((i, e));
            }
            Err(Stop::Db(e)) => return Err(Failure::Db(e)),
        }
    }
    Ok(failure)
}

//! A stage commit's row changes: grouped by kind into few statements, each checked to touch
//! exactly the rows of the stage's shard it names.

/// Stamps these units; see [`crate::sql`].
macro_rules! commit_row_units {
    () => {
        /// Applies the row changes, grouped into few statements; every change must hit
        /// exactly one row of `shard`. The statements run in a fixed order: the rows parked
        /// behind a block or a paused kind last, so that a block of this commit counts.
        fn update_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            updates: Vec<RowUpdate>,
            now: DateTime<Utc>,
        ) -> Result<(), Failure> {
            let changes = $crate::sql::commit::rows::RowChanges::group(updates);
            // The stage's time: when rows were delivered, or first failed.
            let at = micros(now);
            mark_delivered(conn, shard, changes.delivered, at)?;
            hold_rows(conn, shard, changes.held)?;
            retry_rows(conn, shard, changes.retried, at)?;
            block_rows(conn, shard, changes.blocked, at)?;
            remove_rows(conn, shard, changes.removed)?;
            park_rows(conn, shard, changes.behind_block, changes.paused)
        }

        /// Delivered rows marked delivered at `at` (µs), one statement per chunk of rows that
        /// share a `keep_until`.
        fn mark_delivered(
            conn: &mut Conn,
            shard: ShardIndex,
            delivered: BTreeMap<i64, Vec<i64>>,
            at: i64,
        ) -> Result<(), Failure> {
            let s = shard.as_i32();
            for (keep_until, seqs) in delivered {
                for_each_chunk(conn, shard, seqs, |conn, chunk| {
                    <Conn as Dialect>::mark_delivered_rows(conn, s, chunk, at, keep_until)
                })?;
            }
            Ok(())
        }

        /// Held rows made due at their `until`, one statement per chunk of rows that share it.
        fn hold_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            held: BTreeMap<i64, Vec<i64>>,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let s = shard.as_i32();
            for (until, seqs) in held {
                for_each_chunk(conn, shard, seqs, |conn, chunk| {
                    Ok(diesel::update(
                        im::inbox_messages
                            .filter(im::shard.eq(s))
                            .filter(im::seq.eq_any(chunk)),
                    )
                    .set(im::deliver_after.eq(Some(until)))
                    .execute(conn)?)
                })?;
            }
            Ok(())
        }

        /// Failed rows due again at their retry time, their first failure kept or set to
        /// `failed_at` (µs): one statement per row, each with its own time and error.
        fn retry_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            retried: Vec<$crate::sql::commit::rows::Retry>,
            failed_at: i64,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let s = shard.as_i32();
            for retry in retried {
                let touched = diesel::update(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq(retry.seq)),
                )
                .set((
                    im::deliver_after.eq(Some(retry.at)),
                    im::attempts.eq(retry.attempts),
                    im::last_error.eq(Some(retry.error)),
                    im::error_history.eq(retry.errors),
                    im::first_failed_at.eq(first_failed_at(failed_at)),
                ))
                .execute(conn)?;
                expect_rows(conn, shard, &[retry.seq], touched)?;
            }
            Ok(())
        }

        /// Failed rows blocked at `failed_at` (µs): one statement per row, each with its own
        /// error.
        fn block_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            blocked: Vec<$crate::sql::commit::rows::Block>,
            failed_at: i64,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let s = shard.as_i32();
            for block in blocked {
                let touched = diesel::update(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq(block.seq)),
                )
                .set((
                    im::status.eq(MessageStatus::Blocked.as_str()),
                    // A blocked row is never read by pages: deliver_after records when it
                    // was blocked.
                    im::deliver_after.eq(Some(failed_at)),
                    im::attempts.eq(block.attempts),
                    im::last_error.eq(Some(block.error)),
                    im::error_history.eq(block.errors),
                    im::first_failed_at.eq(first_failed_at(failed_at)),
                ))
                .execute(conn)?;
                expect_rows(conn, shard, &[block.seq], touched)?;
            }
            Ok(())
        }

        /// Removed rows deleted, one statement per chunk.
        fn remove_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            removed: Vec<i64>,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let s = shard.as_i32();
            for_each_chunk(conn, shard, removed, |conn, chunk| {
                Ok(diesel::delete(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq_any(chunk)),
                )
                .execute(conn)?)
            })
        }

        /// Rows parked behind a block, and rows of a paused kind, if the block or the pause
        /// still holds. Runs last of the row changes, so that a block of this commit counts.
        fn park_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            behind_block: Vec<i64>,
            paused: Vec<i64>,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let s = shard.as_i32();
            // Every row is touched (a row whose target is no longer blocked keeps its time),
            // so the count still proves that each one is a row of the shard.
            let parked = micros(shardbox_core::catch_up::parked_until());
            for_each_chunk(conn, shard, behind_block, |conn, chunk| {
                Ok(diesel::update(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq_any(chunk)),
                )
                .set(im::deliver_after.eq(park_if_blocked(parked)))
                .execute(conn)?)
            })?;
            // Likewise last, and only if the kind is still paused (see `sql::kind_controls`).
            for_each_chunk(conn, shard, paused, |conn, chunk| {
                Ok(diesel::update(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq_any(chunk)),
                )
                .set(
                    im::deliver_after.eq($crate::sql::kind_controls::park_if_paused(
                        parked,
                        <Conn as Dialect>::SHARE_LOCK,
                    )),
                )
                .execute(conn)?)
            })
        }

        /// `deliver_after` of a row behind a block: `parked` if its target has a blocked row
        /// (through `inbox_blocked`, whose predicate is stated literally), else unchanged.
        /// The commit runs after the fence, which on PostgreSQL holds the shard's session
        /// row: an unblock takes that row first, so it either committed before this
        /// statement (then it sees no blocked row) or waits for this commit (then it sees
        /// the parked row and releases it).
        fn park_if_blocked(
            parked: i64,
        ) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<BigInt>> {
            // SQL text: a correlated subquery diesel's DSL cannot state on an UPDATE's own
            // table; `parked` is a constant i64, nothing user-supplied is spliced.
            sql::<diesel::sql_types::Nullable<BigInt>>(&format!(
                "CASE WHEN EXISTS (SELECT 1 FROM inbox_messages b \
                 WHERE b.tenant = inbox_messages.tenant \
                 AND b.target_kind = inbox_messages.target_kind \
                 AND b.target_id = inbox_messages.target_id AND b.status = 'blocked') \
                 THEN {parked} ELSE deliver_after END"
            ))
        }

        /// `first_failed_at` kept if set, else `now` (µs): the time of the first failure.
        fn first_failed_at(
            now: i64,
        ) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<BigInt>> {
            // Built as SQL text: diesel has no COALESCE, and the value is a bound-free literal
            // of an i64, so nothing user-supplied is spliced.
            sql::<diesel::sql_types::Nullable<BigInt>>(&format!("COALESCE(first_failed_at, {now})"))
        }

        /// Runs `statement` over distinct `seqs` in chunks, checking that each chunk touched
        /// all of its rows.
        fn for_each_chunk(
            conn: &mut Conn,
            shard: ShardIndex,
            mut seqs: Vec<i64>,
            mut statement: impl FnMut(&mut Conn, &[i64]) -> Result<usize, Failure>,
        ) -> Result<(), Failure> {
            seqs.sort_unstable();
            seqs.dedup();
            for chunk in seqs.chunks(IN_CHUNK) {
                let touched = statement(conn, chunk)?;
                expect_rows(conn, shard, chunk, touched)?;
            }
            Ok(())
        }

        /// `Corrupt` naming the first of `seqs` that is not a row of `shard`, unless
        /// `touched` says every one was found.
        fn expect_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            seqs: &[i64],
            touched: usize,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            if touched == seqs.len() {
                return Ok(());
            }
            let found: Vec<i64> = im::inbox_messages
                .filter(im::shard.eq(shard.as_i32()))
                .filter(im::seq.eq_any(seqs))
                .select(im::seq)
                .load(conn)?;
            let missing = seqs.iter().find(|s| !found.contains(s)).copied();
            Err(Failure::corrupt(match missing {
                Some(seq) => {
                    format!("stage of shard {shard} updates row {seq} which is not in that shard")
                }
                None => format!(
                    "stage of shard {shard} updated {touched} rows where {} were expected",
                    seqs.len()
                ),
            }))
        }
    };
}
pub(crate) use commit_row_units;

use std::collections::BTreeMap;

use shardbox_core::storage::{RowChange, RowUpdate};

use crate::rows::{attempts_column, micros};

/// A stage's row changes grouped by kind, as [`commit_row_units`]'s `update_rows` writes
/// them: delivered and held rows keyed by their time (µs), so that rows sharing one share a
/// statement.
pub(crate) struct RowChanges {
    pub(crate) delivered: BTreeMap<i64, Vec<i64>>,
    pub(crate) held: BTreeMap<i64, Vec<i64>>,
    pub(crate) retried: Vec<Retry>,
    pub(crate) blocked: Vec<Block>,
    pub(crate) removed: Vec<i64>,
    pub(crate) behind_block: Vec<i64>,
    pub(crate) paused: Vec<i64>,
}

/// A row due again after a failure.
pub(crate) struct Retry {
    pub(crate) seq: i64,
    /// When it is due (µs).
    pub(crate) at: i64,
    pub(crate) attempts: i32,
    pub(crate) error: String,
    /// Its error history, stored form (see `ErrorHistory::to_stored`).
    pub(crate) errors: Option<String>,
}

/// A row blocked after a failure.
pub(crate) struct Block {
    pub(crate) seq: i64,
    pub(crate) attempts: i32,
    pub(crate) error: String,
    /// Its error history, stored form.
    pub(crate) errors: Option<String>,
}

impl RowChanges {
    /// `updates` grouped by kind, each group in the order of `updates`.
    pub(crate) fn group(updates: Vec<RowUpdate>) -> Self {
        let mut changes = RowChanges {
            delivered: BTreeMap::new(),
            held: BTreeMap::new(),
            retried: Vec::new(),
            blocked: Vec::new(),
            removed: Vec::new(),
            behind_block: Vec::new(),
            paused: Vec::new(),
        };
        for u in updates {
            match u.change {
                RowChange::Delivered { keep_until } => changes
                    .delivered
                    .entry(micros(keep_until))
                    .or_default()
                    .push(u.seq),
                RowChange::Hold { until } => {
                    changes.held.entry(micros(until)).or_default().push(u.seq)
                }
                RowChange::RetryAt {
                    at,
                    attempts,
                    error,
                    errors,
                } => changes.retried.push(Retry {
                    seq: u.seq,
                    at: micros(at),
                    attempts: attempts_column(attempts),
                    error,
                    errors: errors.to_stored(),
                }),
                RowChange::Block {
                    attempts,
                    error,
                    errors,
                } => changes.blocked.push(Block {
                    seq: u.seq,
                    attempts: attempts_column(attempts),
                    error,
                    errors: errors.to_stored(),
                }),
                RowChange::Remove => changes.removed.push(u.seq),
                RowChange::BehindBlock => changes.behind_block.push(u.seq),
                RowChange::Paused => changes.paused.push(u.seq),
            }
        }
        changes
    }
}

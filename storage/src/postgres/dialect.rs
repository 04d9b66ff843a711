//! What PostgreSQL does its own way ([`Dialect`] for [`PgConnection`]): `READ COMMITTED`
//! transactions, row and advisory locks where a check-then-write must be atomic or commit
//! order matters, and several rows of a kind written by one statement of array parameters
//! (see `arrays`) or a stage commit by one statement (see `stage_statement`).

use super::arrays::{AddressedInboxRows, DeliveredRows, EventRows, InboxRows, StateRows};
use super::stage_statement::StageCommitStatement;
use super::states_by_id::StatesById;
use super::{LOCK_CATCH_UP_START, LOCK_EVENT_APPEND};
use crate::error::Failure;
use crate::rows::{EntityStateRow, NewEntityStateRow, NewEventRow, NewInboxRow};
use crate::sql::prepared::UpsertStates;
use crate::sql::stage_statement::{StageCounts, StageStatement};
use crate::sql::{ladder, AddressedRow, Dialect};
use diesel::connection::Connection;
use diesel::sql_types::{Integer, Text};
use diesel::{PgConnection, RunQueryDsl};

impl Dialect for PgConnection {
    const SHARE_LOCK: &'static str = " FOR SHARE";

    fn write_transaction<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        self.transaction(work)
    }

    fn write_statement<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        work(self)
    }

    fn lock_sessions_in_order(&mut self, shards: &[i32]) -> Result<(), Failure> {
        // LockRows runs above the sort, so the rows are locked in shard order.
        diesel::sql_query(
            "SELECT shard FROM shard_sessions WHERE shard = ANY($1) ORDER BY shard FOR UPDATE",
        )
        .bind::<diesel::sql_types::Array<Integer>, _>(shards)
        .execute(self)?;
        Ok(())
    }

    fn read_shard_count_locked(&mut self, exclusive: bool) -> Result<Option<String>, Failure> {
        let query = if exclusive {
            "SELECT value FROM shardbox_settings WHERE name = 'shard_count' FOR UPDATE"
        } else {
            "SELECT value FROM shardbox_settings WHERE name = 'shard_count' FOR KEY SHARE"
        };
        use diesel::OptionalExtension;
        Ok(diesel::sql_query(query)
            .get_result::<crate::sql::reshard::SettingValue>(self)
            .optional()?
            .map(|s| s.value))
    }

    fn lock_catch_up_start(&mut self, kind: &str, tenant: &str) -> Result<(), Failure> {
        diesel::sql_query(
            "SELECT pg_advisory_xact_lock($1, \
             hashtext(COALESCE(current_schema(), '') || '/' || $2 || '/' || $3))",
        )
        .bind::<Integer, _>(LOCK_CATCH_UP_START)
        .bind::<Text, _>(kind)
        .bind::<Text, _>(tenant)
        .execute(self)?;
        Ok(())
    }

    fn lock_appends(&mut self) -> Result<(), Failure> {
        diesel::sql_query(
            "SELECT pg_advisory_xact_lock($1, hashtext(COALESCE(current_schema(), '')))",
        )
        .bind::<Integer, _>(LOCK_EVENT_APPEND)
        .execute(self)?;
        Ok(())
    }

    fn append_event_rows(&mut self, rows: &[NewEventRow]) -> Result<usize, Failure> {
        Ok(EventRows::new(rows, LOCK_EVENT_APPEND).execute(self)?)
    }

    const CLOCK_NOW_MICROS: &'static str =
        "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)";

    fn inserts_in_one_statement(_rows: usize) -> bool {
        true
    }

    fn insert_inbox_rows(&mut self, rows: &[NewInboxRow]) -> Result<Vec<i32>, Failure> {
        use crate::schema::inbox_messages::dsl as im;
        Ok(match rows {
            [] => Vec::new(),
            [row] => diesel::insert_into(im::inbox_messages)
                .values(row)
                .on_conflict((im::tenant, im::target_kind, im::target_id, im::signal_id))
                .do_nothing()
                .returning(im::shard)
                .get_results(self)?,
            rows => InboxRows::new(rows).load(self)?,
        })
    }

    fn insert_addressed_rows(
        &mut self,
        rows: &[&NewInboxRow],
        expected: u32,
    ) -> Option<Result<Vec<AddressedRow>, Failure>> {
        Some(
            AddressedInboxRows::new(rows, expected)
                .load(self)
                .map_err(Failure::from),
        )
    }

    const STAGE_STATEMENT: bool = true;

    fn commit_stage_statement(
        &mut self,
        stage: &StageStatement<'_>,
    ) -> Option<Result<StageCounts, Failure>> {
        let counts = if stage.events.is_empty() {
            StageCommitStatement::<false>::new(stage, LOCK_EVENT_APPEND).get_result(self)
        } else {
            StageCommitStatement::<true>::new(stage, LOCK_EVENT_APPEND).get_result(self)
        };
        let counts = counts.map_err(Failure::from).map(
            |(fenced, delivered, _stored, events, _checked): (i64, i64, i64, i64, i64)| {
                StageCounts {
                    fenced: fenced == 1,
                    // Counts of rows: never negative.
                    delivered: usize::try_from(delivered).unwrap_or(0),
                    events: usize::try_from(events).unwrap_or(0),
                }
            },
        );
        Some(counts)
    }

    fn upsert_state_rows(&mut self, rows: &[NewEntityStateRow<'_>]) -> Result<(), Failure> {
        if several(rows) {
            StateRows::new(rows).execute(self)?;
        } else {
            ladder!(rows, |one| {
                UpsertStates(one).execute(self)?;
            });
        }
        Ok(())
    }

    fn mark_delivered_rows(
        &mut self,
        shard: i32,
        seqs: &[i64],
        at: i64,
        keep_until: i64,
    ) -> Result<usize, Failure> {
        // The function the one-statement stage commit calls, for any number of rows: one
        // plan of the update per connection, a key probe whatever the inbox's size.
        let marked: i64 = DeliveredRows {
            shard,
            seqs,
            at,
            keep_until,
        }
        .get_result(self)?;
        Ok(usize::try_from(marked).unwrap_or(0))
    }

    fn load_state_rows(
        &mut self,
        kind: &str,
        tenant: &str,
        ids: &[String],
    ) -> Result<Vec<EntityStateRow>, Failure> {
        Ok(StatesById { kind, tenant, ids }.load(self)?)
    }
}

/// Whether rows are written with the array forms: a single row takes the plain one-row form,
/// which measured cheaper (with the array forms for single rows too, the two-node `latency`
/// p50 doubled).
fn several<T>(rows: &[T]) -> bool {
    rows.len() > 1
}

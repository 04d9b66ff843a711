//! Command outcomes: written with the stage commit, purged with the delivered rows, read by
//! the unique key.
//!
//! ```text
//!  commit  UpsertOutcomes<N>   INSERT … ON CONFLICT (key) DO UPDATE, cut by `ladder!`, so
//!                              every size is prepared once per connection (as the states)
//!  purge   up to `limit` rows of the shard whose keep_until passed (index shard, keep_until)
//!  read    the inbox row by the dedup key: still waiting ─► Pending; delivered within its
//!          window ─► Handled, its events found by their derived ids (unique index on
//!          events.id, 16 a statement); else the outcome row within its window ─► Decided,
//!          else Unknown
//!
//! A handled command has no outcome row: its delivered row is its outcome (see
//! `shardbox_core::model::outcome`), so the common outcome costs the stage no write.
//! ```
//!
//! The row is read before the outcome: the commit that decides removes or marks the row and
//! writes the outcome together, so a commit between the two reads shows as decided.

use crate::sql::prepared::OrFail;
use diesel::backend::Backend;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType, Integer, Nullable, Text};
use diesel::{QueryResult, RunQueryDsl};
use shardbox_core::OutcomeRecord;

/// An outcome as written.
pub(crate) struct OutcomeRow {
    pub(crate) tenant: String,
    pub(crate) target_kind: String,
    pub(crate) target_id: String,
    pub(crate) signal_id: String,
    pub(crate) shard: i32,
    pub(crate) outcome: &'static str,
    pub(crate) detail: Option<String>,
    pub(crate) event_ids: String,
    pub(crate) decided_at: i64,
    pub(crate) keep_until: i64,
}

impl OutcomeRow {
    /// The stored form of `record`.
    pub(crate) fn new(record: OutcomeRecord) -> Self {
        let (outcome, detail, event_ids) = record.outcome.to_stored();
        OutcomeRow {
            tenant: record.key.tenant,
            target_kind: record.key.target_kind,
            target_id: record.key.target_id,
            signal_id: record.key.signal_id.0,
            shard: record.shard.as_i32(),
            outcome,
            detail,
            event_ids,
            decided_at: crate::rows::micros(record.decided_at),
            keep_until: crate::rows::micros(record.keep_until),
        }
    }
}

/// What an outcome insert does with a key already recorded: replaces it.
const ON_OUTCOME_CONFLICT: &str =
    " ON CONFLICT (tenant, target_kind, target_id, signal_id) DO UPDATE SET \
     shard = excluded.shard, outcome = excluded.outcome, detail = excluded.detail, \
     event_ids = excluded.event_ids, decided_at = excluded.decided_at, \
     keep_until = excluded.keep_until";

/// `INSERT INTO command_outcomes … ON CONFLICT DO UPDATE` of `N` outcomes (distinct keys),
/// with constant text so that diesel keeps it prepared.
pub(crate) struct UpsertOutcomes<'a, const N: usize>(pub(crate) &'a [OutcomeRow; N]);

impl<DB, const N: usize> QueryFragment<DB> for UpsertOutcomes<'_, N>
where
    DB: Backend + HasSqlType<Text> + HasSqlType<BigInt> + HasSqlType<Integer> + OrFail,
    i64: ToSql<BigInt, DB>,
    i32: ToSql<Integer, DB>,
    str: ToSql<Text, DB>,
    Option<String>: ToSql<Nullable<Text>, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("INSERT");
        out.push_sql(DB::OR_FAIL);
        out.push_sql(
            " INTO command_outcomes (tenant, target_kind, target_id, signal_id, shard, \
             outcome, detail, event_ids, decided_at, keep_until) VALUES ",
        );
        for (i, row) in self.0.iter().enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            out.push_bind_param::<Text, _>(row.tenant.as_str())?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(row.target_kind.as_str())?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(row.target_id.as_str())?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(row.signal_id.as_str())?;
            out.push_sql(", ");
            out.push_bind_param::<Integer, _>(&row.shard)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(row.outcome)?;
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(&row.detail)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(row.event_ids.as_str())?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.decided_at)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&row.keep_until)?;
            out.push_sql(")");
        }
        out.push_sql(ON_OUTCOME_CONFLICT);
        Ok(())
    }
}

impl<const N: usize> QueryId for UpsertOutcomes<'_, N> {
    type QueryId = UpsertOutcomes<'static, N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const N: usize> RunQueryDsl<Conn> for UpsertOutcomes<'_, N> {}

/// Stamps the outcome units; see [`crate::sql`].
macro_rules! outcome_units {
    () => {
        /// Writes a stage's outcomes (inside its transaction).
        fn store_outcomes(
            conn: &mut Conn,
            rows: &[$crate::sql::outcomes::OutcomeRow],
        ) -> Result<(), Failure> {
            $crate::sql::ladder!(rows, |rows| {
                $crate::sql::outcomes::UpsertOutcomes(rows).execute(conn)?;
            });
            Ok(())
        }

        /// Deletes up to `limit` outcomes of `shard` forgotten at `now` (two statements, as
        /// the delivered rows' purge).
        fn purge_outcomes(
            conn: &mut Conn,
            shard: ShardIndex,
            now: DateTime<Utc>,
            limit: usize,
        ) -> Result<(), Failure> {
            use $crate::schema::command_outcomes::dsl as co;
            if limit == 0 {
                return Ok(());
            }
            let forgotten: Vec<(String, String, String, String)> = co::command_outcomes
                .filter(co::shard.eq(shard.as_i32()))
                .filter(co::keep_until.le(micros(now)))
                .order(co::keep_until.asc())
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select((co::tenant, co::target_kind, co::target_id, co::signal_id))
                .load(conn)?;
            for (tenant, kind, id, signal) in forgotten {
                diesel::delete(co::command_outcomes.find((tenant, kind, id, signal)))
                    .execute(conn)?;
            }
            Ok(())
        }

        /// Decides the command `key` anew as `outcome` at `now` where its record is still
        /// kept (its window unchanged): an operator's unblock.
        fn decide_outcome_again(
            conn: &mut Conn,
            key: &shardbox_core::DedupKey,
            outcome: &shardbox_core::CommandOutcome,
            now: DateTime<Utc>,
        ) -> Result<(), Failure> {
            use $crate::schema::command_outcomes::dsl as co;
            let (name, detail, events) = outcome.to_stored();
            diesel::update(co::command_outcomes.find((
                &key.tenant,
                &key.target_kind,
                &key.target_id,
                &key.signal_id.0,
            )))
            .set((
                co::outcome.eq(name),
                co::detail.eq(detail),
                co::event_ids.eq(events),
                co::decided_at.eq(micros(now)),
            ))
            .execute(conn)?;
            Ok(())
        }

        /// `InboxStore::outcome`.
        pub(crate) fn read_outcome(
            conn: &mut Conn,
            key: &shardbox_core::DedupKey,
            now: DateTime<Utc>,
        ) -> Result<shardbox_core::OutcomeLookup, Failure> {
            use shardbox_core::{CommandOutcome, OutcomeLookup};
            use $crate::schema::command_outcomes::dsl as co;
            use $crate::schema::inbox_messages::dsl as im;
            let row: Option<(String, Option<i64>, Option<i64>)> = im::inbox_messages
                .filter(im::tenant.eq(&key.tenant))
                .filter(im::target_kind.eq(&key.target_kind))
                .filter(im::target_id.eq(&key.target_id))
                .filter(im::signal_id.eq(&key.signal_id.0))
                .select((im::status, im::delivered_at, im::keep_until))
                .first(conn)
                .optional()?;
            match row {
                Some((status, _, _))
                    if status == MessageStatus::ToDeliver.as_str()
                        || status == MessageStatus::ToCatchUp.as_str() =>
                {
                    return Ok(OutcomeLookup::Pending);
                }
                // Handled: the delivered row is the outcome (rows delivered before
                // `delivered_at` existed fall through to their record).
                Some((status, Some(at), Some(keep_until)))
                    if status == MessageStatus::Delivered.as_str() && keep_until > micros(now) =>
                {
                    let events = shardbox_core::handled_events(key, |ids| {
                        use $crate::schema::events::dsl as ev;
                        let ids: Vec<&str> = ids.iter().map(|id| id.0.as_str()).collect();
                        let found: i64 = ev::events
                            .filter(ev::id.eq_any(ids))
                            .count()
                            .get_result(conn)?;
                        Ok::<_, Failure>(usize::try_from(found).unwrap_or(0))
                    })?;
                    return Ok(OutcomeLookup::Decided {
                        outcome: CommandOutcome::Handled { events },
                        decided_at: rows::time(at)?,
                    });
                }
                _ => {}
            }
            let row: Option<(String, Option<String>, String, i64, i64)> = co::command_outcomes
                .find((
                    &key.tenant,
                    &key.target_kind,
                    &key.target_id,
                    &key.signal_id.0,
                ))
                .select((
                    co::outcome,
                    co::detail,
                    co::event_ids,
                    co::decided_at,
                    co::keep_until,
                ))
                .first(conn)
                .optional()?;
            match row {
                Some((name, detail, events, decided_at, keep_until))
                    if keep_until > micros(now) =>
                {
                    let outcome = CommandOutcome::from_stored(&name, detail, &events)
                        .map_err(|e| Failure::corrupt(format!("outcome of {key}: {e}")))?;
                    Ok(OutcomeLookup::Decided {
                        outcome,
                        decided_at: rows::time(decided_at)?,
                    })
                }
                _ => Ok(OutcomeLookup::Unknown),
            }
        }
    };
}
pub(crate) use outcome_units;

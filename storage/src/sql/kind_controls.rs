//! The SQL of the kinds' stored controls (`shardbox_kind_controls`): pause, resume, run-time
//! settings, and the test a stage's park of a paused kind's row makes at commit.
//!
//! ```text
//!  pause    INSERT … or UPDATE paused_at (kept if already paused)
//!  resume   UPDATE paused_at = NULL  (waits for commits holding the row FOR SHARE)
//!           UPDATE inbox_messages SET deliver_after = NULL  (the kind's parked rows)
//!  commit   deliver_after = CASE WHEN EXISTS (paused control row [FOR SHARE]) THEN parked …
//! ```
//!
//! On PostgreSQL a stage's park reads the kind's control row `FOR SHARE` until its commit, so
//! a resume's update of that row waits for every such commit and then releases the rows they
//! parked; a park that reads the row after the resume sees it resumed and parks nothing. SQLite
//! needs no lock: its write transactions exclude each other.

/// `deliver_after` of a row of a paused kind (`RowChange::Paused`): `parked` if its kind has a
/// paused control row, else unchanged. `lock` is the dialect's row lock clause (`FOR SHARE`
/// on PostgreSQL, empty on SQLite).
pub(crate) fn park_if_paused(
    parked: i64,
    lock: &str,
) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::BigInt>> {
    // SQL text: a correlated subquery diesel's DSL cannot state on an UPDATE's own table;
    // `parked` is a constant i64 and `lock` a constant of the dialect: nothing user-supplied
    // is spliced.
    diesel::dsl::sql(&format!(
        "CASE WHEN EXISTS (SELECT 1 FROM shardbox_kind_controls c \
         WHERE c.kind = inbox_messages.target_kind AND c.paused_at IS NOT NULL{lock}) \
         THEN {parked} ELSE deliver_after END"
    ))
}

/// Stamps the kind-control units of work into a backend's `units` module.
macro_rules! kind_control_units {
    () => {
        /// A stored control row as the model's `KindControl`.
        fn kind_control_of(
            (kind, paused_at, settings, updated_at): (String, Option<i64>, String, i64),
        ) -> Result<shardbox_core::KindControl, Failure> {
            Ok(shardbox_core::KindControl {
                settings: shardbox_core::KindSettings::from_stored(&settings).map_err(|e| {
                    Failure::corrupt(format!(
                        "shardbox_kind_controls.settings of kind `{kind}` is `{settings}`: {e}"
                    ))
                })?,
                paused_since: rows::opt_time(paused_at)?,
                updated_at: rows::time(updated_at)?,
                kind,
            })
        }

        /// `KindControlStore::kind_controls`.
        pub(crate) fn kind_controls(
            conn: &mut Conn,
        ) -> Result<Vec<shardbox_core::KindControl>, Failure> {
            use $crate::schema::shardbox_kind_controls::dsl as kc;
            let rows: Vec<(String, Option<i64>, String, i64)> = kc::shardbox_kind_controls
                .order(kc::kind.asc())
                .select((kc::kind, kc::paused_at, kc::settings, kc::updated_at))
                .load(conn)?;
            rows.into_iter().map(kind_control_of).collect()
        }

        /// `KindControlStore::pause_kind`.
        pub(crate) fn pause_kind(
            conn: &mut Conn,
            kind: String,
            now: DateTime<Utc>,
        ) -> Result<bool, Failure> {
            use $crate::schema::shardbox_kind_controls::dsl as kc;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                let at = micros(now);
                let inserted = diesel::insert_into(kc::shardbox_kind_controls)
                    .values((
                        kc::kind.eq(&kind),
                        kc::paused_at.eq(Some(at)),
                        kc::settings.eq("{}"),
                        kc::updated_at.eq(at),
                    ))
                    .on_conflict_do_nothing()
                    .execute(conn)?;
                if inserted == 1 {
                    return Ok(true);
                }
                let paused = diesel::update(
                    kc::shardbox_kind_controls
                        .filter(kc::kind.eq(&kind))
                        .filter(kc::paused_at.is_null()),
                )
                .set((kc::paused_at.eq(Some(at)), kc::updated_at.eq(at)))
                .execute(conn)?;
                Ok(paused == 1)
            })
        }

        /// `KindControlStore::resume_kind`.
        pub(crate) fn resume_kind(
            conn: &mut Conn,
            kind: String,
            now: DateTime<Utc>,
        ) -> Result<shardbox_core::storage::ResumeReport, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            use $crate::schema::shardbox_kind_controls::dsl as kc;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                // First: on PostgreSQL this waits for the stage commits that read the row to
                // park (see the module docs), so that their rows are released below.
                let resumed = diesel::update(
                    kc::shardbox_kind_controls
                        .filter(kc::kind.eq(&kind))
                        .filter(kc::paused_at.is_not_null()),
                )
                .set((
                    kc::paused_at.eq(None::<i64>),
                    kc::updated_at.eq(micros(now)),
                ))
                .execute(conn)?;
                let mut shards: Vec<i32> = diesel::update(
                    im::inbox_messages
                        .filter(im::target_kind.eq(&kind))
                        .filter(
                            im::deliver_after.eq(micros(shardbox_core::catch_up::parked_until())),
                        )
                        .filter(im::status.ne(MessageStatus::Delivered.as_str()))
                        .filter(im::status.ne(MessageStatus::Blocked.as_str())),
                )
                .set(im::deliver_after.eq(None::<i64>))
                .returning(im::shard)
                .get_results(conn)?;
                let released = shards.len();
                shards.sort_unstable();
                shards.dedup();
                Ok(shardbox_core::storage::ResumeReport {
                    was_paused: resumed == 1,
                    released,
                    shards: shards
                        .into_iter()
                        .map(rows::shard)
                        .collect::<Result<_, _>>()?,
                })
            })
        }

        /// `KindControlStore::set_kind_settings`.
        pub(crate) fn set_kind_settings(
            conn: &mut Conn,
            kind: String,
            settings: shardbox_core::KindSettings,
            now: DateTime<Utc>,
        ) -> Result<(), Failure> {
            use $crate::schema::shardbox_kind_controls::dsl as kc;
            let stored = settings.to_stored();
            let at = micros(now);
            <Conn as Dialect>::write_statement(conn, |conn| {
                diesel::insert_into(kc::shardbox_kind_controls)
                    .values((
                        kc::kind.eq(&kind),
                        kc::paused_at.eq(None::<i64>),
                        kc::settings.eq(&stored),
                        kc::updated_at.eq(at),
                    ))
                    .on_conflict(kc::kind)
                    .do_update()
                    .set((kc::settings.eq(&stored), kc::updated_at.eq(at)))
                    .execute(conn)?;
                Ok(())
            })
        }
    };
}
pub(crate) use kind_control_units;

//! Catch-up jobs' SQL.
//!
//! Starting is "check for an overlapping running job, then insert" inside one write
//! transaction, made atomic against a concurrent start by `Dialect::lock_catch_up_start`
//! (SQLite: the immediate transaction already excludes other writers; PostgreSQL: an advisory
//! lock on the projection kind and tenant). The overlap rule itself is core's
//! `CatchUpTargets::overlaps`, so every backend refuses the same jobs.

/// Stamps the catch-up units; see [`crate::sql`].
macro_rules! catch_up_units {
    () => {
        /// `CatchUpStore::start_catch_up`.
        pub(crate) fn start_catch_up(
            conn: &mut Conn,
            job: NewCatchUp,
            shard_count: u32,
        ) -> Result<CatchUpJob, Failure> {
            use $crate::schema::catch_ups::dsl as cu;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                check_shard_count(conn, shard_count)?;
                <Conn as Dialect>::lock_catch_up_start(conn, &job.projection_kind, &job.tenant)?;
                let running: Vec<CatchUpRow> = cu::catch_ups
                    .filter(cu::projection_kind.eq(&job.projection_kind))
                    .filter(cu::tenant.eq(&job.tenant))
                    .filter(cu::status.ne_all(CatchUpStatus::FINISHED))
                    .order(cu::id.asc())
                    .select(CatchUpRow::as_select())
                    .load(conn)?;
                for row in running {
                    let other = row.into_job()?;
                    if other.spec.targets.overlaps(&job.targets) {
                        return Err(Failure::Storage(StorageError::CatchUpOverlap {
                            projection_kind: job.projection_kind,
                            running_job: other.id,
                        }));
                    }
                }
                // Reset the targets' states and re-fence the affected shards (see the trait).
                reset_targets(conn, &job, None)?;
                let mut created = CatchUpJob {
                    id: 0,
                    updated_at: job.created_at,
                    spec: job,
                    status: CatchUpStatus::Started,
                    cursor: 0,
                    until_seq: None,
                    replayed: 0,
                    finished_at: None,
                    cancel_requested_at: None,
                    spread: None,
                };
                created.spread = CatchUpJob::spread_of(&created.spec);
                created.id = diesel::insert_into(cu::catch_ups)
                    .values(NewCatchUpRow::from_job(&created)?)
                    .returning(cu::id)
                    .get_result(conn)?;
                if let Some(model) = &created.spec.version_of {
                    start_version_build(conn, model, &created.spec.projection_kind, created.id)?;
                }
                Ok(created)
            })
        }

        /// Deletes the states of `job`'s targets and re-fences its affected shards but `own`
        /// (epoch + 1, lease freed), inside the caller's transaction.
        pub(crate) fn reset_targets(
            conn: &mut Conn,
            job: &NewCatchUp,
            own: Option<ShardIndex>,
        ) -> Result<(), Failure> {
            use $crate::schema::entity_states::dsl as es;
            use $crate::schema::shard_sessions::dsl as ss;
            let reset = es::entity_states
                .filter(es::kind.eq(&job.projection_kind))
                .filter(es::tenant.eq(&job.tenant));
            match &job.targets {
                shardbox_core::storage::CatchUpTargets::All => {
                    diesel::delete(reset).execute(conn)?;
                }
                shardbox_core::storage::CatchUpTargets::Ids(ids) => {
                    for chunk in ids.chunks(INSERT_CHUNK) {
                        diesel::delete(reset.filter(es::id.eq_any(chunk))).execute(conn)?;
                    }
                }
            }
            let mut shards: Vec<i32> = job
                .affected_shards
                .iter()
                .filter(|s| Some(**s) != own)
                .map(|s| s.as_i32())
                .collect();
            shards.sort_unstable();
            shards.dedup();
            <Conn as Dialect>::lock_sessions_in_order(conn, &shards)?;
            for chunk in shards.chunks(INSERT_CHUNK) {
                diesel::update(ss::shard_sessions.filter(ss::shard.eq_any(chunk)))
                    .set((ss::epoch.eq(ss::epoch + 1), ss::lease_until.eq(None::<i64>)))
                    .execute(conn)?;
            }
            Ok(())
        }

        /// `CatchUpStore::catch_up`.
        pub(crate) fn catch_up(conn: &mut Conn, id: i64) -> Result<Option<CatchUpJob>, Failure> {
            catch_ups::table
                .find(id)
                .select(CatchUpRow::as_select())
                .first(conn)
                .optional()?
                .map(CatchUpRow::into_job)
                .transpose()
        }

        /// `CatchUpStore::cancel_catch_up`: one conditional update (a running job only, an
        /// earlier request kept), then the job as stored. A job that finished between the two
        /// statements cannot exist: the update and the read share one write transaction.
        pub(crate) fn cancel_catch_up(
            conn: &mut Conn,
            id: i64,
            at: DateTime<Utc>,
        ) -> Result<Option<CatchUpJob>, Failure> {
            use $crate::schema::catch_ups::dsl as cu;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                diesel::update(
                    cu::catch_ups
                        .find(id)
                        .filter(cu::status.ne_all(CatchUpStatus::FINISHED))
                        .filter(cu::cancel_requested_at.is_null()),
                )
                .set(cu::cancel_requested_at.eq(micros(at)))
                .execute(conn)?;
                let Some(job) = catch_up(conn, id)? else {
                    return Ok(None);
                };
                if job.status.is_finished() {
                    return Err(Failure::Storage(StorageError::CatchUpNotRunning {
                        job: id,
                        status: job.status.as_str().to_owned(),
                    }));
                }
                Ok(Some(job))
            })
        }

        /// `CatchUpStore::running_catch_ups`, oldest first.
        pub(crate) fn running_catch_ups(conn: &mut Conn) -> Result<Vec<CatchUpJob>, Failure> {
            use $crate::schema::catch_ups::dsl as cu;
            cu::catch_ups
                .filter(cu::status.ne_all(CatchUpStatus::FINISHED))
                .order(cu::id.asc())
                .select(CatchUpRow::as_select())
                .load(conn)?
                .into_iter()
                .map(CatchUpRow::into_job)
                .collect()
        }

        /// Stores the job as given (but its cancel request), inside the caller's transaction; a
        /// completed or cancelled job settles its parked rows (see `StageCommit::catch_ups`),
        /// re-fencing its shards but `own`.
        pub(crate) fn store_catch_up(
            conn: &mut Conn,
            job: &CatchUpJob,
            own: Option<ShardIndex>,
        ) -> Result<(), Failure> {
            let row = NewCatchUpRow::from_job(job)?;
            let updated = diesel::update(catch_ups::table.find(job.id))
                .set(&row)
                .execute(conn)?;
            if updated == 1 {
                if job.status.is_finished() {
                    settle_parked(conn, job, own)?;
                    finish_version_build(conn, job)?;
                }
                Ok(())
            } else {
                Err(Failure::corrupt(format!(
                    "catch-up job {} does not exist",
                    job.id
                )))
            }
        }

        /// `CatchUpStore::update_catch_up`: stores the job as given.
        pub(crate) fn update_catch_up(conn: &mut Conn, job: CatchUpJob) -> Result<(), Failure> {
            <Conn as Dialect>::write_transaction(conn, |conn| store_catch_up(conn, &job, None))
        }

        /// Settles the parked rows of finished (completed or cancelled) `job`: per affected shard, removes those the
        /// replay covered (event `seq <= cursor`, found through the unique index on
        /// `events.id`), clears `deliver_after` of the others (a range of `inbox_delayed`).
        /// The affected shards but `own` are re-fenced first: on PostgreSQL that waits for a
        /// commit in flight on one of them (it holds the shard's session row) to finish, so
        /// that the rows it parked are seen here (READ COMMITTED: each statement sees what
        /// committed before it started) and none is parked after.
        pub(crate) fn settle_parked(
            conn: &mut Conn,
            job: &CatchUpJob,
            own: Option<ShardIndex>,
        ) -> Result<usize, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            use $crate::schema::shard_sessions::dsl as ss;
            let parked = micros(shardbox_core::catch_up::parked_until());
            let shards: Vec<i32> = job
                .affected_shards_here()
                .iter()
                .map(|s| s.as_i32())
                .collect();
            let cursor = job.settled_cursor();
            let others: Vec<i32> = shards
                .iter()
                .copied()
                .filter(|s| Some(*s) != own.map(|o| o.as_i32()))
                .collect();
            for chunk in others.chunks(IN_CHUNK) {
                diesel::update(ss::shard_sessions.filter(ss::shard.eq_any(chunk)))
                    .set((ss::epoch.eq(ss::epoch + 1), ss::lease_until.eq(None::<i64>)))
                    .execute(conn)?;
            }
            let (mut removed, mut released) = (0usize, 0usize);
            for shard in &shards {
                // (seq, target id, whether the replay applied its event)
                let candidates: Vec<(i64, String, bool)> = im::inbox_messages
                    .filter(im::shard.eq(*shard))
                    .filter(DELAYED)
                    .filter(im::deliver_after.eq(parked))
                    .filter(im::status.eq(MessageStatus::ToDeliver.as_str()))
                    .filter(im::kind.eq(shardbox_core::MessageKind::Event.as_str()))
                    .filter(im::target_kind.eq(&job.spec.projection_kind))
                    .filter(im::tenant.eq(&job.spec.tenant))
                    .select((
                        im::seq,
                        im::target_id,
                        sql::<Bool>(
                            "EXISTS (SELECT 1 FROM events e \
                             WHERE e.id = inbox_messages.signal_id AND e.seq <= ",
                        )
                        .bind::<BigInt, _>(cursor)
                        .sql(")"),
                    ))
                    .load(conn)?;
                let (covered, rest): (Vec<_>, Vec<_>) = candidates
                    .into_iter()
                    .filter(|(_, id, _)| shardbox_core::catch_up::covers(job, &job.spec.tenant, id))
                    .partition(|(_, _, applied)| *applied);
                let covered: Vec<i64> = covered.into_iter().map(|(seq, _, _)| seq).collect();
                let rest: Vec<i64> = rest.into_iter().map(|(seq, _, _)| seq).collect();
                for chunk in covered.chunks(IN_CHUNK) {
                    removed += diesel::delete(
                        im::inbox_messages
                            .filter(im::shard.eq(*shard))
                            .filter(im::seq.eq_any(chunk)),
                    )
                    .execute(conn)?;
                }
                for chunk in rest.chunks(IN_CHUNK) {
                    released += diesel::update(
                        im::inbox_messages
                            .filter(im::shard.eq(*shard))
                            .filter(im::seq.eq_any(chunk)),
                    )
                    .set(im::deliver_after.eq(None::<i64>))
                    .execute(conn)?;
                }
            }
            tracing::debug!(job = job.id, removed, released, "parked rows settled");
            Ok(released)
        }

        /// `CatchUpStore::has_pending_replay`: per shard, indexed probes that read only
        /// pending rows (the page and delayed indexes for covered live rows, the
        /// to_catch_up index for replayed ones).
        pub(crate) fn has_pending_replay(
            conn: &mut Conn,
            projection_kind: String,
            tenant: String,
            shards: Vec<ShardIndex>,
            cursor: i64,
        ) -> Result<bool, Failure> {
            use $crate::schema::events::dsl as ev;
            use $crate::schema::inbox_messages::dsl as im;
            let parked = micros(shardbox_core::catch_up::parked_until());
            for shard in shards {
                // Live event rows the replay already covered, found through the unique
                // index on events.id: rows without a delay through the page index, held or
                // retrying ones (not parked: those are settled by the completion itself)
                // through the delayed index. Event seqs start at 1, so a cursor of 0 covers
                // nothing.
                let covering = if cursor > 0 {
                    [IMMEDIATE, DELAYED].as_slice()
                } else {
                    &[]
                };
                for &pending in covering {
                    let covered: Option<i64> = im::inbox_messages
                        .inner_join(ev::events.on(ev::id.eq(im::signal_id)))
                        .filter(im::shard.eq(shard.as_i32()))
                        .filter(pending)
                        .filter(im::status.eq(MessageStatus::ToDeliver.as_str()))
                        .filter(im::kind.eq(shardbox_core::MessageKind::Event.as_str()))
                        .filter(im::target_kind.eq(&projection_kind))
                        .filter(im::tenant.eq(&tenant))
                        .filter(ev::seq.le(cursor))
                        .filter(im::deliver_after.is_null().or(im::deliver_after.ne(parked)))
                        .select(im::seq)
                        .first(conn)
                        .optional()?;
                    if covered.is_some() {
                        return Ok(true);
                    }
                }
                if has_replayed_rows(conn, shard, &projection_kind, &tenant)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }

        /// Whether `shard` holds a replayed row (`to_catch_up`) of `projection_kind`/`tenant`
        /// (the to_catch_up index).
        pub(crate) fn has_replayed_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            projection_kind: &str,
            tenant: &str,
        ) -> Result<bool, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let found: Option<i64> = im::inbox_messages
                .filter(im::shard.eq(shard.as_i32()))
                .filter(CATCHING_UP)
                .filter(im::target_kind.eq(projection_kind))
                .filter(im::tenant.eq(tenant))
                .select(im::seq)
                .first(conn)
                .optional()?;
            Ok(found.is_some())
        }

        /// `CatchUpStore::purge_catch_ups`: finished jobs finished before `before`.
        pub(crate) fn purge_catch_ups(
            conn: &mut Conn,
            before: DateTime<Utc>,
        ) -> Result<usize, Failure> {
            <Conn as Dialect>::write_transaction(conn, |conn| {
                delete_completed_catch_ups(conn, before)
            })
        }

        /// Deletes the finished (completed or cancelled) jobs finished before `before`, inside
        /// the caller's transaction (a purge of its own, or a stage commit's).
        pub(crate) fn delete_completed_catch_ups(
            conn: &mut Conn,
            before: DateTime<Utc>,
        ) -> Result<usize, Failure> {
            use $crate::schema::catch_ups::dsl as cu;
            Ok(diesel::delete(
                cu::catch_ups
                    .filter(cu::status.eq_any(CatchUpStatus::FINISHED))
                    .filter(cu::finished_at.lt(micros(before))),
            )
            .execute(conn)?)
        }
    };
}
pub(crate) use catch_up_units;

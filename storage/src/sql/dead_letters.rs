//! The operators' SQL: dead letters (list, count, requeue, purge) and blocked targets.
//!
//! ```text
//!  list / count / purge   dead_letters filtered (kind, target, tenant, time, ids, after),
//!                         by id; purge selects the ids, then deletes them
//!  requeue                DELETE … RETURNING the dead letters, INSERT their messages into the
//!                         Inbox (deduplicated) — one write transaction: a concurrent requeue
//!                         of the same id finds it gone (PostgreSQL waits on the row lock)
//!  blocked targets        inbox_blocked (tenant, target_kind, target_id) WHERE blocked
//!  unblock                lock the target's shard session rows (a commit on the shard in
//!                         flight finishes first), then UPDATE / DELETE … WHERE target AND
//!                         status = 'blocked', then the target's parked rows due at once
//!                         (through the unique index on the target and signal)
//! ```
//!
//! None of these takes a shard lease: they never touch a row a worker may hold in a page (see
//! `shardbox_core::storage::DeadLetterStore`).

/// Stamps the operator units; see [`crate::sql`].
macro_rules! dead_letter_units {
    () => {
        /// The `dead_letters` rows `filter` selects (its limit not applied), boxed.
        fn filtered_dead_letters(
            filter: &shardbox_core::storage::DeadLetterFilter,
        ) -> dead_letters::BoxedQuery<'static, <Conn as diesel::Connection>::Backend> {
            use $crate::schema::dead_letters::dsl as dl;
            let mut q = dl::dead_letters.into_boxed();
            if let Some(kind) = &filter.target_kind {
                q = q.filter(dl::target_kind.eq(kind.clone()));
            }
            if let Some(id) = &filter.target_id {
                q = q.filter(dl::target_id.eq(id.clone()));
            }
            if let Some(tenant) = &filter.tenant {
                q = q.filter(dl::tenant.eq(tenant.clone()));
            }
            if let Some(since) = filter.since {
                q = q.filter(dl::last_attempt_at.ge(micros(since)));
            }
            if let Some(until) = filter.until {
                q = q.filter(dl::last_attempt_at.lt(micros(until)));
            }
            if !filter.ids.is_empty() {
                let ids: Vec<i64> = filter.ids.iter().map(|i| i.0).collect();
                q = q.filter(dl::id.eq_any(ids));
            }
            if let Some(after) = filter.after {
                q = q.filter(dl::id.gt(after.0));
            }
            q
        }

        /// The limit of `filter` as SQL wants it.
        fn dead_letter_limit(filter: &shardbox_core::storage::DeadLetterFilter) -> i64 {
            filter
                .limit
                .map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX))
        }

        /// `DeadLetterStore::list_dead_letters`.
        pub(crate) fn list_dead_letters(
            conn: &mut Conn,
            filter: shardbox_core::storage::DeadLetterFilter,
        ) -> Result<Vec<shardbox_core::storage::StoredDeadLetter>, Failure> {
            use $crate::schema::dead_letters::dsl as dl;
            filtered_dead_letters(&filter)
                .order(dl::id.asc())
                .limit(dead_letter_limit(&filter))
                .select(StoredDeadLetterRow::as_select())
                .load(conn)?
                .into_iter()
                .map(StoredDeadLetterRow::into_stored)
                .collect()
        }

        /// `DeadLetterStore::count_dead_letters`.
        pub(crate) fn count_dead_letters(
            conn: &mut Conn,
            filter: shardbox_core::storage::DeadLetterFilter,
        ) -> Result<u64, Failure> {
            let n: i64 = filtered_dead_letters(&filter).count().get_result(conn)?;
            Ok(u64::try_from(n).unwrap_or(0))
        }

        /// `DeadLetterStore::purge_dead_letters`.
        pub(crate) fn purge_dead_letters(
            conn: &mut Conn,
            filter: shardbox_core::storage::DeadLetterFilter,
        ) -> Result<u64, Failure> {
            use $crate::schema::dead_letters::dsl as dl;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                let ids: Vec<i64> = filtered_dead_letters(&filter)
                    .order(dl::id.asc())
                    .limit(dead_letter_limit(&filter))
                    .select(dl::id)
                    .load(conn)?;
                let mut purged = 0;
                for chunk in ids.chunks(IN_CHUNK) {
                    purged += diesel::delete(dl::dead_letters.filter(dl::id.eq_any(chunk)))
                        .execute(conn)?;
                }
                Ok(purged as u64)
            })
        }

        /// `DeadLetterStore::requeue_dead_letters`.
        pub(crate) fn requeue_dead_letters(
            conn: &mut Conn,
            requeue: Vec<shardbox_core::storage::Requeue>,
            shard_count: u32,
        ) -> Result<shardbox_core::storage::RequeueReport, Failure> {
            use $crate::schema::dead_letters::dsl as dl;
            let shards: BTreeMap<i64, ShardIndex> =
                requeue.iter().map(|r| (r.id.0, r.shard)).collect();
            let ids: Vec<i64> = shards.keys().copied().collect();
            <Conn as Dialect>::write_transaction(conn, |conn| {
                check_shard_count(conn, shard_count)?;
                let mut report = shardbox_core::storage::RequeueReport::default();
                let mut writes = Vec::new();
                for chunk in ids.chunks(IN_CHUNK) {
                    // Letters that never had a target (an event copy nobody could route)
                    // stay: there is no Inbox row to make of them.
                    let unaddressed: i64 = dl::dead_letters
                        .filter(dl::id.eq_any(chunk))
                        .filter(dl::target_id.eq(""))
                        .count()
                        .get_result(conn)?;
                    report.skipped += usize::try_from(unaddressed).unwrap_or(0);
                    let taken: Vec<StoredDeadLetterRow> = diesel::delete(
                        dl::dead_letters
                            .filter(dl::id.eq_any(chunk))
                            .filter(dl::target_id.ne("")),
                    )
                    .returning(StoredDeadLetterRow::as_returning())
                    .get_results(conn)?;
                    for row in taken {
                        let Some(shard) = shards.get(&row.id).copied() else {
                            continue;
                        };
                        let mut message = row.into_stored()?.letter.original.message;
                        message.deliver_after = None;
                        message.expires_at = None;
                        writes.push(shardbox_core::InboxWrite { shard, message });
                    }
                }
                let taken = writes.len();
                report.missing = ids.len().saturating_sub(report.skipped + taken);
                let mut written = WriteReport::default();
                insert_messages(conn, writes, &mut written)?;
                finish_report(&mut written);
                report.requeued = written.written;
                report.already_in_inbox = written.duplicates;
                report.shards = written.shards;
                Ok(report)
            })
        }

        /// `DeadLetterStore::blocked_targets`.
        pub(crate) fn blocked_targets(
            conn: &mut Conn,
            limit: usize,
        ) -> Result<Vec<shardbox_core::storage::BlockedTarget>, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            im::inbox_messages
                .filter(BLOCKED)
                .order(im::seq.asc())
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(InboxRow::as_select())
                .load(conn)?
                .into_iter()
                .map(|row| {
                    let m = row.into_message()?;
                    Ok(shardbox_core::storage::BlockedTarget {
                        target: EntityKey {
                            kind: m.message.target_kind,
                            tenant: m.message.tenant,
                            id: m.message.target_id,
                        },
                        shard: m.shard,
                        seq: m.seq,
                        signal_id: m.message.signal_id,
                        attempts: m.attempts,
                        last_error: m.last_error,
                        first_failed_at: m.first_failed_at,
                        blocked_at: m.message.deliver_after,
                    })
                })
                .collect()
        }

        /// `DeadLetterStore::unblock_target`: acts on the target's rows in status `blocked`,
        /// then makes its parked rows due.
        pub(crate) fn unblock_target(
            conn: &mut Conn,
            target: EntityKey,
            action: shardbox_core::storage::Unblock,
            now: DateTime<Utc>,
        ) -> Result<shardbox_core::storage::UnblockReport, Failure> {
            use shardbox_core::storage::Unblock;
            use $crate::schema::inbox_messages::dsl as im;
            let blocked = || {
                im::inbox_messages
                    .filter(im::tenant.eq(target.tenant.clone()))
                    .filter(im::target_kind.eq(target.kind.clone()))
                    .filter(im::target_id.eq(target.id.clone()))
                    .filter(BLOCKED)
            };
            <Conn as Dialect>::write_transaction(conn, |conn| {
                // On PostgreSQL a stage's commit holds its shard's session row from its
                // fence to its end: taking it here makes a commit in flight finish first, so
                // that the rows it parked behind the block are seen below, and makes a later
                // commit wait, so that it finds the target unblocked and parks nothing
                // (`RowChange::BehindBlock`). SQLite's writers are serialised anyway.
                let mut locked: Vec<i32> = blocked().select(im::shard).load(conn)?;
                locked.sort_unstable();
                locked.dedup();
                lock_sessions(conn, &locked)?;
                let rows: Vec<InboxMessage> = blocked()
                    .select(InboxRow::as_select())
                    .load(conn)?
                    .into_iter()
                    .map(InboxRow::into_message)
                    .collect::<Result<_, _>>()?;
                let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
                let mut shards: Vec<ShardIndex> = rows.iter().map(|r| r.shard).collect();
                shards.sort_unstable();
                shards.dedup();
                let decided: Vec<_> = rows
                    .iter()
                    .filter_map(|row| {
                        shardbox_core::storage::unblocked_outcome(action, row)
                            .map(|outcome| (row.dedup_key(), outcome))
                    })
                    .collect();
                let touched = match action {
                    Unblock::Requeue => diesel::update(blocked().filter(im::seq.eq_any(&seqs)))
                        .set((
                            im::status.eq(MessageStatus::ToDeliver.as_str()),
                            im::attempts.eq(0),
                            im::last_error.eq(None::<String>),
                            im::error_history.eq(None::<String>),
                            im::first_failed_at.eq(None::<i64>),
                            im::deliver_after.eq(None::<i64>),
                            im::expires_at.eq(None::<i64>),
                        ))
                        .execute(conn)?,
                    Unblock::Drop => {
                        diesel::delete(blocked().filter(im::seq.eq_any(&seqs))).execute(conn)?
                    }
                    Unblock::DeadLetter => {
                        let letters = rows
                            .into_iter()
                            .map(|row| {
                                DeadLetterRow::from_dead_letter(DeadLetter {
                                    reason: shardbox_core::storage::unblocked_reason(
                                        row.last_error.as_deref(),
                                    ),
                                    attempts: row.attempts,
                                    first_attempt_at: row.first_failed_at,
                                    last_attempt_at: now,
                                    original: row,
                                })
                            })
                            .collect::<Result<Vec<_>, _>>()?;
                        for chunk in letters.chunks(INSERT_CHUNK) {
                            diesel::insert_into(dead_letters::table)
                                .values(chunk)
                                .execute(conn)?;
                        }
                        diesel::delete(blocked().filter(im::seq.eq_any(&seqs))).execute(conn)?
                    }
                };
                for (key, outcome) in decided {
                    decide_outcome_again(conn, &key, &outcome, now)?;
                }
                let released = release_parked(conn, &target)?;
                for shard in &released {
                    shards.push(rows::shard(*shard)?);
                }
                shards.sort_unstable();
                shards.dedup();
                Ok(shardbox_core::storage::UnblockReport {
                    unblocked: touched,
                    released: released.len(),
                    shards,
                })
            })
        }

        /// Takes the session rows of `shards` (in shard order) until the transaction ends,
        /// without changing them.
        fn lock_sessions(conn: &mut Conn, shards: &[i32]) -> Result<(), Failure> {
            use $crate::schema::shard_sessions::dsl as ss;
            for chunk in shards.chunks(IN_CHUNK) {
                diesel::update(ss::shard_sessions.filter(ss::shard.eq_any(chunk)))
                    .set(ss::epoch.eq(ss::epoch))
                    .execute(conn)?;
            }
            Ok(())
        }

        /// Makes every parked row of `target` due at once (`deliver_after` cleared, so due
        /// whatever a reader's clock says, in `seq` order); returns each one's shard.
        fn release_parked(conn: &mut Conn, target: &EntityKey) -> Result<Vec<i32>, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            Ok(diesel::update(
                im::inbox_messages
                    .filter(im::tenant.eq(&target.tenant))
                    .filter(im::target_kind.eq(&target.kind))
                    .filter(im::target_id.eq(&target.id))
                    .filter(im::deliver_after.eq(micros(shardbox_core::catch_up::parked_until())))
                    .filter(im::status.ne(MessageStatus::Delivered.as_str()))
                    .filter(im::status.ne(MessageStatus::Blocked.as_str())),
            )
            .set(im::deliver_after.eq(None::<i64>))
            .returning(im::shard)
            .get_results(conn)?)
        }
    };
}
pub(crate) use dead_letter_units;

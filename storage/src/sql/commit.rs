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

/// Stamps the commit units; see [`crate::sql`].
macro_rules! commit_units {
    () => {
        /// `InboxStore::commit_stage`.
        pub(crate) fn commit_stage(
            conn: &mut Conn,
            commit: StageCommit,
        ) -> Result<CommitReport, Failure> {
            // Most stages only deliver their page: one statement where the backend has one.
            let one_statement = if <Conn as Dialect>::STAGE_STATEMENT {
                $crate::sql::stage_statement::one_statement_shape(&commit)
            } else {
                None
            };
            let outcome_purge = commit.outcome_purge_limit();
            let StageCommit {
                lease,
                now,
                lease_until,
                updates,
                states,
                writes,
                dead_letters,
                purge_delivered,
                catch_ups,
                purge_catch_ups_before,
                release_holds,
                outcomes,
                outcomes_decided: _,
                in_transaction,
            } = commit;
            let mut outcomes: Vec<_> = outcomes
                .into_iter()
                .map($crate::sql::outcomes::OutcomeRow::new)
                .collect();
            // The fan-out's rows are made before the transaction and dropped after it.
            let messages = $crate::rows::inbox_rows(writes.messages)?;
            let events = $crate::rows::event_rows(writes.events)?;
            // A completion (or cancellation) re-fences its job's other shards: take every session row it will
            // touch, its own included, in ascending order before the fence (see
            // `Dialect::lock_sessions_in_order`).
            let mut locked: Vec<i32> = catch_ups
                .iter()
                .filter(|job| job.status.is_finished())
                .flat_map(|job| job.spec.affected_shards.iter().map(|s| s.as_i32()))
                .collect();
            if !locked.is_empty() {
                locked.push(lease.shard.as_i32());
                locked.sort_unstable();
                locked.dedup();
            }
            if let Some(delivered) = one_statement {
                if let Some(report) = commit_in_one_statement(
                    conn,
                    &lease,
                    lease_until,
                    now,
                    delivered,
                    &states,
                    &events,
                )? {
                    return Ok(report);
                }
            }
            <Conn as Dialect>::write_transaction(conn, |conn| {
                if !locked.is_empty() {
                    <Conn as Dialect>::lock_sessions_in_order(conn, &locked)?;
                }
                fence(conn, &lease, lease_until)?;
                let (mut updates, mut dead_letters) = (updates, dead_letters);
                if !in_transaction.is_empty() {
                    // The application's writes, after the fence (see `sql::in_transaction`).
                    $crate::sql::in_transaction::run(
                        conn,
                        &in_transaction,
                        &mut updates,
                        &mut dead_letters,
                        &mut outcomes,
                    )?;
                }
                update_rows(conn, lease.shard, updates, now)?;
                for release in &release_holds {
                    release_hold(conn, lease.shard, release)?;
                }
                store_states(conn, states, now)?;
                insert_dead_letters(conn, dead_letters)?;
                for job in catch_ups {
                    store_catch_up(conn, &job, Some(lease.shard))?;
                }
                let catch_ups_purged = match purge_catch_ups_before {
                    Some(before) => delete_completed_catch_ups(conn, before)?,
                    None => 0,
                };
                let mut written = WriteReport::default();
                insert_rows(conn, &messages, &mut written)?;
                let purged = purge(conn, lease.shard, now, purge_delivered)?;
                purge_outcomes(conn, lease.shard, now, outcome_purge)?;
                store_outcomes(conn, &outcomes)?;
                append_events(conn, &events, &mut written)?;
                finish_report(&mut written);
                let mut lease = lease;
                lease.lease_until = lease_until;
                Ok(CommitReport {
                    lease,
                    written,
                    purged,
                    catch_ups_purged,
                })
            })
        }

        /// A stage of the common shape (`sql::stage_statement::one_statement_shape`: its
        /// `delivered` rows, `states` to upsert, `events`) as one statement: `Some` report if
        /// that statement committed it; `None` if the backend has none, or the statement wrote
        /// nothing (the lease was lost) or was refused and rolled back — then the write
        /// transaction commits it or names the fault.
        fn commit_in_one_statement(
            conn: &mut Conn,
            lease: &Lease,
            lease_until: DateTime<Utc>,
            now: DateTime<Utc>,
            (delivered, window): $crate::sql::stage_statement::DeliveredRows,
            states: &[EntityStateWrite],
            events: &[NewEventRow],
        ) -> Result<Option<CommitReport>, Failure> {
            // The shape has no deleted state.
            let (_, upserts) = state_rows(states, now);
            let stage = $crate::sql::stage_statement::StageStatement {
                shard: lease.shard.as_i32(),
                epoch: lease.epoch.0,
                node_id: &lease.node_id.0,
                lease_until: micros(lease_until),
                delivered: &delivered,
                at: micros(now),
                keep_until: window.map_or(0, micros),
                states: &upserts,
                events,
            };
            match <Conn as Dialect>::commit_stage_statement(conn, &stage) {
                None => Ok(None),
                Some(Ok(counts)) if counts.fenced && counts.delivered == delivered.len() => {
                    let mut lease = lease.clone();
                    lease.lease_until = lease_until;
                    Ok(Some(CommitReport {
                        lease,
                        written: WriteReport {
                            events: counts.events,
                            ..WriteReport::default()
                        },
                        purged: 0,
                        catch_ups_purged: 0,
                    }))
                }
                // Not fenced, so nothing written: the transaction reports the lost lease.
                Some(Ok(_)) => Ok(None),
                // Refused by the server, so rolled back (the statement is its transaction).
                // A lost connection leaves the outcome unknown: that error stands.
                Some(Err(Failure::Db(diesel::result::Error::DatabaseError(kind, _))))
                    if !matches!(kind, diesel::result::DatabaseErrorKind::ClosedConnection) =>
                {
                    Ok(None)
                }
                Some(Err(e)) => Err(e),
            }
        }

        /// Makes the rows of `release.target` in `shard` held until exactly `release.until` due
        /// (`StageCommit::release_holds`): a range of `inbox_delayed` (shard, deliver_after).
        fn release_hold(
            conn: &mut Conn,
            shard: ShardIndex,
            release: &shardbox_core::storage::HoldRelease,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            diesel::update(
                im::inbox_messages
                    .filter(im::shard.eq(shard.as_i32()))
                    .filter(im::deliver_after.eq(micros(release.until)))
                    .filter(im::status.eq(shardbox_core::MessageStatus::ToDeliver.as_str()))
                    .filter(im::tenant.eq(&release.target.tenant))
                    .filter(im::target_kind.eq(&release.target.kind))
                    .filter(im::target_id.eq(&release.target.id)),
            )
            .set(im::deliver_after.eq(None::<i64>))
            .execute(conn)?;
            Ok(())
        }

        /// Renews `lease` to `until` if its epoch and node still hold the shard, else
        /// `LeaseLost` (which rolls the transaction back).
        pub(crate) fn fence(
            conn: &mut Conn,
            lease: &Lease,
            until: DateTime<Utc>,
        ) -> Result<(), Failure> {
            use $crate::schema::shard_sessions::dsl as ss;
            let shard = lease.shard.as_i32();
            let renewed = SetLease {
                shard,
                epoch: lease.epoch.0,
                node_id: &lease.node_id.0,
                until: Some(micros(until)),
            }
            .execute(conn)?;
            if renewed == 1 {
                return Ok(());
            }
            let current: Option<i64> = ss::shard_sessions
                .find(shard)
                .select(ss::epoch)
                .first(conn)
                .optional()?;
            Err(Failure::Storage(StorageError::LeaseLost {
                shard: lease.shard,
                held: lease.epoch,
                current: current.map(LeaseEpoch),
            }))
        }

        /// Applies the row changes, grouped into few statements; every change must hit
        /// exactly one row of `shard`.
        fn update_rows(
            conn: &mut Conn,
            shard: ShardIndex,
            updates: Vec<RowUpdate>,
            now: DateTime<Utc>,
        ) -> Result<(), Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let s = shard.as_i32();
            // The stage's time: when rows were delivered, or first failed.
            let failed_at = micros(now);
            let mut delivered: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            let mut held: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
            let mut retried = Vec::new();
            let mut blocked = Vec::new();
            let mut removed = Vec::new();
            let mut behind_block = Vec::new();
            let mut paused = Vec::new();
            for u in updates {
                match u.change {
                    RowChange::Delivered { keep_until } => {
                        delivered.entry(micros(keep_until)).or_default().push(u.seq)
                    }
                    RowChange::Hold { until } => held.entry(micros(until)).or_default().push(u.seq),
                    RowChange::RetryAt {
                        at,
                        attempts,
                        error,
                    } => retried.push((u.seq, micros(at), rows::attempts_column(attempts), error)),
                    RowChange::Block { attempts, error } => {
                        blocked.push((u.seq, rows::attempts_column(attempts), error))
                    }
                    RowChange::Remove => removed.push(u.seq),
                    RowChange::BehindBlock => behind_block.push(u.seq),
                    RowChange::Paused => paused.push(u.seq),
                }
            }
            for (keep_until, seqs) in delivered {
                for_each_chunk(conn, shard, seqs, |conn, chunk| {
                    <Conn as Dialect>::mark_delivered_rows(conn, s, chunk, failed_at, keep_until)
                })?;
            }
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
            for (seq, at, attempts, error) in retried {
                let touched = diesel::update(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq(seq)),
                )
                .set((
                    im::deliver_after.eq(Some(at)),
                    im::attempts.eq(attempts),
                    im::last_error.eq(Some(error)),
                    im::first_failed_at.eq(first_failed_at(failed_at)),
                ))
                .execute(conn)?;
                expect_rows(conn, shard, &[seq], touched)?;
            }
            for (seq, attempts, error) in blocked {
                let touched = diesel::update(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq(seq)),
                )
                .set((
                    im::status.eq(MessageStatus::Blocked.as_str()),
                    // A blocked row is never read by pages: deliver_after records when it
                    // was blocked.
                    im::deliver_after.eq(Some(failed_at)),
                    im::attempts.eq(attempts),
                    im::last_error.eq(Some(error)),
                    im::first_failed_at.eq(first_failed_at(failed_at)),
                ))
                .execute(conn)?;
                expect_rows(conn, shard, &[seq], touched)?;
            }
            for_each_chunk(conn, shard, removed, |conn, chunk| {
                Ok(diesel::delete(
                    im::inbox_messages
                        .filter(im::shard.eq(s))
                        .filter(im::seq.eq_any(chunk)),
                )
                .execute(conn)?)
            })?;
            // Last, so that a block of this commit counts. Every row is touched (a row
            // whose target is no longer blocked keeps its time), so the count still proves
            // that each one is a row of the shard.
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

        /// Upserts (version + 1) or deletes entity states, in order.
        fn store_states(
            conn: &mut Conn,
            states: Vec<EntityStateWrite>,
            now: DateTime<Utc>,
        ) -> Result<(), Failure> {
            use $crate::schema::entity_states::dsl as es;
            let (deleted, upserts) = state_rows(&states, now);
            for key in deleted {
                diesel::delete(
                    es::entity_states
                        .filter(es::kind.eq(&key.kind))
                        .filter(es::tenant.eq(&key.tenant))
                        .filter(es::id.eq(&key.id)),
                )
                .execute(conn)?;
            }
            // A new row starts at its number of writes; an existing one moves up by it.
            <Conn as Dialect>::upsert_state_rows(conn, &upserts)
        }

        /// The keys `states` delete (before their upserts), and the rows to upsert, sorted by
        /// key: a key's number of writes after its last delete is its version step (each
        /// write a version, as if applied one by one) with its last state.
        fn state_rows(
            states: &[EntityStateWrite],
            now: DateTime<Utc>,
        ) -> (Vec<&EntityKey>, Vec<NewEntityStateRow<'_>>) {
            let now = micros(now);
            // Per key: whether the commit deletes it, how many writes follow the last delete
            // (each write is a version, as if applied one by one), and the last state. Sorted
            // by key, so that concurrent commits lock state rows in one order and one
            // statement never touches a key twice.
            let mut per_key: BTreeMap<&EntityKey, (bool, i64, Option<(&Vec<u8>, u32)>)> =
                BTreeMap::new();
            for w in states {
                let entry = per_key.entry(&w.key).or_insert((false, 0, None));
                match &w.state {
                    Some(state) => {
                        entry.1 += 1;
                        entry.2 = Some((state, w.state_version));
                    }
                    None => *entry = (true, 0, None),
                }
            }
            let mut deletes = Vec::new();
            let mut upserts = Vec::with_capacity(per_key.len());
            for (key, (deleted, writes, state)) in per_key {
                if deleted {
                    deletes.push(key);
                }
                if let Some((state, state_version)) = state {
                    upserts.push(NewEntityStateRow {
                        kind: &key.kind,
                        tenant: &key.tenant,
                        id: &key.id,
                        version: writes,
                        state,
                        updated_at: now,
                        // A version past i32::MAX is refused by `rows::version_column` for
                        // payloads; a state version that large saturates (never read back
                        // as a smaller one than the code's: it is then "newer").
                        state_version: i32::try_from(state_version).unwrap_or(i32::MAX),
                    });
                }
            }
            (deletes, upserts)
        }

        /// Inserts dead letters with their original rows.
        fn insert_dead_letters(conn: &mut Conn, letters: Vec<DeadLetter>) -> Result<(), Failure> {
            let rows = letters
                .into_iter()
                .map(DeadLetterRow::from_dead_letter)
                .collect::<Result<Vec<_>, _>>()?;
            for chunk in rows.chunks(INSERT_CHUNK) {
                diesel::insert_into(dead_letters::table)
                    .values(chunk)
                    .execute(conn)?;
            }
            Ok(())
        }

        /// Deletes at most `limit` delivered rows of `shard` whose window passed at `now`,
        /// oldest window first.
        fn purge(
            conn: &mut Conn,
            shard: ShardIndex,
            now: DateTime<Utc>,
            limit: usize,
        ) -> Result<usize, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            if limit == 0 {
                return Ok(0);
            }
            // Two statements: diesel does not take a LIMITed subselect as a DELETE filter.
            let expired: Vec<i64> = im::inbox_messages
                .filter(im::shard.eq(shard.as_i32()))
                .filter(im::keep_until.le(micros(now)))
                .filter(im::status.eq(MessageStatus::Delivered.as_str()))
                .order((im::keep_until.asc(), im::seq.asc()))
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(im::seq)
                .load(conn)?;
            if expired.is_empty() {
                return Ok(0);
            }
            Ok(
                diesel::delete(im::inbox_messages.filter(im::seq.eq_any(&expired)))
                    .execute(conn)?,
            )
        }
    };
}
pub(crate) use commit_units;

//! The stage commit's order: the one-statement form where the backend has one, else the fenced
//! write transaction (see [`super`]), with the fence itself and the smaller steps.

/// Stamps these units; see [`crate::sql`].
macro_rules! commit_stage_units {
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
                outbox,
            } = commit;
            let mut outcomes: Vec<_> = outcomes
                .into_iter()
                .map($crate::sql::outcomes::OutcomeRow::new)
                .collect();
            // The fan-out's rows are made before the transaction and dropped after it.
            let messages = $crate::rows::inbox_rows(writes.messages)?;
            let events = $crate::rows::event_rows(writes.events)?;
            let outbox = $crate::rows::outbox_rows(outbox)?;
            let locked = $crate::sql::commit::stage::sessions_to_lock(&catch_ups, lease.shard);
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
                // The application's writes, after the fence (see `sql::in_transaction`).
                let (updates, dead_letters, failed_writes) = $crate::sql::in_transaction::run(
                    conn,
                    &in_transaction,
                    (updates, dead_letters),
                    &mut outcomes,
                )?;
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
                // Under the append lock, as the events after them (`Dialect::lock_appends`).
                insert_outbox(conn, &outbox)?;
                append_events(conn, &events, &mut written)?;
                finish_report(&mut written);
                let mut lease = lease;
                lease.lease_until = lease_until;
                Ok(CommitReport {
                    lease,
                    written,
                    purged,
                    catch_ups_purged,
                    failed_writes,
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
                        failed_writes: Default::default(),
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
    };
}
pub(crate) use commit_stage_units;

/// The session rows a commit storing `catch_ups` in `shard` locks before its fence: a
/// completion (or cancellation) re-fences its job's other shards, so every session row it will
/// touch, its own included, is taken in ascending order first (see
/// `Dialect::lock_sessions_in_order`); none if no job finishes.
pub(crate) fn sessions_to_lock(
    catch_ups: &[shardbox_core::storage::CatchUpJob],
    shard: shardbox_core::ShardIndex,
) -> Vec<i32> {
    let mut locked: Vec<i32> = catch_ups
        .iter()
        .filter(|job| job.status.is_finished())
        .flat_map(|job| job.affected_shards_here().into_iter().map(|s| s.as_i32()))
        .collect();
    if !locked.is_empty() {
        locked.push(shard.as_i32());
        locked.sort_unstable();
        locked.dedup();
    }
    locked
}

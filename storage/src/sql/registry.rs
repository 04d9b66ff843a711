//! The lock table's SQL: pick up, renew, release shard leases.
//!
//! A pick-up is one compare-and-set: make sure the shard has a session row (`ON CONFLICT DO
//! NOTHING`; made only for a shard of the recorded layout, starting at the highest epoch of
//! any shard — see `sql::reshard`), then `UPDATE … SET epoch = epoch + 1 … WHERE lease is free or expired
//! RETURNING epoch`, after clearing an expired lease (which tells a takeover from a pick-up of
//! a free shard). On PostgreSQL a concurrent pick-up blocks on the row lock and re-checks the
//! `WHERE` against the new row, so exactly one wins; on SQLite the immediate transaction
//! serialises them. Renew and release are fenced by epoch and node.

/// Stamps the lock-table units; see [`crate::sql`].
macro_rules! registry_units {
    () => {
        /// Setting `name`: records `value` if absent, then reads what is recorded, in one
        /// write transaction (two first claimants racing record one value).
        fn claim_setting(conn: &mut Conn, name: &str, value: &str) -> Result<String, Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                diesel::insert_into(st::shardbox_settings)
                    .values((st::name.eq(name), st::value.eq(value)))
                    .on_conflict(st::name)
                    .do_nothing()
                    .execute(conn)?;
                Ok(st::shardbox_settings
                    .filter(st::name.eq(name))
                    .select(st::value)
                    .first(conn)?)
            })
        }

        /// Setting `name`, if recorded.
        fn setting(conn: &mut Conn, name: &str) -> Result<Option<String>, Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            Ok(st::shardbox_settings
                .filter(st::name.eq(name))
                .select(st::value)
                .first(conn)
                .optional()?)
        }

        /// `WorkRegistry::claim_shard_count`: the `shard_count` setting, claimed.
        pub(crate) fn claim_shard_count(conn: &mut Conn, shard_count: u32) -> Result<u32, Failure> {
            let recorded = claim_setting(conn, "shard_count", &shard_count.to_string())?;
            $crate::sql::reshard::parse_count(&recorded)
        }

        /// `WorkRegistry::beat`: one upsert (a node gone by `now` starts anew), after forgetting
        /// nodes gone for a day.
        pub(crate) fn beat(
            conn: &mut Conn,
            node_id: NodeId,
            now: DateTime<Utc>,
            alive_until: DateTime<Utc>,
            kinds: String,
        ) -> Result<(), Failure> {
            use $crate::schema::shardbox_nodes::dsl as nd;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                diesel::delete(
                    nd::shardbox_nodes
                        .filter(nd::alive_until.lt(micros(now - chrono::Duration::days(1)))),
                )
                .execute(conn)?;
                diesel::delete(
                    nd::shardbox_nodes
                        .filter(nd::node_id.eq(&node_id.0))
                        .filter(nd::alive_until.le(micros(now))),
                )
                .execute(conn)?;
                diesel::insert_into(nd::shardbox_nodes)
                    .values((
                        nd::node_id.eq(&node_id.0),
                        nd::started_at.eq(micros(now)),
                        nd::beat_at.eq(micros(now)),
                        nd::alive_until.eq(micros(alive_until)),
                        nd::kinds.eq(&kinds),
                    ))
                    .on_conflict(nd::node_id)
                    .do_update()
                    .set((
                        nd::beat_at.eq(micros(now)),
                        nd::alive_until.eq(micros(alive_until)),
                        nd::kinds.eq(&kinds),
                    ))
                    .execute(conn)?;
                Ok(())
            })
        }

        /// `WorkRegistry::leave`.
        pub(crate) fn leave(conn: &mut Conn, node_id: NodeId) -> Result<(), Failure> {
            use $crate::schema::shardbox_nodes::dsl as nd;
            <Conn as Dialect>::write_statement(conn, |conn| {
                diesel::delete(nd::shardbox_nodes.filter(nd::node_id.eq(&node_id.0)))
                    .execute(conn)?;
                Ok(())
            })
        }

        /// `WorkRegistry::members`.
        pub(crate) fn members(
            conn: &mut Conn,
            now: DateTime<Utc>,
        ) -> Result<Vec<shardbox_core::storage::Member>, Failure> {
            use $crate::schema::shardbox_nodes::dsl as nd;
            let rows: Vec<(String, i64, i64, i64, String)> = nd::shardbox_nodes
                .filter(nd::alive_until.gt(micros(now)))
                .order(nd::node_id.asc())
                .select((
                    nd::node_id,
                    nd::started_at,
                    nd::beat_at,
                    nd::alive_until,
                    nd::kinds,
                ))
                .load(conn)?;
            rows.into_iter()
                .map(|(node_id, started_at, beat_at, alive_until, kinds)| {
                    Ok(shardbox_core::storage::Member {
                        kinds: shardbox_core::decode_kinds(&kinds)
                            .map_err(|e| Failure::corrupt(format!("node {node_id}: {e}")))?,
                        node_id: NodeId(node_id),
                        started_at: rows::time(started_at)?,
                        beat_at: rows::time(beat_at)?,
                        alive_until: rows::time(alive_until)?,
                    })
                })
                .collect()
        }

        /// `WorkRegistry::clock_now`: the database's clock.
        pub(crate) fn clock_now(conn: &mut Conn) -> Result<Option<DateTime<Utc>>, Failure> {
            let micros: i64 = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                <Conn as Dialect>::CLOCK_NOW_MICROS,
            ))
            .get_result(conn)?;
            Ok(Some(rows::time(micros)?))
        }

        /// `WorkRegistry::pick_up`.
        pub(crate) fn pick_up(
            conn: &mut Conn,
            shard: ShardIndex,
            node_id: NodeId,
            worker_id: WorkerId,
            now: DateTime<Utc>,
            lease_until: DateTime<Utc>,
        ) -> Result<Option<Lease>, Failure> {
            use $crate::schema::shard_sessions::dsl as ss;
            let s = shard.as_i32();
            <Conn as Dialect>::write_transaction(conn, |conn| {
                // A new row starts at the highest epoch of any shard, so that a shard whose row
                // a re-sharding dropped never hands out an epoch it handed out before; and it is
                // made only for a shard of the recorded layout (a node that has not learned of a
                // re-sharding to fewer shards finds no row, and no lease, outside it).
                diesel::sql_query(
                    "INSERT INTO shard_sessions (shard, epoch) \
                     SELECT $1, (SELECT COALESCE(MAX(epoch), 0) FROM shard_sessions) \
                     WHERE NOT EXISTS (SELECT 1 FROM shardbox_settings \
                       WHERE name = 'shard_count' AND CAST(value AS INTEGER) <= $1) \
                     ON CONFLICT (shard) DO NOTHING",
                )
                .bind::<diesel::sql_types::Integer, _>(s)
                .execute(conn)?;
                // A lease that is set but has passed lost its holder without a release: clear
                // it first, so that the pick-up below knows it took the shard over. On
                // PostgreSQL this locks the row, and a concurrent pick-up then finds it held.
                let taken_over = diesel::update(
                    ss::shard_sessions
                        .filter(ss::shard.eq(s))
                        .filter(ss::lease_until.le(micros(now))),
                )
                .set(ss::lease_until.eq(None::<i64>))
                .execute(conn)?
                    == 1;
                let epoch: Option<i64> = diesel::update(
                    ss::shard_sessions.filter(ss::shard.eq(s)).filter(
                        ss::lease_until
                            .is_null()
                            .or(ss::lease_until.le(micros(now))),
                    ),
                )
                .set((
                    ss::epoch.eq(ss::epoch + 1),
                    ss::node_id.eq(Some(&node_id.0)),
                    ss::worker_id.eq(Some(i64::from(worker_id.0))),
                    ss::picked_at.eq(Some(micros(now))),
                    ss::lease_until.eq(Some(micros(lease_until))),
                ))
                .returning(ss::epoch)
                .get_result(conn)
                .optional()?;
                Ok(epoch.map(|epoch| Lease {
                    shard,
                    node_id,
                    worker_id,
                    epoch: LeaseEpoch(epoch),
                    picked_at: now,
                    lease_until,
                    taken_over,
                }))
            })
        }

        /// `WorkRegistry::renew`.
        pub(crate) fn renew(
            conn: &mut Conn,
            lease: Lease,
            lease_until: DateTime<Utc>,
        ) -> Result<Lease, Failure> {
            <Conn as Dialect>::write_transaction(conn, |conn| {
                fence(conn, &lease, lease_until)?;
                Ok(Lease {
                    lease_until,
                    ..lease
                })
            })
        }

        /// `WorkRegistry::release`: frees the shard if `lease` still holds it.
        pub(crate) fn release(conn: &mut Conn, lease: Lease) -> Result<(), Failure> {
            <Conn as Dialect>::write_statement(conn, |conn| {
                SetLease {
                    shard: lease.shard.as_i32(),
                    epoch: lease.epoch.0,
                    node_id: &lease.node_id.0,
                    until: None,
                }
                .execute(conn)?;
                Ok(())
            })
        }

        /// `WorkRegistry::sessions`, by shard.
        pub(crate) fn sessions(conn: &mut Conn) -> Result<Vec<ShardSession>, Failure> {
            shard_sessions::table
                .order(shard_sessions::shard.asc())
                .select(SessionRow::as_select())
                .load(conn)?
                .into_iter()
                .map(SessionRow::into_session)
                .collect()
        }

        /// `WorkRegistry::record_shard_strategy`: replaces the `shard_strategy` setting and
        /// returns the one it replaced, in one write transaction.
        pub(crate) fn record_shard_strategy(
            conn: &mut Conn,
            record: shardbox_core::StrategyRecord,
        ) -> Result<Option<shardbox_core::StrategyRecord>, Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                let before = recorded_shard_strategy(conn)?;
                let text = record.to_setting();
                diesel::insert_into(st::shardbox_settings)
                    .values((st::name.eq("shard_strategy"), st::value.eq(&text)))
                    .on_conflict(st::name)
                    .do_update()
                    .set(st::value.eq(&text))
                    .execute(conn)?;
                Ok(before)
            })
        }

        /// `WorkRegistry::recorded_shard_strategy`: the `shard_strategy` setting, if recorded.
        pub(crate) fn recorded_shard_strategy(
            conn: &mut Conn,
        ) -> Result<Option<shardbox_core::StrategyRecord>, Failure> {
            Ok(setting(conn, "shard_strategy")?
                .map(|text| shardbox_core::StrategyRecord::from_setting(&text)))
        }

        /// `WorkRegistry::claim_database_place`: the `database_place` setting, claimed.
        pub(crate) fn claim_database_place(
            conn: &mut Conn,
            place: shardbox_core::storage::DatabasePlace,
        ) -> Result<shardbox_core::storage::DatabasePlace, Failure> {
            let recorded = claim_setting(conn, "database_place", &place.to_setting())?;
            shardbox_core::storage::DatabasePlace::from_setting(&recorded).map_err(Failure::Storage)
        }

        /// `WorkRegistry::recorded_database_place`: the `database_place` setting, if recorded.
        pub(crate) fn recorded_database_place(
            conn: &mut Conn,
        ) -> Result<Option<shardbox_core::storage::DatabasePlace>, Failure> {
            setting(conn, "database_place")?
                .map(|text| {
                    shardbox_core::storage::DatabasePlace::from_setting(&text)
                        .map_err(Failure::Storage)
                })
                .transpose()
        }

        /// `WorkRegistry::recorded_shard_count`: the `shard_count` setting, if recorded.
        pub(crate) fn recorded_shard_count(conn: &mut Conn) -> Result<Option<u32>, Failure> {
            setting(conn, "shard_count")?
                .map(|v| $crate::sql::reshard::parse_count(&v))
                .transpose()
        }
    };
}
pub(crate) use registry_units;

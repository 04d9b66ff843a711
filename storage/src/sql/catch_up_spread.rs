//! One database's part of a catch-up over several databases (see
//! `shardbox_core::storage::CatchUpSpread`): its first step's reset and read of the set, the
//! positions its end waits on, the rows it waits for, and the release of its parked rows.

/// Stamps these units; see [`crate::sql`].
macro_rules! catch_up_spread_units {
    () => {
        /// `CatchUpStore::prepare_catch_up`: re-fence and reset, then the events' end as this
        /// transaction sees it (PostgreSQL appends events under one lock, so every event at or
        /// below it is committed).
        pub(crate) fn prepare_catch_up(
            conn: &mut Conn,
            spec: NewCatchUp,
            own: Option<ShardIndex>,
        ) -> Result<i64, Failure> {
            <Conn as Dialect>::write_transaction(conn, |conn| {
                reset_targets(conn, &spec, own)?;
                last_event_seq(conn)
            })
        }

        /// `CatchUpStore::store_positions`: the outbox's lowest and highest id, the Inbox's
        /// highest seq (both through their primary keys).
        pub(crate) fn store_positions(
            conn: &mut Conn,
        ) -> Result<shardbox_core::storage::StorePositions, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            use $crate::schema::shardbox_outbox::dsl as ob;
            let first: Option<i64> = ob::shardbox_outbox
                .select(diesel::dsl::min(ob::id))
                .first(conn)?;
            let last: Option<i64> = ob::shardbox_outbox
                .select(diesel::dsl::max(ob::id))
                .first(conn)?;
            let inbox: Option<i64> = im::inbox_messages
                .select(diesel::dsl::max(im::seq))
                .first(conn)?;
            Ok(shardbox_core::storage::StorePositions {
                outbox_first: first,
                outbox_last: last.unwrap_or(0),
                inbox_last: inbox.unwrap_or(0),
            })
        }

        /// `CatchUpStore::has_unsettled_rows`: per shard, indexed probes of pending rows only
        /// (the page and delayed indexes for live rows, the to_catch_up index for replayed
        /// ones).
        pub(crate) fn has_unsettled_rows(
            conn: &mut Conn,
            projection_kind: String,
            tenant: String,
            shards: Vec<ShardIndex>,
            up_to_seq: i64,
        ) -> Result<bool, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let parked = micros(shardbox_core::catch_up::parked_until());
            for shard in shards {
                for &pending in [IMMEDIATE, DELAYED].as_slice() {
                    let live: Option<i64> = im::inbox_messages
                        .filter(im::shard.eq(shard.as_i32()))
                        .filter(pending)
                        .filter(im::status.eq(MessageStatus::ToDeliver.as_str()))
                        .filter(im::kind.eq(shardbox_core::MessageKind::Event.as_str()))
                        .filter(im::target_kind.eq(&projection_kind))
                        .filter(im::tenant.eq(&tenant))
                        .filter(im::seq.le(up_to_seq))
                        .filter(im::deliver_after.is_null().or(im::deliver_after.ne(parked)))
                        .select(im::seq)
                        .first(conn)
                        .optional()?;
                    if live.is_some() {
                        return Ok(true);
                    }
                }
                if has_replayed_rows(conn, shard, &projection_kind, &tenant)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }

        /// `CatchUpStore::release_parked`: `settle_parked` of the job as one database of one
        /// (its shards as given, a cursor of 0, which covers nothing, so every parked row is
        /// released), and the release recorded as a setting, in one transaction.
        pub(crate) fn release_catch_up_parked(
            conn: &mut Conn,
            job: CatchUpJob,
            own: Option<ShardIndex>,
        ) -> Result<usize, Failure> {
            let marker = format!("{RELEASED}{}", job.id);
            let here = CatchUpJob {
                cursor: 0,
                spread: None,
                ..job
            };
            <Conn as Dialect>::write_transaction(conn, |conn| {
                use $crate::schema::shardbox_settings::dsl as st;
                let released = settle_parked(conn, &here, own)?;
                diesel::insert_into(st::shardbox_settings)
                    .values((st::name.eq(&marker), st::value.eq("released")))
                    .on_conflict(st::name)
                    .do_nothing()
                    .execute(conn)?;
                Ok(released)
            })
        }

        /// `CatchUpStore::released_catch_ups`: the jobs whose release is recorded here.
        pub(crate) fn released_catch_ups(conn: &mut Conn) -> Result<Vec<i64>, Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            let names: Vec<String> = st::shardbox_settings
                .filter(st::name.like(format!("{RELEASED}%")))
                .select(st::name)
                .load(conn)?;
            Ok(names
                .iter()
                .filter_map(|n| n.strip_prefix(RELEASED)?.parse().ok())
                .collect())
        }

        /// The setting a database records its release of a job's parked rows under
        /// (followed by the job's id).
        const RELEASED: &str = "catch-up-released/";
    };
}
pub(crate) use catch_up_spread_units;

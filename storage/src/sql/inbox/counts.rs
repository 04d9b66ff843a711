//! The Inbox's counts: totals by status, and the depths per shard and per kind.

/// Stamps these units; see [`crate::sql`].
macro_rules! inbox_count_units {
    () => {
        /// `InboxStore::counts`.
        pub(crate) fn counts(
            conn: &mut Conn,
            shard: Option<ShardIndex>,
        ) -> Result<InboxCounts, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let by_status = im::inbox_messages
                .group_by(im::status)
                .select((im::status, diesel::dsl::count_star()));
            let by_status: Vec<(String, i64)> = match shard {
                Some(shard) => by_status.filter(im::shard.eq(shard.as_i32())).load(conn)?,
                None => by_status.load(conn)?,
            };
            let mut counts = InboxCounts::default();
            for (status, n) in by_status {
                let n = u64::try_from(n).unwrap_or(0);
                match rows::parsed("message status", &status, MessageStatus::parse)? {
                    MessageStatus::ToDeliver => counts.to_deliver += n,
                    MessageStatus::Delivered => counts.delivered += n,
                    MessageStatus::ToCatchUp => counts.to_catch_up += n,
                    MessageStatus::Blocked => counts.blocked += n,
                }
            }
            Ok(counts)
        }

        /// `InboxStore::depths`: one grouped count per kind of wait (each a range of the
        /// partial index of its rows where one exists), merged by shard. The statements read
        /// one snapshot each: a row that moves between two of them may be counted twice or
        /// missed, which an operator's view tolerates.
        pub(crate) fn depths(
            conn: &mut Conn,
            now: DateTime<Utc>,
        ) -> Result<Vec<shardbox_core::storage::ShardDepth>, Failure> {
            use shardbox_core::storage::ShardDepth;
            use $crate::schema::inbox_messages::dsl as im;
            let now_us = micros(now);
            let parked = micros(shardbox_core::catch_up::parked_until());
            let to_deliver = MessageStatus::ToDeliver.as_str();
            let mut shards: BTreeMap<i32, ShardDepth> = BTreeMap::new();
            fn entry(
                shards: &mut BTreeMap<i32, ShardDepth>,
                shard: i32,
            ) -> Result<&mut ShardDepth, Failure> {
                let index = rows::shard(shard)?;
                Ok(shards
                    .entry(shard)
                    .or_insert_with(|| ShardDepth::empty(index)))
            }
            let n = |n: i64| u64::try_from(n).unwrap_or(0);
            let oldest = |d: &mut ShardDepth, at: Option<i64>| -> Result<(), Failure> {
                if let Some(at) = rows::opt_time(at)? {
                    d.oldest_due_at = Some(d.oldest_due_at.map_or(at, |o| o.min(at)));
                }
                Ok(())
            };

            let by_status: Vec<(i32, String, i64)> = im::inbox_messages
                .filter(im::status.ne(to_deliver))
                .group_by((im::shard, im::status))
                .select((im::shard, im::status, diesel::dsl::count_star()))
                .load(conn)?;
            for (shard, status, count) in by_status {
                let d = entry(&mut shards, shard)?;
                match rows::parsed("message status", &status, MessageStatus::parse)? {
                    MessageStatus::Delivered => d.delivered += n(count),
                    MessageStatus::ToCatchUp => d.replay += n(count),
                    MessageStatus::Blocked => d.blocked += n(count),
                    MessageStatus::ToDeliver => {}
                }
            }
            let immediate: Vec<(i32, i64, Option<i64>)> = im::inbox_messages
                .filter(IMMEDIATE)
                .filter(im::status.eq(to_deliver))
                .group_by(im::shard)
                .select((
                    im::shard,
                    diesel::dsl::count_star(),
                    diesel::dsl::min(im::received_at),
                ))
                .load(conn)?;
            for (shard, count, at) in immediate {
                let d = entry(&mut shards, shard)?;
                d.due += n(count);
                oldest(d, at)?;
            }
            let came_due: Vec<(i32, i64, Option<i64>)> = im::inbox_messages
                .filter(DELAYED)
                .filter(im::status.eq(to_deliver))
                .filter(im::deliver_after.le(now_us))
                .group_by(im::shard)
                .select((
                    im::shard,
                    diesel::dsl::count_star(),
                    diesel::dsl::min(im::deliver_after),
                ))
                .load(conn)?;
            for (shard, count, at) in came_due {
                let d = entry(&mut shards, shard)?;
                d.due += n(count);
                oldest(d, at)?;
            }
            let later: Vec<(i32, i32, i64)> = im::inbox_messages
                .filter(DELAYED)
                .filter(im::status.eq(to_deliver))
                .filter(im::deliver_after.gt(now_us))
                .filter(im::deliver_after.lt(parked))
                .group_by((im::shard, im::attempts))
                .select((im::shard, im::attempts, diesel::dsl::count_star()))
                .load(conn)?;
            for (shard, attempts, count) in later {
                let d = entry(&mut shards, shard)?;
                if attempts > 0 {
                    d.retrying += n(count);
                } else {
                    d.delayed += n(count);
                }
            }
            let parked_rows: Vec<(i32, i64)> = im::inbox_messages
                .filter(DELAYED)
                .filter(im::status.eq(to_deliver))
                .filter(im::deliver_after.eq(parked))
                .group_by(im::shard)
                .select((im::shard, diesel::dsl::count_star()))
                .load(conn)?;
            for (shard, count) in parked_rows {
                entry(&mut shards, shard)?.parked += n(count);
            }
            Ok(shards.into_values().collect())
        }

        /// Each kind's pending rows by wait at `now` (`InboxStore::kind_depths`): the
        /// queries of `depths` grouped by target kind, over the rows not delivered.
        pub(crate) fn kind_depths(
            conn: &mut Conn,
            now: DateTime<Utc>,
        ) -> Result<Vec<shardbox_core::storage::KindDepth>, Failure> {
            use shardbox_core::storage::KindDepth;
            use $crate::schema::inbox_messages::dsl as im;
            let now_us = micros(now);
            let to_deliver = MessageStatus::ToDeliver.as_str();
            let mut kinds: BTreeMap<String, KindDepth> = BTreeMap::new();
            fn entry<'a>(
                kinds: &'a mut BTreeMap<String, KindDepth>,
                kind: &str,
            ) -> &'a mut KindDepth {
                kinds.entry(kind.to_owned()).or_insert_with(|| KindDepth {
                    kind: kind.to_owned(),
                    due: 0,
                    waiting: 0,
                    blocked: 0,
                    oldest_due_at: None,
                })
            }
            let n = |n: i64| u64::try_from(n).unwrap_or(0);
            let oldest = |d: &mut KindDepth, at: Option<i64>| -> Result<(), Failure> {
                if let Some(at) = rows::opt_time(at)? {
                    d.oldest_due_at = Some(d.oldest_due_at.map_or(at, |o| o.min(at)));
                }
                Ok(())
            };

            let by_status: Vec<(String, String, i64)> = im::inbox_messages
                .filter(NOT_DELIVERED)
                .filter(im::status.ne(to_deliver))
                .group_by((im::target_kind, im::status))
                .select((im::target_kind, im::status, diesel::dsl::count_star()))
                .load(conn)?;
            for (kind, status, count) in by_status {
                let d = entry(&mut kinds, &kind);
                match rows::parsed("message status", &status, MessageStatus::parse)? {
                    MessageStatus::ToCatchUp => d.waiting += n(count),
                    MessageStatus::Blocked => d.blocked += n(count),
                    MessageStatus::ToDeliver | MessageStatus::Delivered => {}
                }
            }
            let immediate: Vec<(String, i64, Option<i64>)> = im::inbox_messages
                .filter(IMMEDIATE)
                .filter(im::status.eq(to_deliver))
                .group_by(im::target_kind)
                .select((
                    im::target_kind,
                    diesel::dsl::count_star(),
                    diesel::dsl::min(im::received_at),
                ))
                .load(conn)?;
            for (kind, count, at) in immediate {
                let d = entry(&mut kinds, &kind);
                d.due += n(count);
                oldest(d, at)?;
            }
            let came_due: Vec<(String, i64, Option<i64>)> = im::inbox_messages
                .filter(DELAYED)
                .filter(im::status.eq(to_deliver))
                .filter(im::deliver_after.le(now_us))
                .group_by(im::target_kind)
                .select((
                    im::target_kind,
                    diesel::dsl::count_star(),
                    diesel::dsl::min(im::deliver_after),
                ))
                .load(conn)?;
            for (kind, count, at) in came_due {
                let d = entry(&mut kinds, &kind);
                d.due += n(count);
                oldest(d, at)?;
            }
            let later: Vec<(String, i64)> = im::inbox_messages
                .filter(DELAYED)
                .filter(im::status.eq(to_deliver))
                .filter(im::deliver_after.gt(now_us))
                .group_by(im::target_kind)
                .select((im::target_kind, diesel::dsl::count_star()))
                .load(conn)?;
            for (kind, count) in later {
                entry(&mut kinds, &kind).waiting += n(count);
            }
            Ok(kinds.into_values().collect())
        }
    };
}
pub(crate) use inbox_count_units;

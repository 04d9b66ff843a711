//! The Inbox's reads for delivery: a due page, the expired rows, the next due time, and the
//! shards that have rows to purge or expire.

/// Stamps these units; see [`crate::sql`].
macro_rules! inbox_read_units {
    () => {
        /// `InboxStore::read_page`: one statement ([`PageRead`]), so its parts read one
        /// snapshot.
        pub(crate) fn read_page(
            conn: &mut Conn,
            shard: ShardIndex,
            now: DateTime<Utc>,
            limit: usize,
        ) -> Result<Page, Failure> {
            let rows: Vec<(i32, InboxRow)> = PageRead {
                shard: shard.as_i32(),
                now: micros(now),
                limit: i64::try_from(limit).unwrap_or(i64::MAX),
                parked: micros(shardbox_core::catch_up::parked_until()),
            }
            .load(conn)?;
            let (mut due, mut waiting, mut blocked) = (Vec::new(), Vec::new(), Vec::new());
            let (mut next_due, mut purge_due) = (None, false);
            for (part, row) in rows {
                match PagePart::of(part) {
                    Some(PagePart::Due) => due.push(row),
                    Some(PagePart::Waiting) => waiting.push(row),
                    Some(PagePart::Blocked) => blocked.push(row),
                    Some(PagePart::NextDue) => next_due = row.deliver_after,
                    Some(PagePart::Purgeable) => purge_due = true,
                    None => {
                        return Err(Failure::Storage(StorageError::Corrupt(format!(
                            "page read: unknown part {part} for row {}",
                            row.seq
                        ))))
                    }
                }
            }
            // Each index gave at most `limit` rows: the page is the first `limit` of both
            // by seq.
            due.sort_unstable_by_key(|r| r.seq);
            due.truncate(limit);
            waiting.sort_unstable_by_key(|r| r.seq);
            blocked.sort_unstable_by_key(|r| r.seq);
            let messages = due
                .into_iter()
                .map(InboxRow::into_message)
                .collect::<Result<Vec<_>, _>>()?;
            let waiting = waiting
                .into_iter()
                .map(|r| {
                    let at = rows::time(r.deliver_after.unwrap_or_default())?;
                    Ok((entity_key(r), at))
                })
                .collect::<Result<Vec<_>, Failure>>()?;
            let blocked = blocked.into_iter().map(entity_key).collect();
            Ok(Page {
                messages,
                waiting,
                blocked,
                next_due: rows::opt_time(next_due)?,
                purge_due,
            })
        }

        /// The target of an inbox row.
        fn entity_key(row: InboxRow) -> EntityKey {
            EntityKey {
                kind: row.target_kind,
                tenant: row.tenant,
                id: row.target_id,
            }
        }

        /// `InboxStore::expired_shards`: a range of `inbox_expiring` over the expired rows.
        pub(crate) fn expired_shards(
            conn: &mut Conn,
            now: DateTime<Utc>,
        ) -> Result<Vec<ShardIndex>, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let shards: Vec<i32> = im::inbox_messages
                .filter(EXPIRING)
                .filter(im::expires_at.le(micros(now)))
                .filter(im::status.ne(MessageStatus::Blocked.as_str()))
                .select(im::shard)
                .distinct()
                .order(im::shard.asc())
                .load(conn)?;
            shards.into_iter().map(rows::shard).collect()
        }

        /// `InboxStore::purge_due_shards`: one scan of the delivered rows' `inbox_purge` index
        /// (the rows within their window, a bounded set: traffic times the window) and one
        /// of the outcome records' (shard, keep_until) index (as bounded).
        pub(crate) fn purge_due_shards(
            conn: &mut Conn,
            now: DateTime<Utc>,
        ) -> Result<Vec<ShardIndex>, Failure> {
            use $crate::schema::command_outcomes::dsl as co;
            use $crate::schema::inbox_messages::dsl as im;
            let mut shards: Vec<i32> = im::inbox_messages
                .filter(im::keep_until.is_not_null())
                .filter(im::keep_until.le(micros(now)))
                .select(im::shard)
                .distinct()
                .load(conn)?;
            let outcomes: Vec<i32> = co::command_outcomes
                .filter(co::keep_until.le(micros(now)))
                .select(co::shard)
                .distinct()
                .load(conn)?;
            shards.extend(outcomes);
            shards.sort_unstable();
            shards.dedup();
            shards.into_iter().map(rows::shard).collect()
        }

        /// `InboxStore::read_expired`.
        pub(crate) fn read_expired(
            conn: &mut Conn,
            shard: ShardIndex,
            now: DateTime<Utc>,
            limit: usize,
        ) -> Result<Vec<InboxMessage>, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            im::inbox_messages
                .filter(EXPIRING)
                .filter(im::expires_at.le(micros(now)))
                .filter(im::shard.eq(shard.as_i32()))
                .filter(im::status.ne(MessageStatus::Blocked.as_str()))
                .order(im::seq.asc())
                .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                .select(InboxRow::as_select())
                .load(conn)?
                .into_iter()
                .map(InboxRow::into_message)
                .collect()
        }

        /// `InboxStore::next_due`.
        pub(crate) fn next_due(
            conn: &mut Conn,
            shard: ShardIndex,
            now: DateTime<Utc>,
        ) -> Result<Option<DateTime<Utc>>, Failure> {
            use $crate::schema::inbox_messages::dsl as im;
            let next: Option<i64> = im::inbox_messages
                .filter(im::shard.eq(shard.as_i32()))
                .filter(im::deliver_after.gt(micros(now)))
                // Parked rows wait for their catch-up to complete, not for a time.
                .filter(im::deliver_after.lt(micros(shardbox_core::catch_up::parked_until())))
                .filter(NOT_DELIVERED)
                .select(diesel::dsl::min(im::deliver_after))
                .first(conn)?;
            rows::opt_time(next)
        }
    };
}
pub(crate) use inbox_read_units;

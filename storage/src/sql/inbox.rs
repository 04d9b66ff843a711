//! The Inbox's SQL: deduplicating writes, due pages in `seq` order, next due time, counts.
//!
//! Index use (see the migrations):
//!
//! ```text
//!  read_page  one range of inbox_immediate (shard, seq) WHERE deliver_after IS NULL AND
//!             not delivered, LIMIT n, plus the rows whose delay has passed from
//!             inbox_delayed (shard, deliver_after) up to now, the first n by seq, merged
//!             by seq: rows due later are never read, whatever their number, and at most n
//!             of the due ones are loaded
//!  waiting    inbox_retrying (shard, seq) WHERE attempts > 0 AND not delivered
//!  blocked    inbox_blocked_by_shard (shard, seq) WHERE status = 'blocked'
//!  next_due   inbox_delayed  (shard, deliver_after) WHERE deliver_after set AND not delivered
//!  expired    inbox_expiring (expires_at) WHERE expires_at set AND not delivered
//! ```
//!
//! The literal predicates (`attempts > 0`, `status <> 'delivered'`) are written as SQL text on
//! purpose: a partial index is only usable when the query states its predicate with the same
//! constants, which a bound parameter does not.

/// Stamps the Inbox units; see [`crate::sql`].
macro_rules! inbox_units {
    () => {
        /// Inserts inbox rows, ignoring (and counting) duplicates of the dedup key.
        pub(crate) fn insert_messages(
            conn: &mut Conn,
            messages: Vec<shardbox_core::InboxWrite>,
            report: &mut WriteReport,
        ) -> Result<(), Failure> {
            insert_rows(conn, &$crate::rows::inbox_rows(messages)?, report)
        }

        /// Inserts rows made by `rows::inbox_rows` (before the transaction: a write
        /// transaction holds SQLite's one write lock), ignoring (and counting) duplicates of
        /// the dedup key.
        pub(crate) fn insert_rows(
            conn: &mut Conn,
            rows: &[NewInboxRow],
            report: &mut WriteReport,
        ) -> Result<(), Failure> {
            if rows.is_empty() {
                return Ok(());
            }
            let shards = <Conn as Dialect>::insert_inbox_rows(conn, rows)?;
            add_written(rows.len(), shards, report)
        }

        /// Counts into `report` an insert of `rows` rows that wrote rows in `shards` (one
        /// each); the others were duplicates.
        fn add_written(
            rows: usize,
            shards: Vec<i32>,
            report: &mut WriteReport,
        ) -> Result<(), Failure> {
            let written = shards.len();
            for s in shards {
                report.shards.push(rows::shard(s)?);
            }
            report.written += written;
            report.duplicates += rows.saturating_sub(written);
            Ok(())
        }

        /// Appends events made by `rows::event_rows`, ignoring a duplicate id. Must be the
        /// last statement of its transaction but for other event appends (see
        /// `Dialect::append_event_rows`).
        pub(crate) fn append_events(
            conn: &mut Conn,
            rows: &[NewEventRow],
            report: &mut WriteReport,
        ) -> Result<(), Failure> {
            if rows.is_empty() {
                return Ok(());
            }
            report.events += <Conn as Dialect>::append_event_rows(conn, rows)?;
            Ok(())
        }

        /// Sorts and deduplicates the report's shards.
        pub(crate) fn finish_report(report: &mut WriteReport) {
            report.shards.sort_unstable();
            report.shards.dedup();
        }

        /// `InboxStore::write_all` (and `write`, a group of one): every batch's messages, then
        /// every batch's events (the appends last, see `append_events`), in one write
        /// transaction — or, for one batch of messages that a single `INSERT` holds (a lone
        /// `send`), that statement alone (`Dialect::write_statement`). With `shard_count`
        /// (`write_all_addressed`, every send) the rows are written only if the recorded
        /// count is the one they were addressed by, checked under the lock a re-sharding's
        /// switch takes: first in the transaction, or, for batches of messages alone on
        /// PostgreSQL (a send group), by the one insert statement that writes them all
        /// (`write_addressed_statement`).
        pub(crate) fn write_addressed(
            conn: &mut Conn,
            batches: Vec<WriteBatch>,
            shard_count: Option<u32>,
        ) -> Result<Vec<WriteReport>, Failure> {
            // A connection lost on the way leaves the write's outcome unknown.
            write_addressed_once(conn, batches, shard_count).map_err(Failure::at_commit)
        }

        /// `write_addressed`, its failures as they come.
        fn write_addressed_once(
            conn: &mut Conn,
            batches: Vec<WriteBatch>,
            shard_count: Option<u32>,
        ) -> Result<Vec<WriteReport>, Failure> {
            // Rows are made before the transaction and dropped after it.
            let batches = batches
                .into_iter()
                .map(|b| {
                    Ok((
                        $crate::rows::inbox_rows(b.messages)?,
                        $crate::rows::event_rows(b.events)?,
                    ))
                })
                .collect::<Result<Vec<_>, Failure>>()?;
            if let Some(expected) = shard_count {
                if let Some(reports) = write_addressed_statement(conn, &batches, expected)? {
                    return Ok(reports);
                }
            } else if let [(messages, events)] = batches.as_slice() {
                if events.is_empty() && <Conn as Dialect>::inserts_in_one_statement(messages.len())
                {
                    return <Conn as Dialect>::write_statement(conn, |conn| {
                        let mut report = WriteReport::default();
                        insert_rows(conn, messages, &mut report)?;
                        finish_report(&mut report);
                        Ok(vec![report])
                    });
                }
            }
            <Conn as Dialect>::write_transaction(conn, |conn| {
                if let Some(expected) = shard_count {
                    check_shard_count(conn, expected)?;
                }
                let mut reports = Vec::with_capacity(batches.len());
                for (messages, _) in &batches {
                    let mut report = WriteReport::default();
                    insert_rows(conn, messages, &mut report)?;
                    reports.push(report);
                }
                for (report, (_, events)) in reports.iter_mut().zip(&batches) {
                    append_events(conn, events, report)?;
                    finish_report(report);
                }
                Ok(reports)
            })
        }

        /// Batches of messages alone (no events) addressed by `expected` shards, written by
        /// the backend's one checked statement (`Dialect::insert_addressed_rows`) if it has
        /// one and one statement holds them: each batch's report, its rows counted by their
        /// dedup keys (a key in two batches is written by the first, a duplicate in the
        /// second). `None`: write them in a transaction.
        fn write_addressed_statement(
            conn: &mut Conn,
            batches: &[(Vec<NewInboxRow>, Vec<NewEventRow>)],
            expected: u32,
        ) -> Result<Option<Vec<WriteReport>>, Failure> {
            if batches.iter().any(|(_, events)| !events.is_empty()) {
                return Ok(None);
            }
            let rows: Vec<&NewInboxRow> = batches.iter().flat_map(|(m, _)| m).collect();
            if !<Conn as Dialect>::inserts_in_one_statement(rows.len()) {
                return Ok(None);
            }
            let Some(written) = <Conn as Dialect>::insert_addressed_rows(conn, &rows, expected)
            else {
                return Ok(None);
            };
            let written = written?;
            let recorded = written.first().and_then(|w| w.0.as_deref());
            $crate::sql::reshard::refuse_other_count(recorded, expected)?;
            // Each dedup key to the first batch that holds it (a lone batch holds them all).
            let mut owner: std::collections::HashMap<(&str, &str, &str, &str), usize> =
                std::collections::HashMap::new();
            let grouped = batches.len() > 1;
            for (n, (messages, _)) in batches.iter().enumerate().filter(|_| grouped) {
                for m in messages {
                    let key = (
                        m.tenant.as_str(),
                        m.target_kind.as_str(),
                        m.target_id.as_str(),
                        m.signal_id.as_str(),
                    );
                    owner.entry(key).or_insert(n);
                }
            }
            let mut shards: Vec<Vec<i32>> = vec![Vec::new(); batches.len()];
            for (_, shard, tenant, kind, id, signal) in &written {
                let (Some(shard), Some(tenant), Some(kind), Some(id), Some(signal)) =
                    (shard, tenant, kind, id, signal)
                else {
                    continue; // the count alone: nothing written
                };
                let key = (tenant.as_str(), kind.as_str(), id.as_str(), signal.as_str());
                let n = match owner.get(&key) {
                    Some(&n) => n,
                    None if !grouped => 0,
                    None => {
                        return Err(Failure::corrupt(format!(
                            "a row written for {key:?} that no batch holds"
                        )))
                    }
                };
                shards[n].push(*shard);
            }
            let mut reports = Vec::with_capacity(batches.len());
            for ((messages, _), shards) in batches.iter().zip(shards) {
                let mut report = WriteReport::default();
                add_written(messages.len(), shards, &mut report)?;
                finish_report(&mut report);
                reports.push(report);
            }
            Ok(Some(reports))
        }

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

        /// Every inbox row in `seq` order (inspection).
        pub(crate) fn rows(conn: &mut Conn) -> Result<Vec<InboxMessage>, Failure> {
            inbox_messages::table
                .order(inbox_messages::seq.asc())
                .select(InboxRow::as_select())
                .load(conn)?
                .into_iter()
                .map(InboxRow::into_message)
                .collect()
        }

        /// How many command outcome records are stored (inspection).
        pub(crate) fn outcome_records(conn: &mut Conn) -> Result<u64, Failure> {
            let n: i64 = $crate::schema::command_outcomes::table
                .count()
                .get_result(conn)?;
            Ok(u64::try_from(n).unwrap_or(0))
        }

        /// Every dead letter, oldest first (inspection).
        pub(crate) fn dead_letters(conn: &mut Conn) -> Result<Vec<DeadLetter>, Failure> {
            dead_letters::table
                .order(dead_letters::id.asc())
                .select(DeadLetterRow::as_select())
                .load(conn)?
                .into_iter()
                .map(DeadLetterRow::into_dead_letter)
                .collect()
        }
    };
}
pub(crate) use inbox_units;

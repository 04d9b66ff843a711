//! The Inbox's writes: rows inserted in their order, duplicates of the dedup key skipped and
//! counted, events appended, and the addressed form that checks the recorded shard count.

/// Stamps these units; see [`crate::sql`].
macro_rules! inbox_write_units {
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
    };
}
pub(crate) use inbox_write_units;

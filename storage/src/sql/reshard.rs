//! The SQL of a re-sharding: its announcement in `shardbox_settings`, the layout every lease
//! watch reads, and the switch — one write transaction that moves every row to its target's
//! shard among the new count.
//!
//! ```text
//!  switch: lock the shard_count setting (writes that address rows wait; see
//!          Dialect::read_shard_count_locked) ─► check it is `from` ─► free the operator's
//!          leases of 0..from (each must still hold) ─► inbox rows, dead letters, kept
//!          outcomes: shard = route(target) ─► running catch-ups: affected shards again
//!          ─► lock table: drop shards >= to, every row left and new starts above
//!          every epoch handed out
//!          ─► shard_count = to, announcement gone
//! ```
//!
//! The settings row `resharding` holds `<to>;<until µs>;<by>`.

/// Stamps the re-sharding units; see [`crate::sql`].
macro_rules! reshard_units {
    () => {
        /// The `resharding` setting, parsed.
        fn read_announcement(
            conn: &mut Conn,
        ) -> Result<Option<shardbox_core::storage::ReshardAnnouncement>, Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            let value: Option<String> = st::shardbox_settings
                .filter(st::name.eq("resharding"))
                .select(st::value)
                .first(conn)
                .optional()?;
            value
                .map(|v| $crate::sql::reshard::parse_announcement(&v))
                .transpose()
        }

        /// Inside a write transaction: refuses rows addressed by `expected` if another count
        /// is recorded, under the shared lock a re-sharding's switch waits for (see
        /// `Dialect::read_shard_count_locked`).
        pub(crate) fn check_shard_count(conn: &mut Conn, expected: u32) -> Result<(), Failure> {
            let recorded = <Conn as Dialect>::read_shard_count_locked(conn, false)?;
            $crate::sql::reshard::refuse_other_count(recorded.as_deref(), expected)
        }

        /// `WorkRegistry::layout`.
        pub(crate) fn layout(
            conn: &mut Conn,
        ) -> Result<shardbox_core::storage::ShardLayout, Failure> {
            Ok(shardbox_core::storage::ShardLayout {
                shard_count: recorded_shard_count(conn)?,
                resharding: read_announcement(conn)?,
            })
        }

        /// `WorkRegistry::announce_reshard`: in one write transaction, so that of two
        /// operators announcing at once one sees the other's.
        pub(crate) fn announce_reshard(
            conn: &mut Conn,
            announcement: shardbox_core::storage::ReshardAnnouncement,
            now: DateTime<Utc>,
        ) -> Result<shardbox_core::storage::ReshardAnnouncement, Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                <Conn as Dialect>::read_shard_count_locked(conn, true)?;
                if let Some(other) = read_announcement(conn)? {
                    if other.by != announcement.by && other.until > now {
                        return Ok(other);
                    }
                }
                let value = $crate::sql::reshard::format_announcement(&announcement);
                diesel::insert_into(st::shardbox_settings)
                    .values((st::name.eq("resharding"), st::value.eq(&value)))
                    .on_conflict(st::name)
                    .do_update()
                    .set(st::value.eq(&value))
                    .execute(conn)?;
                Ok(announcement)
            })
        }

        /// `WorkRegistry::withdraw_reshard`.
        pub(crate) fn withdraw_reshard(conn: &mut Conn, by: NodeId) -> Result<(), Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                <Conn as Dialect>::read_shard_count_locked(conn, true)?;
                if read_announcement(conn)?.is_some_and(|a| a.by == by) {
                    diesel::delete(st::shardbox_settings.filter(st::name.eq("resharding")))
                        .execute(conn)?;
                }
                Ok(())
            })
        }

        /// `WorkRegistry::reshard`: the switch, in one write transaction (see the module doc).
        pub(crate) fn reshard(
            conn: &mut Conn,
            switch: shardbox_core::storage::ReshardSwitch,
        ) -> Result<shardbox_core::storage::ReshardMoves, Failure> {
            <Conn as Dialect>::write_transaction(conn, |conn| {
                let shards = check_switch(conn, &switch)?;
                <Conn as Dialect>::lock_sessions_in_order(conn, &shards)?;
                free_switch_leases(conn, &switch.leases)?;
                let mut moves = shardbox_core::storage::ReshardMoves::default();
                move_inbox_rows(conn, &switch, &mut moves)?;
                move_records(conn, &switch, &mut moves)?;
                readdress_catch_ups(conn, &switch, &mut moves)?;
                relay_lock_table(conn, &switch)?;
                Ok(moves)
            })
        }

        /// The shards of the switch's leases, sorted, if the recorded count is the one the
        /// switch moves from and it holds the lease of every shard of it; else the refusal.
        fn check_switch(
            conn: &mut Conn,
            switch: &shardbox_core::storage::ReshardSwitch,
        ) -> Result<Vec<i32>, Failure> {
            let recorded = <Conn as Dialect>::read_shard_count_locked(conn, true)?
                .map(|v| $crate::sql::reshard::parse_count(&v))
                .transpose()?
                .unwrap_or(switch.from);
            if recorded != switch.from {
                return Err(Failure::from(StorageError::ShardCountChanged {
                    expected: switch.from,
                    recorded,
                }));
            }
            let mut shards: Vec<i32> = switch.leases.iter().map(|l| l.shard.as_i32()).collect();
            shards.sort_unstable();
            shards.dedup();
            if shards.len() != switch.from as usize
                || shards.iter().enumerate().any(|(i, s)| *s != i as i32)
            {
                return Err(Failure::from(StorageError::ReshardRefused {
                    reason: format!(
                        "the switch must hold the lease of every shard 0..{}, it holds {}",
                        switch.from,
                        shards.len()
                    ),
                }));
            }
            Ok(shards)
        }

        /// Frees every lease of the switch, or `LeaseLost` for the first one it no longer
        /// holds.
        fn free_switch_leases(conn: &mut Conn, leases: &[Lease]) -> Result<(), Failure> {
            for lease in leases {
                let freed = SetLease {
                    shard: lease.shard.as_i32(),
                    epoch: lease.epoch.0,
                    node_id: &lease.node_id.0,
                    until: None,
                }
                .execute(conn)?;
                if freed != 1 {
                    let current: Option<i64> = shard_sessions::table
                        .filter(shard_sessions::shard.eq(lease.shard.as_i32()))
                        .select(shard_sessions::epoch)
                        .first(conn)
                        .optional()?;
                    return Err(Failure::from(StorageError::LeaseLost {
                        shard: lease.shard,
                        held: lease.epoch,
                        current: current.map(LeaseEpoch),
                    }));
                }
            }
            Ok(())
        }

        /// Inbox rows of every status, by seq, moved to their target's shard of the new
        /// layout.
        fn move_inbox_rows(
            conn: &mut Conn,
            switch: &shardbox_core::storage::ReshardSwitch,
            moves: &mut shardbox_core::storage::ReshardMoves,
        ) -> Result<(), Failure> {
            let route = |kind: &str, id: &str| switch.route.as_ref()(kind, id).as_i32();
            let rows: Vec<(i64, i32, String, String)> = inbox_messages::table
                .select((
                    inbox_messages::seq,
                    inbox_messages::shard,
                    inbox_messages::target_kind,
                    inbox_messages::target_id,
                ))
                .load(conn)?;
            moves.inbox_rows = rows.len() as u64;
            let mut by_shard: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
            for (seq, shard, kind, id) in &rows {
                let to = route(kind, id);
                if to != *shard {
                    by_shard.entry(to).or_default().push(*seq);
                }
            }
            drop(rows);
            for (to, seqs) in &by_shard {
                moves.inbox_moved += seqs.len() as u64;
                for chunk in seqs.chunks(IN_CHUNK) {
                    diesel::update(inbox_messages::table.filter(inbox_messages::seq.eq_any(chunk)))
                        .set(inbox_messages::shard.eq(*to))
                        .execute(conn)?;
                }
            }
            Ok(())
        }

        /// Dead letters and kept command outcomes moved to their target's shard of the new
        /// layout.
        fn move_records(
            conn: &mut Conn,
            switch: &shardbox_core::storage::ReshardSwitch,
            moves: &mut shardbox_core::storage::ReshardMoves,
        ) -> Result<(), Failure> {
            use $crate::schema::command_outcomes::dsl as co;
            let route = |kind: &str, id: &str| switch.route.as_ref()(kind, id).as_i32();
            // Dead letters keep the shard of their target (a requeue addresses it again).
            let letters: Vec<(i64, i32, String, String)> = dead_letters::table
                .select((
                    dead_letters::id,
                    dead_letters::shard,
                    dead_letters::target_kind,
                    dead_letters::target_id,
                ))
                .load(conn)?;
            for (id, shard, kind, target) in letters {
                let to = route(&kind, &target);
                if to != shard {
                    diesel::update(dead_letters::table.filter(dead_letters::id.eq(id)))
                        .set(dead_letters::shard.eq(to))
                        .execute(conn)?;
                    moves.records_moved += 1;
                }
            }
            // Kept outcomes are purged per shard: each goes with its target.
            let targets: Vec<(String, String, i32)> = co::command_outcomes
                .select((co::target_kind, co::target_id, co::shard))
                .distinct()
                .load(conn)?;
            for (kind, target, shard) in targets {
                let to = route(&kind, &target);
                if to != shard {
                    moves.records_moved += diesel::update(
                        co::command_outcomes
                            .filter(co::target_kind.eq(&kind))
                            .filter(co::target_id.eq(&target))
                            .filter(co::shard.eq(shard)),
                    )
                    .set(co::shard.eq(to))
                    .execute(conn)? as u64;
                }
            }
            Ok(())
        }

        /// Every running catch-up's affected shards, computed again for the new layout.
        fn readdress_catch_ups(
            conn: &mut Conn,
            switch: &shardbox_core::storage::ReshardSwitch,
            moves: &mut shardbox_core::storage::ReshardMoves,
        ) -> Result<(), Failure> {
            for job in running_catch_ups(conn)? {
                let affected = shardbox_core::catch_up::affected_shards(
                    &job.spec.targets,
                    &job.spec.projection_kind,
                    switch.to,
                    |kind, id| switch.route.as_ref()(kind, id),
                );
                let json =
                    serde_json::to_string(&affected.iter().map(|s| s.0).collect::<Vec<u32>>())
                        .map_err(|e| Failure::corrupt(format!("affected shards: {e}")))?;
                diesel::update(catch_ups::table.filter(catch_ups::id.eq(job.id)))
                    .set(catch_ups::affected_shards.eq(json))
                    .execute(conn)?;
                moves.catch_ups += 1;
            }
            Ok(())
        }

        /// The lock table re-laid for the new layout, the new count recorded and the
        /// announcement withdrawn.
        fn relay_lock_table(
            conn: &mut Conn,
            switch: &shardbox_core::storage::ReshardSwitch,
        ) -> Result<(), Failure> {
            use $crate::schema::shardbox_settings::dsl as st;
            // The lock table: shards >= to go; every row of the new layout, kept or new,
            // starts above every epoch handed out, so that no lease of the old layout can
            // ever match one of them, and the highest epoch of the rows kept is still the
            // highest ever handed out, which a new row starts from (see `pick_up`). Were
            // the kept rows left as they were, the epochs of the rows dropped here were
            // forgotten, and a later re-sharding that made those shards again would hand
            // them out a second time (issue 37).
            let top: Option<i64> = shard_sessions::table
                .select(diesel::dsl::max(shard_sessions::epoch))
                .first(conn)?;
            let fresh = top.unwrap_or(0) + 1;
            let to = i32::try_from(switch.to)
                .map_err(|_| Failure::corrupt(format!("shard count {}", switch.to)))?;
            // Rows at or above `from` belong to no layout (a stale pick-up's): they go too.
            let keep = to.min(switch.from as i32);
            diesel::delete(shard_sessions::table.filter(shard_sessions::shard.ge(keep)))
                .execute(conn)?;
            // The rows kept were freed by `free_switch_leases` (the switch held them all).
            diesel::update(shard_sessions::table)
                .set(shard_sessions::epoch.eq(fresh))
                .execute(conn)?;
            for shard in (switch.from as i32)..to {
                diesel::insert_into(shard_sessions::table)
                    .values((
                        shard_sessions::shard.eq(shard),
                        shard_sessions::epoch.eq(fresh),
                    ))
                    .execute(conn)?;
            }
            diesel::update(st::shardbox_settings.filter(st::name.eq("shard_count")))
                .set(st::value.eq(switch.to.to_string()))
                .execute(conn)?;
            diesel::delete(st::shardbox_settings.filter(st::name.eq("resharding")))
                .execute(conn)?;
            Ok(())
        }
    };
}
pub(crate) use reshard_units;

use crate::error::Failure;
use shardbox_core::storage::ReshardAnnouncement;
use shardbox_core::NodeId;

/// One setting's value, as a raw query reads it (PostgreSQL's locked read).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(diesel::QueryableByName)]
pub(crate) struct SettingValue {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub(crate) value: String,
}

/// `<to>;<until µs>;<by>`.
pub(crate) fn format_announcement(a: &ReshardAnnouncement) -> String {
    format!("{};{};{}", a.to, a.until.timestamp_micros(), a.by.0)
}

/// The inverse of [`format_announcement`].
pub(crate) fn parse_announcement(value: &str) -> Result<ReshardAnnouncement, Failure> {
    let corrupt = || Failure::corrupt(format!("shardbox_settings.resharding is `{value}`"));
    let mut parts = value.splitn(3, ';');
    let to = parts
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(corrupt)?;
    let until = parts
        .next()
        .and_then(|p| p.parse().ok())
        .and_then(chrono::DateTime::from_timestamp_micros)
        .ok_or_else(corrupt)?;
    let by = parts.next().filter(|p| !p.is_empty()).ok_or_else(corrupt)?;
    Ok(ReshardAnnouncement {
        by: NodeId(by.to_owned()),
        to,
        until,
    })
}

/// `ShardCountChanged` if a count other than `expected` is `recorded` (the `shard_count`
/// setting's text; none recorded refuses nothing): rows addressed by `expected` must not be
/// written.
pub(crate) fn refuse_other_count(recorded: Option<&str>, expected: u32) -> Result<(), Failure> {
    match recorded.map(parse_count).transpose()? {
        Some(recorded) if recorded != expected => Err(Failure::from(
            shardbox_core::StorageError::ShardCountChanged { expected, recorded },
        )),
        _ => Ok(()),
    }
}

/// The `shard_count` setting as a count.
pub(crate) fn parse_count(value: &str) -> Result<u32, Failure> {
    value.parse().map_err(|_| {
        Failure::corrupt(format!(
            "shardbox_settings.shard_count is `{value}`, not a shard count"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_read_back_as_written() {
        let a = ReshardAnnouncement {
            by: NodeId("reshard;x-1".into()),
            to: 32,
            until: chrono::DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(),
        };
        assert_eq!(parse_announcement(&format_announcement(&a)).unwrap(), a);
        for bad in ["", "32", "32;x;n", "x;1;n", "32;1;"] {
            assert!(parse_announcement(bad).is_err(), "{bad:?} parsed");
        }
    }
}

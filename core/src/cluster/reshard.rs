//! Online re-sharding: the operator's side. Changes the Inbox's shard count while nodes run
//! and traffic flows, in three steps, each fenced so that a step that fails leaves the old
//! layout whole.
//!
//! ```text
//!  1 announce   `resharding` = (by, to, until) ─► every node's lease watch, at its next
//!               round: releases kept leases, hands each shard back after its stage, picks
//!               none up (`local::lease_watch::follow_layout`); writes go on
//!  2 gather     the operator picks up the lease of every shard 0..from as nodes let them go
//!               (renewing the leases and the announcement while it waits; a dead node's lease
//!               is taken when it runs out) ─► no stage can commit anywhere
//!  3 switch     one transaction (`WorkRegistry::reshard`) that writes wait for: every row
//!               and record to its target's shard among `to`, new lock-table rows above every
//!               epoch, count = to, announcement gone ─► nodes see the new count at their next
//!               round and serve it
//! ```
//!
//! Why this keeps every promise:
//! - **One owner, no stale layout.** Nothing is delivered while the rows move: the operator
//!   holds every lease. A node that missed the announcement can pick a shard up only after
//!   the switch, and then reads the recorded count while it holds the lease
//!   (`Delivery::pick_up`): a count it does not know sends it to the new layout first.
//! - **No row addressed by an old count.** A write checks the recorded count in its own
//!   transaction, under a lock the switch takes exclusively (`InboxStore::write_all_addressed`):
//!   a write that came first is moved by the switch, one that comes after is refused and
//!   addressed anew by the sender (`write_queue`) — the sender never sees an error.
//! - **Per-target order.** A target's rows move together, keeping their `seq`; before the
//!   switch they were all in its old shard, after it all in its new one.
//! - **Meaning kept.** Delayed, retrying, blocked, held (catch-up) and delivered (dedup window)
//!   rows move with their state untouched; dead letters and kept outcomes carry their target's
//!   new shard; running catch-ups get their affected shards computed again.
//!
//! If the operator's process dies, its announcement runs out (one `lease_duration`) and the
//! nodes serve the old layout again; its leases run out like a dead node's.

use crate::cluster::seat::NodeSeat;
use crate::entity::addressing::Addressing;
use crate::model::error::{DeliveryError, StorageError};
use crate::model::ids::{NodeId, ShardIndex, WorkerId};
use crate::storage::{Lease, ReshardAnnouncement, ReshardMoves, ReshardSwitch};
use std::collections::BTreeMap;
use std::time::Duration;
// The runtime's clock, not the system's: the same in production, and under a paused test
// runtime the operator renews its leases and announcement, and gives up, on the clock the
// nodes' timers run on (with the system's, its leases ran out between two renewals and the
// gathering never ended before its timeout in real time).
use tokio::time::Instant;

/// What a re-sharding did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReshardReport {
    /// The shard count before.
    pub from: u32,
    /// The shard count now.
    pub to: u32,
    /// What the switch moved (nothing when `from == to`).
    pub moves: ReshardMoves,
    /// From the announcement until the operator held every shard's lease: how long delivery
    /// paused before the switch (the nodes' current stages, then up to a poll interval).
    pub gathered_in: Duration,
    /// How long the switch's transaction took: writes waited for it, delivery paused on.
    pub switched_in: Duration,
}

/// How a re-sharding runs.
#[derive(Debug, Clone)]
pub struct ReshardOptions {
    /// How long to wait for the nodes to hand every shard over before giving up (nothing
    /// changed). Default: 2 minutes.
    pub timeout: Duration,
}

impl Default for ReshardOptions {
    fn default() -> Self {
        ReshardOptions {
            timeout: Duration::from_secs(120),
        }
    }
}

/// Re-shards the Inbox of `seat`'s lock table to `to` shards (see the module doc), moving
/// every row to its target's shard by `addressing`'s strategy. The node this runs on need not
/// serve; `addressing` learns the new count.
pub async fn reshard(
    seat: &NodeSeat,
    addressing: &Addressing,
    to: u32,
    options: &ReshardOptions,
) -> Result<ReshardReport, DeliveryError> {
    if !(1..=crate::MAX_SHARDS).contains(&to) {
        return Err(crate::model::error::ConfigError::Invalid {
            field: "shards",
            value: to.to_string(),
            reason: "a re-sharding's shard count must be 1..=65536",
        }
        .into());
    }
    seat.sync_clock().await;
    let from = match seat.lock_table.recorded_shard_count().await? {
        Some(recorded) => recorded,
        None => {
            return Err(refused(
                "no shard count is recorded yet: start a node first (its count is recorded then), or build the first one with the count you want".to_owned(),
            ))
        }
    };
    addressing.set_shard_count(from);
    if from == to {
        return Ok(ReshardReport {
            from,
            to,
            moves: ReshardMoves::default(),
            gathered_in: Duration::ZERO,
            switched_in: Duration::ZERO,
        });
    }
    let me = NodeId(format!(
        "reshard-{}-{:08x}",
        seat.node_id.0,
        operator_suffix(seat.clock.now())
    ));
    tracing::info!(from, to, by = %me, "re-sharding: announcing");
    let started = Instant::now();
    announce(seat, &me, to).await?;
    let leases = match gather(seat, &me, to, from, options.timeout).await {
        Ok(leases) => leases,
        Err(e) => {
            if let Err(w) = seat.lock_table.withdraw_reshard(&me).await {
                tracing::warn!(error = %w, "could not withdraw the re-sharding announcement; it runs out by itself");
            }
            return Err(e);
        }
    };
    let gathered_in = started.elapsed();
    tracing::info!(
        from,
        to,
        gathered_ms = gathered_in.as_millis() as u64,
        "re-sharding: every lease held; switching"
    );
    let strategy = addressing.strategy().clone();
    let switch = ReshardSwitch {
        from,
        to,
        leases: leases.values().cloned().collect(),
        route: std::sync::Arc::new(move |kind: &str, id: &str| strategy.shard_of(kind, id, to)),
    };
    let switching = Instant::now();
    match seat.lock_table.reshard(switch).await {
        Ok(moves) => {
            let switched_in = switching.elapsed();
            addressing.set_shard_count(to);
            tracing::info!(
                from,
                to,
                rows = moves.inbox_rows,
                moved = moves.inbox_moved,
                switch_ms = switched_in.as_millis() as u64,
                "re-sharding: done"
            );
            Ok(ReshardReport {
                from,
                to,
                moves,
                gathered_in,
                switched_in,
            })
        }
        Err(e) => {
            // Nothing was switched: the old layout stands; let the nodes serve it again.
            for lease in leases.values() {
                if let Err(r) = seat.lock_table.release(lease).await {
                    tracing::warn!(shard = %lease.shard, error = %r, "could not release a lease after a failed switch; it runs out");
                }
            }
            if let Err(w) = seat.lock_table.withdraw_reshard(&me).await {
                tracing::warn!(error = %w, "could not withdraw the re-sharding announcement; it runs out by itself");
            }
            Err(e.into())
        }
    }
}

/// Records (or renews) `me`'s announcement for one lease duration; refused if another
/// operator's is in force.
async fn announce(seat: &NodeSeat, me: &NodeId, to: u32) -> Result<(), DeliveryError> {
    let now = seat.clock.now();
    let ours = ReshardAnnouncement {
        by: me.clone(),
        to,
        until: seat.lease_until(now),
    };
    let in_force = seat.lock_table.announce_reshard(&ours, now).await?;
    if in_force.by != *me {
        return Err(refused(format!(
            "another re-sharding (by {}, to {} shards) is in progress until {}; wait for it to finish",
            in_force.by, in_force.to, in_force.until
        )));
    }
    Ok(())
}

/// Picks up the lease of every shard `0..from` as the nodes let them go, renewing those held
/// and the announcement every third of a lease. Gives back what it holds on a timeout.
async fn gather(
    seat: &NodeSeat,
    me: &NodeId,
    to: u32,
    from: u32,
    timeout: Duration,
) -> Result<BTreeMap<ShardIndex, Lease>, DeliveryError> {
    let deadline = Instant::now() + timeout;
    let renew_every = seat.lease_duration / 3;
    let mut renewed = Instant::now();
    let mut held: BTreeMap<ShardIndex, Lease> = BTreeMap::new();
    let pause = (seat.poll_interval / 8).clamp(Duration::from_millis(5), Duration::from_millis(50));
    loop {
        let now = seat.clock.now();
        // One read of the lock table, then a pick-up only of the shards that look free: the
        // pick-ups are write transactions, which on SQLite queue behind the nodes' stages.
        let busy: std::collections::BTreeSet<ShardIndex> = seat
            .lock_table
            .sessions()
            .await?
            .into_iter()
            .filter(|s| s.lease_until.is_some_and(|until| until > now))
            .map(|s| s.shard)
            .collect();
        for shard in (0..from).map(ShardIndex) {
            if held.contains_key(&shard) || busy.contains(&shard) {
                continue;
            }
            if let Some(lease) = seat
                .lock_table
                .pick_up(shard, me, WorkerId(0), now, seat.lease_until(now))
                .await?
            {
                held.insert(shard, lease);
            }
        }
        if held.len() == from as usize {
            // The switch must find them held: renew them all once more.
            renew(seat, &mut held).await?;
            return Ok(held);
        }
        if Instant::now() >= deadline {
            let waiting: Vec<String> = (0..from)
                .map(ShardIndex)
                .filter(|s| !held.contains_key(s))
                .map(|s| s.to_string())
                .collect();
            for lease in held.values() {
                let _ = seat.lock_table.release(lease).await;
            }
            let holders = holders_of(seat, &waiting).await;
            return Err(refused(format!(
                "the nodes did not hand over shards {} within {timeout:?} (held by {holders}); nothing changed. Are those nodes running a build without re-sharding, or stalled? Try again, or stop them",
                waiting.join(",")
            )));
        }
        if renewed.elapsed() >= renew_every {
            renew(seat, &mut held).await?;
            announce(seat, me, to).await?;
            renewed = Instant::now();
        }
        tokio::time::sleep(pause).await;
    }
}

/// Renews every lease in `held` for one lease duration.
async fn renew(
    seat: &NodeSeat,
    held: &mut BTreeMap<ShardIndex, Lease>,
) -> Result<(), DeliveryError> {
    let until = seat.lease_until(seat.clock.now());
    for lease in held.values_mut() {
        *lease = seat.lock_table.renew(lease, until).await?;
    }
    Ok(())
}

/// Who holds the lease of each of `shards`, for the timeout's error.
async fn holders_of(seat: &NodeSeat, shards: &[String]) -> String {
    match seat.lock_table.sessions().await {
        Ok(sessions) => {
            let mut names: Vec<String> = sessions
                .iter()
                .filter(|s| shards.contains(&s.shard.to_string()))
                .filter_map(|s| s.node_id.as_ref().map(|n| n.0.clone()))
                .collect();
            names.sort();
            names.dedup();
            names.join(", ")
        }
        Err(_) => "nodes the lock table could not be read for".to_owned(),
    }
}

fn refused(reason: String) -> DeliveryError {
    DeliveryError::Storage(StorageError::ReshardRefused { reason })
}

/// A few random bits for the operator's holder id, so that two operators on one node differ.
fn operator_suffix(now: chrono::DateTime<chrono::Utc>) -> u32 {
    // From the node's clock and the process, with a fixed hasher: distinct for two operators
    // (another process, or another instant), and the same when a test on a manual clock
    // replays a schedule (a random suffix made two replays of one seed differ).
    use std::hash::Hasher;
    // `DefaultHasher::new` has fixed keys: stable within a build, which is all it needs.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write_i64(now.timestamp());
    h.write_u32(now.timestamp_subsec_nanos());
    h.write_u32(std::process::id());
    h.finish() as u32
}

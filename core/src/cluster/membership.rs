//! A running node's side of the membership: its membership beat, and the shard assignment
//! it reads from the members every poll round.
//!
//! ```text
//!  beat, every poll interval ──► shardbox_nodes (a member for one lease after each beat)
//!  lease watch, every round ──► members(now) ──► live_members ──► assign ──► ShardOwners
//!                                  (recomputed only when the live members change)
//! ```
//!
//! What the runner does with the owners: the lease watch leaves other members' free shards
//! to them unless they idle (`runner::cycle::plan_round`), the wake
//! queue ignores wake-ups for them, and a turn on one hands it back at the next stage
//! boundary (see `turn`).

use crate::cluster::assign::{assign, live_members, ShardOwners};
use crate::cluster::seat::NodeSeat;
use crate::model::ids::NodeId;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use tokio::sync::watch;

/// Every poll interval until the stop: reads the storage's clock again (see
/// [`StorageClock`](crate::cluster::storage_clock::StorageClock)) and records that this node is
/// alive for one lease duration (`WorkRegistry::beat`), so that `Shardbox::members` lists it;
/// a node that stops beating leaves the membership one lease after its last beat.
pub(crate) async fn beat_membership(seat: Arc<NodeSeat>, mut stop: watch::Receiver<bool>) {
    let me = &seat.node_id;
    loop {
        // Before every beat: the beat and the leases of this node are on the storage's clock.
        seat.sync_clock().await;
        let now = seat.clock.now();
        let beat = seat
            .lock_table
            .beat(me, now, seat.lease_until(now), &seat.kinds);
        if let Err(e) = beat.await {
            tracing::warn!(error = %e, "membership beat failed; trying again next interval");
        }
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return,
            _ = tokio::time::sleep(seat.poll_interval) => {}
        }
    }
}

/// How many missed beats make a member count as gone for the assignment (it stays in the
/// membership until its `alive_until`, one lease after its last beat).
const MISSED_BEATS: u32 = 3;

/// The assignment as this node last read it: recomputed when the live members change.
pub(crate) struct OwnersView {
    live: Vec<NodeId>,
    /// The shard count the owners were assigned over.
    shards: u32,
    owners: Arc<ShardOwners>,
}

impl OwnersView {
    /// Before the first read: no members, so every shard counts as this node's (the runner
    /// behaves as a lone node until the membership is read).
    pub(crate) fn new() -> Self {
        OwnersView {
            live: Vec::new(),
            shards: 0,
            owners: Arc::new(ShardOwners::default()),
        }
    }

    /// Reads the members at `now` and returns the assignment of `shards` shards over the
    /// live ones. If the read fails, the last assignment stays (logged).
    pub(crate) async fn read(
        &mut self,
        seat: &NodeSeat,
        shards: u32,
        now: DateTime<Utc>,
    ) -> Arc<ShardOwners> {
        let me = &seat.node_id;
        match seat.lock_table.members(now).await {
            Ok(members) => {
                let stale = seat.poll_interval * MISSED_BEATS;
                let live = live_members(&members, me, now, stale);
                if live != self.live || shards != self.shards || self.owners.members().is_empty() {
                    let owners = assign(shards, &live);
                    self.shards = shards;
                    tracing::info!(
                        members = ?live.iter().map(|n| n.0.as_str()).collect::<Vec<_>>(),
                        preferred = owners.shards_of(me).len(),
                        "shard assignment changed"
                    );
                    self.owners = Arc::new(owners);
                    self.live = live;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the members; keeping the last shard assignment");
            }
        }
        self.owners.clone()
    }
}

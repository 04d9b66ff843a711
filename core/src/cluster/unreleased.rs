//! Leases whose release failed (the database was unreachable when a stage failed, a turn
//! ended or a linger ran out): kept here until a release succeeds or the lease runs out.
//!
//! ```text
//!  release fails ──► keep(lease) ──► the retry after the failed turn (or failed release of
//!                                    a kept lease), or the next turn on the shard, settles it
//!                                    first: release again (fenced by the epoch: a lease that
//!                                    ran out and was taken since is left to its new holder)
//! ```
//!
//! Without this a shard whose release failed stayed leased to this node until the lease ran
//! out (30 s by default) although nothing was working on it: its messages waited a whole
//! lease after every database hiccup. Holding the lease here is not working on the shard: no
//! lease renewal renews it, so it also ends by itself.
//!
//! A kept lease is released whatever its recorded `lease_until` says: the lock table's may be
//! later. A stage's commit renews the lease to the time it is built at, and a commit whose
//! acknowledgement was lost renewed it without the node learning so; forgetting the kept lease
//! once the recorded time had passed left the shard leased to this live node, served by
//! nobody, until the renewed time (issue 37, simulation seed 536).

use crate::model::ids::ShardIndex;
use crate::storage::Lease;
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;

/// The leases of this node that still wait for their release, by shard.
#[derive(Default)]
pub(crate) struct UnreleasedLeases {
    leases: Mutex<HashMap<ShardIndex, Lease>>,
}

impl UnreleasedLeases {
    /// Keeps `lease` for a later release (a newer one of the same shard replaces it).
    pub(crate) fn keep(&self, lease: Lease) {
        let mut leases = lock(&self.leases);
        match leases.get(&lease.shard) {
            Some(kept) if kept.epoch > lease.epoch => {}
            _ => {
                leases.insert(lease.shard, lease);
            }
        }
    }

    /// Takes the lease of `shard` that still waits for its release, whatever its recorded
    /// `lease_until` says: the lock table's may be later (see the module docs).
    pub(crate) fn take(&self, shard: ShardIndex) -> Option<Lease> {
        lock(&self.leases).remove(&shard)
    }

    /// Whether a lease of `shard` waits for its release (its next turn settles it).
    pub(crate) fn holds(&self, shard: ShardIndex) -> bool {
        lock(&self.leases).contains_key(&shard)
    }
}

/// The lease of a stage in progress, kept for a release if the stage never returns: its task
/// panicked (a user station) and the future was dropped. Without it the shard stayed leased to
/// this node, with nobody working on it, until the lease ran out. Disarmed when the stage
/// returns, whatever its result (those paths release the lease themselves).
pub(crate) struct KeepIfLost<'a> {
    leases: &'a UnreleasedLeases,
    lease: Option<Lease>,
}

impl UnreleasedLeases {
    /// Keeps `lease` for a release unless the returned guard is disarmed.
    pub(crate) fn keep_if_lost(&self, lease: &Lease) -> KeepIfLost<'_> {
        KeepIfLost {
            leases: self,
            lease: Some(lease.clone()),
        }
    }
}

impl KeepIfLost<'_> {
    /// The stage returned: its own path releases the lease.
    pub(crate) fn disarm(mut self) {
        self.lease = None;
    }
}

impl Drop for KeepIfLost<'_> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.leases.keep(lease);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::{LeaseEpoch, NodeId, WorkerId};
    use chrono::DateTime;

    fn lease(shard: u32, epoch: i64, until: i64) -> Lease {
        let t = |s: i64| DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap();
        Lease {
            shard: ShardIndex(shard),
            node_id: NodeId("n".into()),
            worker_id: WorkerId(0),
            epoch: LeaseEpoch(epoch),
            picked_at: t(0),
            lease_until: t(until),
            taken_over: false,
        }
    }

    #[test]
    fn a_kept_lease_is_taken_once_the_newest_wins_even_past_its_recorded_time() {
        let kept = UnreleasedLeases::default();
        kept.keep(lease(1, 5, 30));
        kept.keep(lease(1, 4, 30));
        assert_eq!(
            kept.take(ShardIndex(1)).map(|l| l.epoch),
            Some(LeaseEpoch(5))
        );
        // A guard dropped without disarming keeps its lease; a disarmed one does not.
        drop(kept.keep_if_lost(&lease(3, 1, 30)));
        kept.keep_if_lost(&lease(4, 1, 30)).disarm();
        assert!(kept.take(ShardIndex(3)).is_some());
        assert!(kept.take(ShardIndex(4)).is_none());
        assert_eq!(kept.take(ShardIndex(1)), None);
        // Its recorded time passed: the lock table may hold it longer (a renewal whose
        // acknowledgement was lost), so it is still released.
        kept.keep(lease(2, 1, 0));
        assert_eq!(
            kept.take(ShardIndex(2)).map(|l| l.epoch),
            Some(LeaseEpoch(1))
        );
    }
}

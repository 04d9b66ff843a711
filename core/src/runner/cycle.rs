//! How a node walks the shards when several nodes share them: the order it probes them in,
//! which ones it leaves to their holder, and which ones it serves first because their holder
//! vanished.
//!
//! ```text
//!  ShardCycle     node "a" over 8 shards, offset fnv(a) % 8 = 5:  5 6 7 0 1 2 3 4
//!  LeaseState     per shard, from the lock table at `now`:  Free │ Held until t │ Orphaned
//!  plan_round     the cycle's order; Held skipped; Orphaned first (urgent), then Free
//!  ending_within  leases of other nodes that end before the next round: looked at right
//!                 when they end, so a crashed holder's shards wait one lease, not one more poll
//!  HeldElsewhere  wake-ups for shards another node holds are ignored until its lease ends
//!                 (or until the next poll round, after a refused pick-up)
//!  should_yield   a worker serves a shard for at least one stage, then lets it go at once if
//!                 an orphaned shard waits, after a turn if other shards wait
//! ```
//!
//! Why these rules: a node that starts at its own offset does not race every other node for
//! shard 0; a shard whose lease is live is its holder's job — the holder hears the same
//! notifications and re-checks its shard after releasing it — so another node trying it would
//! only queue a refused pick-up behind the holder's commit; a shard whose lease expired
//! without a release lost its holder (crash, stall), and its messages have already waited a
//! lease duration, so it goes to the front of the queue.
//!
//! Pure logic: the runner ([`crate::runner::local`]) feeds it the lock table and the clock, and
//! does what it says.

use crate::cluster::assign::ShardOwners;
use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex};
use crate::model::strategy::fnv1a64;
use crate::storage::ShardSession;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The order in which a node probes the shards: all of them, once, starting at an offset
/// derived from the node id, so that nodes spread their first pick-ups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardCycle {
    offset: u32,
    shard_count: u32,
}

impl ShardCycle {
    /// The cycle of `node` over `shard_count` shards (a stable hash of the id picks the
    /// offset: the same node starts at the same shard after a restart).
    pub fn for_node(node: &NodeId, shard_count: u32) -> Self {
        let shard_count = shard_count.max(1);
        let hash = fnv1a64(&[b"shardbox-cycle", node.0.as_bytes()]);
        ShardCycle {
            offset: (hash % u64::from(shard_count)) as u32,
            shard_count,
        }
    }

    /// The shards the cycle goes over.
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// The shard this node's cycle starts at.
    pub fn offset(&self) -> ShardIndex {
        ShardIndex(self.offset)
    }

    /// Every shard once, from the offset, wrapping around.
    pub fn iter(&self) -> impl Iterator<Item = ShardIndex> {
        let (offset, count) = (u64::from(self.offset), u64::from(self.shard_count));
        (0..count).map(move |i| ShardIndex(((offset + i) % count) as u32))
    }
}

/// A shard's lease as the lock table shows it at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Never picked up, or released.
    Free,
    /// Leased until `until` (in the future).
    Held {
        /// End of the lease unless renewed.
        until: DateTime<Utc>,
    },
    /// The lease ran out without a release: its holder crashed or stalled.
    Orphaned,
}

impl LeaseState {
    /// The state of `session` (`None`: the shard has no row yet) at `now`.
    pub fn of(session: Option<&ShardSession>, now: DateTime<Utc>) -> Self {
        match session.and_then(|s| s.lease_until) {
            None => LeaseState::Free,
            Some(until) if until > now => LeaseState::Held { until },
            Some(_) => LeaseState::Orphaned,
        }
    }
}

/// What one poll round of a node does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollPlan {
    /// Shards to probe for due rows, in order; `true` marks an orphaned shard, to be served
    /// before the others.
    pub probe: Vec<(ShardIndex, bool)>,
    /// Shards another node holds, with the end of its lease: wake-ups for them are ignored
    /// until then.
    pub held_elsewhere: Vec<(ShardIndex, DateTime<Utc>)>,
    /// The shards free in this round, by shard, with their epoch (0: no row yet): the next
    /// round's `free_before`. A shard free in two rounds under the same epoch was not picked
    /// up for a whole poll interval.
    pub free: Vec<Option<LeaseEpoch>>,
}

/// Plans a poll round of node `me` from the lock table at `now` and the shards' preferred
/// owners: orphaned shards first, then free ones, each group in the cycle's order.
///
/// - A free shard whose preferred owner is another member is left to it, unless it was
///   free in the previous round too under the same epoch (`free_before`, the last plan's
///   [`PollPlan::free`]): its owner let it idle for a poll interval, so this node helps.
/// - A shard another node holds is listed in [`PollPlan::held_elsewhere`]; if this node is
///   its preferred owner it is probed too (its holder hands it back at a stage boundary,
///   and the probe picks it up after the release).
/// - An orphaned shard (its lease ran out without a release) is anyone's: its holder died
///   or stalled, and its messages have waited a lease already.
///
/// With an empty `sessions` (the lock table could not be read) every shard is probed.
pub fn plan_round(
    cycle: &ShardCycle,
    sessions: &[ShardSession],
    owners: &ShardOwners,
    free_before: &[Option<LeaseEpoch>],
    me: &NodeId,
    now: DateTime<Utc>,
) -> PollPlan {
    let mut by_shard: Vec<Option<&ShardSession>> = vec![None; cycle.shard_count as usize];
    for s in sessions {
        if let Some(slot) = by_shard.get_mut(s.shard.0 as usize) {
            *slot = Some(s);
        }
    }
    let mut plan = PollPlan {
        free: vec![None; cycle.shard_count as usize],
        ..PollPlan::default()
    };
    let mut free = Vec::new();
    for shard in cycle.iter() {
        let session = by_shard[shard.0 as usize];
        let others = owners.is_others(shard, me);
        match LeaseState::of(session, now) {
            LeaseState::Free => {
                let epoch = session.map_or(LeaseEpoch(0), |s| s.epoch);
                plan.free[shard.0 as usize] = Some(epoch);
                let idle = free_before.get(shard.0 as usize) == Some(&Some(epoch));
                if !others || idle {
                    free.push((shard, false));
                }
            }
            LeaseState::Orphaned => plan.probe.push((shard, true)),
            LeaseState::Held { until } => {
                // Our own workers' shards are served by them; a lease of ours that no worker
                // holds (an earlier run with the same node id) is tried again when it ends.
                if session.and_then(|s| s.node_id.as_ref()) != Some(me) {
                    plan.held_elsewhere.push((shard, until));
                    if !others && !owners.members().is_empty() {
                        free.push((shard, false));
                    }
                }
            }
        }
    }
    plan.probe.extend(free);
    plan
}

/// The leases of `held` that end within `horizon` after `now`, as (time from `now`, shard),
/// soonest first. A live holder renews its lease long before it ends (every commit, and every
/// third of a lease during a stage), so a lease about to end is most likely a dead holder's:
/// its shard is worth a look the moment the lease ends.
pub fn ending_within(
    held: &[(ShardIndex, DateTime<Utc>)],
    now: DateTime<Utc>,
    horizon: Duration,
) -> Vec<(Duration, ShardIndex)> {
    let mut ending: Vec<(Duration, ShardIndex)> = held
        .iter()
        .filter_map(|&(shard, until)| {
            let left = (until - now).to_std().unwrap_or(Duration::ZERO);
            (left < horizon).then_some((left, shard))
        })
        .collect();
    ending.sort();
    ending
}

/// Who waits for a worker of this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Shards in the queue.
    pub shards: usize,
    /// Whether one of them is an orphaned shard (its holder's lease ran out).
    pub orphaned: bool,
}

/// Whether a worker that has served a shard for `served` (at least one committed stage)
/// should let it go now, its due rows left for a later turn (or another node): at once when
/// an orphaned shard waits — its messages have already waited a lease duration — after
/// `turn` when other shards wait, never while nobody waits.
pub fn should_yield(served: Duration, waiting: Waiting, turn: Duration) -> bool {
    waiting.orphaned || (waiting.shards > 0 && served >= turn)
}

/// Shards this node leaves alone for now because another node holds them: wake-ups for them
/// (notifications of writes) are ignored until the mark ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldElsewhere {
    until: Vec<Option<DateTime<Utc>>>,
}

impl HeldElsewhere {
    /// No marks, over `shard_count` shards.
    pub fn new(shard_count: u32) -> Self {
        HeldElsewhere {
            until: vec![None; shard_count as usize],
        }
    }

    /// Makes room for shards up to `shard_count` (a re-sharding to more), unmarked.
    pub fn grow_to(&mut self, shard_count: u32) {
        if self.until.len() < shard_count as usize {
            self.until.resize(shard_count as usize, None);
        }
    }

    /// Replaces every mark with a poll round's view of the lock table.
    pub fn refresh(&mut self, held: &[(ShardIndex, DateTime<Utc>)]) {
        self.until.iter_mut().for_each(|u| *u = None);
        for &(shard, until) in held {
            self.mark(shard, until);
        }
    }

    /// Marks `shard` as held elsewhere until `until` (a later mark wins; unknown shards are
    /// ignored).
    pub fn mark(&mut self, shard: ShardIndex, until: DateTime<Utc>) {
        if let Some(slot) = self.until.get_mut(shard.0 as usize) {
            *slot = Some(slot.map_or(until, |u| u.max(until)));
        }
    }

    /// Whether wake-ups of `shard` are to be ignored at `now`.
    pub fn is_held(&self, shard: ShardIndex, now: DateTime<Utc>) -> bool {
        self.until
            .get(shard.0 as usize)
            .copied()
            .flatten()
            .is_some_and(|until| until > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::assign::assign;
    use crate::model::ids::WorkerId;
    use std::collections::HashSet;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn a_cycle_visits_every_shard_once_from_its_offset() {
        let cycle = ShardCycle::for_node(&NodeId("node-a".into()), 8);
        let order: Vec<ShardIndex> = cycle.iter().collect();
        assert_eq!(order.len(), 8);
        assert_eq!(order[0], cycle.offset());
    }

    fn node(n: &str) -> NodeId {
        NodeId(n.into())
    }

    fn session(shard: u32, holder: &str, until: Option<i64>) -> ShardSession {
        ShardSession {
            shard: ShardIndex(shard),
            node_id: Some(node(holder)),
            worker_id: Some(WorkerId(0)),
            epoch: LeaseEpoch(1),
            picked_at: Some(t(0)),
            lease_until: until.map(t),
        }
    }

    #[test]
    fn a_cycle_visits_every_shard_once_from_the_node_offset() {
        for count in [1, 2, 7, 64, 1000] {
            let cycle = ShardCycle::for_node(&node("node-a"), count);
            let order: Vec<_> = cycle.iter().collect();
            assert_eq!(order.len(), count as usize);
            assert_eq!(order[0], cycle.offset());
            let distinct: HashSet<_> = order.iter().collect();
            assert_eq!(distinct.len(), count as usize, "each shard once");
            for pair in order.windows(2) {
                assert_eq!(pair[1].0, (pair[0].0 + 1) % count, "consecutive, wrapping");
            }
        }
    }

    #[test]
    fn nodes_start_at_different_shards_and_keep_their_offset() {
        let offsets: HashSet<_> = (0..8)
            .map(|i| ShardCycle::for_node(&node(&format!("node-{i}")), 64).offset())
            .collect();
        assert!(
            offsets.len() >= 6,
            "8 nodes spread over 64 shards: {offsets:?}"
        );
        assert_eq!(
            ShardCycle::for_node(&node("node-3"), 64),
            ShardCycle::for_node(&node("node-3"), 64),
            "stable across restarts"
        );
        assert_eq!(ShardCycle::for_node(&node("x"), 0).iter().count(), 1);
    }

    #[test]
    fn lease_states_follow_the_lock_table() {
        assert_eq!(LeaseState::of(None, t(5)), LeaseState::Free);
        assert_eq!(
            LeaseState::of(Some(&session(0, "a", None)), t(5)),
            LeaseState::Free,
            "released"
        );
        assert_eq!(
            LeaseState::of(Some(&session(0, "a", Some(9))), t(5)),
            LeaseState::Held { until: t(9) }
        );
        assert_eq!(
            LeaseState::of(Some(&session(0, "a", Some(5))), t(5)),
            LeaseState::Orphaned,
            "a lease ending now is free to take (pick-up uses <=)"
        );
    }

    #[test]
    fn a_round_serves_orphans_first_and_skips_leased_shards() {
        let me = node("me");
        let cycle = ShardCycle::for_node(&me, 6);
        let start = cycle.offset().0;
        let at = |i: u32| ShardIndex((start + i) % 6);
        let sessions = vec![
            session(at(1).0, "other", Some(10)), // held elsewhere
            session(at(2).0, "me", Some(10)),    // our own worker's
            session(at(3).0, "dead", Some(2)),   // orphaned
            session(at(4).0, "other", None),     // released
        ];
        let plan = plan_round(&cycle, &sessions, &ShardOwners::default(), &[], &me, t(5));
        assert_eq!(
            plan.probe,
            vec![
                (at(3), true),
                (at(0), false),
                (at(4), false),
                (at(5), false)
            ]
        );
        assert_eq!(plan.held_elsewhere, vec![(at(1), t(10))]);
    }

    #[test]
    fn without_the_lock_table_every_shard_is_probed() {
        let me = node("me");
        let cycle = ShardCycle::for_node(&me, 4);
        let plan = plan_round(&cycle, &[], &ShardOwners::default(), &[], &me, t(0));
        let order: Vec<_> = cycle.iter().map(|s| (s, false)).collect();
        assert_eq!(plan.probe, order);
        assert!(plan.held_elsewhere.is_empty());
        let stray = vec![session(99, "x", Some(10))];
        assert_eq!(
            plan_round(&cycle, &stray, &ShardOwners::default(), &[], &me, t(0))
                .probe
                .len(),
            4
        );
    }

    #[test]
    fn a_round_leaves_other_members_shards_to_them_unless_idle() {
        let (me, other) = (node("me"), node("other"));
        let owners = assign(8, &[me.clone(), other.clone()]);
        let mine = owners.shards_of(&me);
        let theirs = owners.shards_of(&other);
        assert_eq!((mine.len(), theirs.len()), (4, 4));
        let cycle = ShardCycle::for_node(&me, 8);
        let mut sessions = vec![
            session(mine[0].0, "other", Some(10)), // mine, held by other: probed + marked
            session(theirs[0].0, "other", None),   // theirs, free, idle since last round
            session(theirs[1].0, "other", None),   // theirs, free, picked up meanwhile
            session(theirs[2].0, "other", Some(10)), // theirs, held by them
            session(theirs[3].0, "dead", Some(2)), // theirs, orphaned: anyone's
        ];
        sessions[1].epoch = LeaseEpoch(4);
        sessions[2].epoch = LeaseEpoch(7);
        let mut before = vec![None; 8];
        before[theirs[0].0 as usize] = Some(LeaseEpoch(4));
        before[theirs[1].0 as usize] = Some(LeaseEpoch(6));
        let plan = plan_round(&cycle, &sessions, &owners, &before, &me, t(5));
        let probed: HashSet<ShardIndex> = plan.probe.iter().map(|p| p.0).collect();
        let want: HashSet<ShardIndex> =
            mine.iter().copied().chain([theirs[0], theirs[3]]).collect();
        assert_eq!(probed, want, "my shards, an idle one of theirs, an orphan");
        assert_eq!(plan.probe[0], (theirs[3], true), "the orphan first");
        let held: HashSet<ShardIndex> = plan.held_elsewhere.iter().map(|h| h.0).collect();
        assert_eq!(held, HashSet::from([mine[0], theirs[2]]));
        assert_eq!(plan.free[theirs[1].0 as usize], Some(LeaseEpoch(7)));
        assert_eq!(
            plan.free[mine[1].0 as usize],
            Some(LeaseEpoch(0)),
            "no row yet"
        );
        assert_eq!(plan.free[theirs[2].0 as usize], None, "held");
        // The next round: theirs[1] still free under epoch 7, now idle for a round.
        let next = plan_round(&cycle, &sessions, &owners, &plan.free, &me, t(6));
        assert!(next.probe.contains(&(theirs[1], false)));
    }

    #[test]
    fn leases_ending_before_the_next_round_are_looked_at_when_they_end() {
        let held = [
            (ShardIndex(1), t(9)),
            (ShardIndex(2), t(6)),
            (ShardIndex(3), t(30)),
            (ShardIndex(4), t(4)),
        ];
        let ending = ending_within(&held, t(5), Duration::from_secs(5));
        assert_eq!(
            ending,
            vec![
                (Duration::ZERO, ShardIndex(4)),
                (Duration::from_secs(1), ShardIndex(2)),
                (Duration::from_secs(4), ShardIndex(1)),
            ],
            "soonest first; an already ended lease at once; later ones left to later rounds"
        );
        assert!(ending_within(&held, t(5), Duration::ZERO).is_empty());
    }

    #[test]
    fn a_worker_yields_to_orphans_at_once_and_to_others_after_a_turn() {
        let turn = Duration::from_secs(1);
        let (short, long) = (Duration::from_millis(10), Duration::from_secs(2));
        let nobody = Waiting::default();
        let others = Waiting {
            shards: 3,
            orphaned: false,
        };
        let orphan = Waiting {
            shards: 1,
            orphaned: true,
        };
        assert!(!should_yield(long, nobody, turn), "nobody waits: go on");
        assert!(!should_yield(short, others, turn), "the turn is not over");
        assert!(should_yield(long, others, turn));
        assert!(
            should_yield(short, orphan, turn),
            "an orphan waits: at once"
        );
    }

    #[test]
    fn held_marks_end_with_the_lease_and_are_replaced_each_round() {
        let mut held = HeldElsewhere::new(4);
        held.mark(ShardIndex(1), t(10));
        held.mark(ShardIndex(1), t(8));
        assert!(held.is_held(ShardIndex(1), t(9)), "the later mark wins");
        assert!(!held.is_held(ShardIndex(1), t(10)));
        assert!(!held.is_held(ShardIndex(2), t(0)));
        held.mark(ShardIndex(9), t(10));
        assert!(!held.is_held(ShardIndex(9), t(0)), "unknown shards ignored");

        held.refresh(&[(ShardIndex(2), t(20))]);
        assert!(
            !held.is_held(ShardIndex(1), t(0)),
            "released since the last round"
        );
        assert!(held.is_held(ShardIndex(2), t(19)));
    }
}

//! The latency invariant: once a shard is served — the faults are off (the settle phase) and
//! its lease, if any, is held by a live node that knows it holds it — no due message waits
//! longer than a bound derived from the configuration.
//!
//! ```text
//!  every SAMPLE of the settle phase:
//!    lock table ─► shard excused while leased to someone who cannot serve it: a stopped
//!                  node's incarnation, a re-sharding operator, a lease whose pick-up or
//!                  renewal lost its acknowledgement (its holder does not know), or while a
//!                  re-sharding runs or its announcement is in force (one its operator
//!                  could not withdraw runs out by itself); every shard excused while a
//!                  storage call delayed before the faults stopped still sleeps
//!    read_page  ─► each target's first due row, not behind a block or a retry, not a
//!                  catch-up's while one runs: eligible since the first sample it was seen so
//!    waited > bound ─► violation (once per row and attempt)
//! ```
//!
//! The bound, for a shard served by a live node with no faults:
//! - a due row of a shard nobody holds is found by a wake-up (a write's notification, or the
//!   timer a worker set for the shard's `next_due`) at once, or else by the node's poll round:
//!   one `poll_interval`;
//! - a shard held by its node for the linger is served by a wake-up during the linger, or its
//!   release looks once more for due rows: one `lease_linger`;
//! - a turn or release that failed just before the faults stopped is retried after at most
//!   one `poll_interval` (`retry_delay` is capped there), and a shard handed to its preferred
//!   owner is picked up at that owner's next poll round: one more `poll_interval`;
//! - a stage is instant in simulated time (no injected delay in the settle phase), and the
//!   sampling adds nothing: a row's wait is counted from the first sample that saw it
//!   eligible, so the measured wait is never more than the real one;
//! - margin: one `poll_interval`, for the wake-up round trips between the nodes' tasks.
//!
//! So `bound = lease_linger + 3 × poll_interval` (1.05 s with a 300 ms linger, 0.75 s without;
//! the lease is 4 s). A lease kept by a live node that neither serves nor releases it — issue
//! 37's defect 1, a failed release of a kept lease left with nothing scheduled — makes its
//! shard's rows wait until the lease runs out: up to `lease_duration` + a poll.

use super::faulty::FaultyStorage;
use super::model::Audit;
use chrono::{DateTime, Utc};
use shardbox::core::storage::{InboxStore, WorkRegistry};
use shardbox::core::ShardIndex;
use shardbox::prelude::Projection;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long a due message may wait once its shard is served (see the module doc).
pub fn bound(poll_interval: Duration, linger: Duration) -> Duration {
    linger + poll_interval * 3
}

/// Which incarnation of each node runs: the place (see [`FaultyStorage::pick_ups`]) from
/// which its pick-ups are its own, or `None` while it is stopped.
#[derive(Debug, Clone, Default)]
pub struct Incarnations(pub Vec<Option<usize>>);

impl Incarnations {
    fn live(&self, node_id: &str, faults: &FaultyStorage, shard: u32, epoch: i64) -> bool {
        let Some(i) = node_id
            .strip_prefix("node-")
            .and_then(|i| i.parse::<usize>().ok())
        else {
            return false; // a re-sharding operator
        };
        match (
            self.0.get(i).copied().flatten(),
            faults.pick_place(shard, epoch),
        ) {
            (Some(from), Some(place)) => place >= from,
            _ => false,
        }
    }
}

/// The settle phase's watch over due messages.
#[derive(Debug)]
pub struct LatencyWatch {
    bound: Duration,
    /// (target kind, target id, signal, attempts) -> first sample it was seen eligible.
    eligible_since: BTreeMap<(String, String, String, u32), DateTime<Utc>>,
    /// Rows that waited over the bound: the longest wait seen and how it was seen first.
    over: BTreeMap<(String, String, String, u32), (Duration, String)>,
    /// The longest wait seen, and whose.
    pub worst: (Duration, String),
    pub samples: usize,
}

impl LatencyWatch {
    pub fn new(bound: Duration) -> Self {
        LatencyWatch {
            bound,
            eligible_since: BTreeMap::new(),
            over: BTreeMap::new(),
            worst: (Duration::ZERO, String::new()),
            samples: 0,
        }
    }

    /// One sample at `now`. `resharding`: a re-sharding runs (delivery pauses for it);
    /// `catching_up`: a catch-up runs (its projection's live rows are held for it).
    pub async fn sample(
        &mut self,
        faults: &FaultyStorage,
        incarnations: &Incarnations,
        now: DateTime<Utc>,
        resharding: bool,
        catching_up: bool,
    ) -> Result<(), String> {
        self.samples += 1;
        let mut seen = BTreeSet::new();
        let layout = faults.layout().await.map_err(|e| e.to_string())?;
        // An announcement in force pauses delivery, also one its operator could not withdraw
        // (it runs out by itself).
        let announced = layout.resharding.is_some_and(|a| a.until > now);
        // A storage call delayed before the faults stopped still holds its caller up.
        let delayed = faults.delays_in_flight() > 0;
        if !resharding && !announced && !delayed {
            let count = layout.shard_count.unwrap_or(4);
            let sessions = faults.sessions().await.map_err(|e| e.to_string())?;
            for shard in 0..count {
                let session = sessions.iter().find(|s| s.shard.0 == shard);
                let held = session.filter(|s| s.lease_until.is_some_and(|u| u > now));
                let excused = held.and_then(|s| {
                    let node = s.node_id.as_ref().map_or("", |n| n.0.as_str());
                    if let Some(why) = faults.unacknowledged(shard, s.epoch.0) {
                        Some(why.to_owned())
                    } else if incarnations.live(node, faults, shard, s.epoch.0) {
                        None
                    } else {
                        Some(format!("leased to {node}, not a live incarnation"))
                    }
                });
                if excused.is_some() {
                    continue;
                }
                let page = faults
                    .read_page(ShardIndex(shard), now, 10_000)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut first_of_target = BTreeSet::new();
                for row in &page.messages {
                    let m = &row.message;
                    let target = (m.target_kind.clone(), m.target_id.clone());
                    if !first_of_target.insert(target.clone()) {
                        continue; // behind an earlier row of its target
                    }
                    let behind = |k: &shardbox::core::storage::EntityKey| {
                        k.kind == m.target_kind && k.id == m.target_id
                    };
                    if page.blocked.iter().any(behind)
                        || page.waiting.iter().any(|(k, _)| behind(k))
                    {
                        continue;
                    }
                    if catching_up
                        && (m.target_kind == Audit::KIND
                            || m.target_kind == shardbox::core::catch_up::TICK_KIND)
                    {
                        continue;
                    }
                    let key = (
                        m.target_kind.clone(),
                        m.target_id.clone(),
                        m.signal_id.0.clone(),
                        row.attempts,
                    );
                    seen.insert(key.clone());
                    let since = *self.eligible_since.entry(key.clone()).or_insert(now);
                    let waited = (now - since).to_std().unwrap_or_default();
                    if waited > self.worst.0 {
                        self.worst = (waited, format!("{}/{} {}", key.0, key.1, key.2));
                    }
                    if waited > self.bound {
                        let first = || {
                            format!(
                                "latency: {}/{} signal {} (seq {}, attempts {}) on shard {shard}, due and served since {since} (lease at {now}: {:?})",
                                key.0,
                                key.1,
                                key.2,
                                row.seq,
                                row.attempts,
                                session.map(|s| (
                                    s.node_id.as_ref().map(|n| n.0.clone()),
                                    s.epoch.0,
                                    s.lease_until
                                )),
                            )
                        };
                        let entry = self
                            .over
                            .entry(key.clone())
                            .or_insert_with(|| (waited, first()));
                        entry.0 = entry.0.max(waited);
                    }
                }
            }
        }
        // A row not eligible now starts again from its next eligible sample.
        self.eligible_since.retain(|k, _| seen.contains(k));
        Ok(())
    }

    /// The violations: each row that waited over the bound, with the longest wait seen (up
    /// to the sample before it was served).
    pub fn violations(&mut self) -> Vec<String> {
        let bound = self.bound.as_millis();
        std::mem::take(&mut self.over)
            .into_values()
            .map(|(waited, what)| {
                format!(
                    "{what} waited {} ms, over the bound of {bound} ms",
                    waited.as_millis()
                )
            })
            .collect()
    }
}

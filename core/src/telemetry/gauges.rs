//! Gauges: how deep the Inbox is, how far behind each shard is, and the operator's counts,
//! read from storage by a running node every `gauge_interval` and set through the `metrics`
//! facade — never on the delivery path.
//!
//! ```text
//!  GaugeSample::read(storage, node, now)   InboxStore::depths, WorkRegistry::sessions,
//!                                          DeadLetterStore::count_dead_letters,
//!                                          CatchUpStore::running_catch_ups (4 queries)
//!  GaugeSample::publish(node)              metrics::gauge!(…).set(…), labelled `node`
//!  GaugeSample::publish_database(labels)   the database's gauges alone (the admin surface's
//!                                          `/metrics` sets them into a recorder of its own)
//!  publish_kind_controls(controls, node)   shardbox_kind_paused{kind}, at each read of the
//!                                          kinds' controls (every poll interval, no query)
//! ```
//!
//! The Inbox, dead letters and catch-ups are the whole database's, so every node reports the
//! same values (aggregate them with `max without (node)`); `shardbox_leases_held` is the
//! reporting node's own.

use crate::catch_up::CatchUpProgress;
use crate::model::error::StorageError;
use crate::model::ids::{NodeId, ShardIndex};
use crate::model::kind_controls::KindControls;
use crate::storage::{DeadLetterFilter, ShardDepth, StorageReads};
use chrono::{DateTime, Utc};
use metrics::Label;

/// One reading of every gauge.
#[derive(Debug, Clone, PartialEq)]
pub struct GaugeSample {
    /// The depth of every shard `0..shard_count` (empty shards included).
    pub shards: Vec<ShardDepth>,
    /// The depths of all shards added up.
    pub totals: ShardDepth,
    /// When it was read (lags are measured from here).
    pub now: DateTime<Utc>,
    /// Leases the reporting node holds at `now`.
    pub leases_held: u64,
    /// Dead letters stored.
    pub dead_letters: u64,
    /// Running catch-ups: (job id, projection kind, events replayed, total estimate).
    pub catch_ups: Vec<(i64, String, i64, i64)>,
}

impl GaugeSample {
    /// Reads the gauges of `shard_count` shards from `storage` at `now`, for `node`.
    pub async fn read(
        storage: &StorageReads,
        node: &NodeId,
        shard_count: u32,
        now: DateTime<Utc>,
    ) -> Result<Self, StorageError> {
        let depths = storage.depths(now).await?;
        let sessions = storage.sessions().await?;
        let dead_letters = storage.count_dead_letters(&DeadLetterFilter::all()).await?;
        let jobs = storage.running_catch_ups().await?;

        let mut shards: Vec<ShardDepth> = (0..shard_count)
            .map(|s| ShardDepth::empty(ShardIndex(s)))
            .collect();
        let mut totals = ShardDepth::empty(ShardIndex(0));
        for d in &depths {
            totals.absorb(d);
            if let Some(slot) = shards.get_mut(d.shard.0 as usize) {
                *slot = *d;
            }
        }
        let leases_held = sessions
            .iter()
            .filter(|s| s.node_id.as_ref() == Some(node) && s.lease_until.is_some_and(|u| u > now))
            .count() as u64;
        let catch_ups = jobs
            .iter()
            .map(|job| {
                let p = CatchUpProgress::of(job, now);
                (
                    job.id,
                    job.spec.projection_kind.clone(),
                    p.replayed,
                    p.total_estimate,
                )
            })
            .collect();
        Ok(GaugeSample {
            shards,
            totals,
            now,
            leases_held,
            dead_letters,
            catch_ups,
        })
    }

    /// Blocked targets: each holds exactly one blocking row.
    pub fn blocked_targets(&self) -> u64 {
        self.totals.blocked
    }

    /// Sets every gauge through the `metrics` facade, labelled with `node`.
    pub fn publish(&self, node: &NodeId) {
        let labels = [Label::new("node", node.0.clone())];
        self.publish_database(&labels);
        metrics::gauge!("shardbox_leases_held", labels.to_vec()).set(self.leases_held as f64);
    }

    /// Sets the gauges that are the whole database's (all but `shardbox_leases_held`), each
    /// with `labels` besides its own (`state`, `shard`, `job`, `projection`). A node labels
    /// them with itself ([`publish`](Self::publish)); the admin surface's `/metrics` sets
    /// them with none, into a recorder of its own: one code, so the same names and labels.
    pub fn publish_database(&self, labels: &[Label]) {
        let with = |extra: &[(&'static str, String)]| -> Vec<Label> {
            let mut all = labels.to_vec();
            all.extend(extra.iter().map(|(k, v)| Label::new(*k, v.clone())));
            all
        };
        let t = &self.totals;
        for (state, value) in [
            ("due", t.due),
            ("delayed", t.delayed),
            ("retrying", t.retrying),
            ("parked", t.parked),
            ("replay", t.replay),
            ("blocked", t.blocked),
            ("delivered", t.delivered),
        ] {
            metrics::gauge!("shardbox_inbox_depth", with(&[("state", state.into())]))
                .set(value as f64);
        }
        let mut oldest = 0.0_f64;
        for d in &self.shards {
            let lag = d.lag(self.now).num_milliseconds() as f64 / 1000.0;
            oldest = oldest.max(lag);
            metrics::gauge!(
                "shardbox_shard_lag_seconds",
                with(&[("shard", d.shard.0.to_string())])
            )
            .set(lag);
        }
        metrics::gauge!("shardbox_lag_seconds", with(&[])).set(oldest);
        metrics::gauge!("shardbox_dead_letters", with(&[])).set(self.dead_letters as f64);
        metrics::gauge!("shardbox_blocked_targets", with(&[])).set(self.blocked_targets() as f64);
        metrics::gauge!("shardbox_catch_ups_running", with(&[])).set(self.catch_ups.len() as f64);
        for (id, projection, replayed, total) in &self.catch_ups {
            let labels = with(&[("job", id.to_string()), ("projection", projection.clone())]);
            metrics::gauge!("shardbox_catch_up_replayed", labels.clone()).set(*replayed as f64);
            metrics::gauge!("shardbox_catch_up_total", labels).set(*total as f64);
        }
    }
}

/// Sets `shardbox_kind_paused{kind}` for every kind with stored controls: 1 while paused, 0
/// once resumed (a resumed kind keeps its row, so its gauge goes back to 0).
pub fn publish_kind_controls(controls: &KindControls, node: &NodeId) {
    for control in controls.all() {
        metrics::gauge!(
            "shardbox_kind_paused",
            "node" => node.0.clone(),
            "kind" => control.kind.clone()
        )
        .set(if control.paused_since.is_some() {
            1.0
        } else {
            0.0
        });
    }
}

//! The DeliveryMonitor: hooks into the delivery loop for metrics, logging and control.
//!
//! Every method has a default, so a monitor implements only what it needs. The monitor's
//! answer to a handler failure is authoritative: the live-delivery station obeys it.

use crate::entity::handler_error::HandlerError;
use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex};
use crate::model::message::InboxMessage;
use crate::storage::{FailedWrites, Lease};
use crate::telemetry::fates::Settled;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// A stage about to run.
#[derive(Debug, Clone)]
pub struct StageInfo {
    /// The shard.
    pub shard: ShardIndex,
    /// The lease epoch it runs under.
    pub epoch: LeaseEpoch,
    /// The node.
    pub node_id: NodeId,
    /// Rows in the page.
    pub page_len: usize,
}

/// What a stage did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageReport {
    /// Rows in the page.
    pub page_len: usize,
    /// Messages handled and marked delivered.
    pub delivered: usize,
    /// Duplicates dropped by the stations.
    pub duplicates: usize,
    /// Failed messages scheduled for another attempt.
    pub retried: usize,
    /// Messages moved to the dead letters.
    pub dead_lettered: usize,
    /// Messages dropped by policy.
    pub dropped: usize,
    /// Messages that blocked their target (exhausted under a `block` policy).
    pub blocked: usize,
    /// Messages expired by TTL.
    pub expired: usize,
    /// Messages held (waiting behind a failure of their target, or by a catch-up).
    pub held: usize,
    /// Delivered rows purged after their window.
    pub purged: usize,
    /// Rows the handlers' events and commands fanned out to.
    pub fanned_out: usize,
    /// Time the stage took.
    pub elapsed: Duration,
    /// The messages this stage dead-lettered, dropped, blocked their target or expired, in
    /// page order: logged once the stage committed (see [`crate::telemetry::fates`]). Not
    /// summed by [`StageReport::add`].
    pub settled: Vec<Settled>,
}

impl StageReport {
    /// Moves the rows whose writes failed inside the commit's transaction (SQL projections)
    /// from `delivered`, which the stage counted them as before its commit, to what they
    /// became instead.
    pub fn correct(&mut self, failed: &FailedWrites) {
        self.delivered = self.delivered.saturating_sub(failed.rows);
        self.retried += failed.retried;
        self.dead_lettered += failed.dead_lettered;
        self.dropped += failed.dropped;
        self.blocked += failed.blocked;
        self.expired += failed.expired;
        self.held += failed.held;
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &StageReport) {
        self.page_len += other.page_len;
        self.delivered += other.delivered;
        self.duplicates += other.duplicates;
        self.retried += other.retried;
        self.dead_lettered += other.dead_lettered;
        self.dropped += other.dropped;
        self.blocked += other.blocked;
        self.expired += other.expired;
        self.held += other.held;
        self.purged += other.purged;
        self.fanned_out += other.fanned_out;
        self.elapsed += other.elapsed;
    }
}

/// A message whose handling failed.
#[derive(Debug, Clone, Copy)]
pub struct FailureInfo<'a> {
    /// The message.
    pub message: &'a InboxMessage,
    /// The error.
    pub error: &'a HandlerError,
    /// Failed attempts, this one included.
    pub attempts: u32,
    /// The stage's time.
    pub now: DateTime<Utc>,
}

/// What to do with a failed message, as a monitor decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Do what the kind's failure policy says.
    FollowPolicy,
    /// Try again at this time.
    RetryAt(DateTime<Utc>),
    /// Move it to the dead letters now.
    DeadLetter,
    /// Drop it now.
    Drop,
    /// Block its target now: the message stays in the Inbox with status `blocked` until an
    /// operator requeues or drops it.
    Block,
    /// Treat it as delivered.
    MarkDelivered,
}

/// Hooks into the delivery loop.
pub trait DeliveryMonitor: Send + Sync + 'static {
    /// A stage is about to run the stations.
    fn on_stage_started(&self, stage: &StageInfo) {
        let _ = stage;
    }

    /// A stage committed.
    fn on_stage_finished(&self, stage: &StageInfo, report: &StageReport) {
        let _ = (stage, report);
    }

    /// Whether the worker should run another stage on this shard (after a committed one).
    fn should_continue(&self, stage: &StageInfo, report: &StageReport) -> bool {
        let _ = (stage, report);
        true
    }

    /// Another worker holds the shard.
    fn on_pick_up_refused(&self, shard: ShardIndex) {
        let _ = shard;
    }

    /// A worker of this node picked up `lease` (its shard is this node's until released or
    /// lost): a free shard, or with `lease.taken_over` one whose holder's lease ran out
    /// without a release. For schedulers, per-shard caches and autoscalers; called once per
    /// pick-up, not for a lease kept between turns (`lease_linger`).
    fn on_picked_up(&self, lease: &Lease) {
        let _ = lease;
    }

    /// This node released `lease`: its shard is free for any node at once (drained past the
    /// linger, handed over, at shutdown, or for a re-sharding).
    fn on_released(&self, lease: &Lease) {
        let _ = lease;
    }

    /// This node handed `shard` back to its preferred owner, another live member, after a
    /// stage: called once its lease is released ([`DeliveryMonitor::on_released`] came
    /// first).
    fn on_handed_over(&self, shard: ShardIndex) {
        let _ = shard;
    }

    /// The lease was lost before a commit; nothing of the stage was written.
    fn on_lease_lost(&self, shard: ShardIndex, epoch: LeaseEpoch) {
        let _ = (shard, epoch);
    }

    /// A handler failed; the answer decides what happens to the message.
    fn on_handler_failure(&self, failure: &FailureInfo<'_>) -> FailureAction {
        let _ = failure;
        FailureAction::FollowPolicy
    }
}

/// A monitor that does nothing and always follows the policy.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopMonitor;

impl DeliveryMonitor for NoopMonitor {}

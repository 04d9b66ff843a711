//! Why a stage found its lease lost, told from the lock table, for the log line it gets.
//!
//! ```text
//!  session of the shard, read after the loss
//!    held (lease_until > now) by another node or worker ─► TakenOver: WARN (a node was slow or
//!                                                          partitioned past its lease)
//!    anything else (free, expired, or unreadable)       ─► Refenced: DEBUG (a catch-up starting
//!                                                          or completing bumps the epoch and
//!                                                          frees the lease: routine)
//! ```
//!
//! Every catch-up re-fences the shards it touches, so a WARN for each of those losses would
//! bury the takeovers an operator must see. The read happens only after a loss, never on the
//! delivery path.

use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, WorkerId};
use crate::storage::{ShardSession, WorkRegistry};
use chrono::{DateTime, Utc};

/// What took a stage's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseLoss {
    /// Another worker holds the shard now.
    TakenOver {
        /// The new owner, if the lock table names one.
        by: Option<NodeId>,
    },
    /// The lease was re-fenced and freed (a catch-up starting or completing), or is free.
    Refenced,
}

impl LeaseLoss {
    /// The cause, from `session` (the shard's row read after the loss, if readable): a lease
    /// held at `now` by anyone but (`node`, `worker`) is a takeover.
    pub(crate) fn of(
        session: Option<&ShardSession>,
        node: &NodeId,
        worker: WorkerId,
        now: DateTime<Utc>,
    ) -> Self {
        match session {
            Some(s)
                if s.lease_until.is_some_and(|until| until > now)
                    && (s.node_id.as_ref() != Some(node) || s.worker_id != Some(worker)) =>
            {
                LeaseLoss::TakenOver {
                    by: s.node_id.clone(),
                }
            }
            _ => LeaseLoss::Refenced,
        }
    }
}

/// Logs the loss of `shard`'s lease (held at `epoch` by `worker` of `node`), at WARN for a
/// takeover and DEBUG for a re-fence.
pub(crate) async fn log_lease_lost(
    registry: &(impl WorkRegistry + ?Sized),
    shard: ShardIndex,
    epoch: LeaseEpoch,
    node: &NodeId,
    worker: WorkerId,
    now: DateTime<Utc>,
) {
    let sessions = registry.sessions().await.unwrap_or_default();
    let session = sessions.iter().find(|s| s.shard == shard);
    match LeaseLoss::of(session, node, worker, now) {
        LeaseLoss::TakenOver { by } => {
            let by = by.map_or_else(|| "another worker".to_owned(), |n| n.0);
            tracing::warn!(%shard, %epoch, %node, %by, "lease lost: taken over by another worker (this one was slow or cut off past its lease); stage not committed, the new owner redelivers");
        }
        LeaseLoss::Refenced => {
            tracing::debug!(%shard, %epoch, %node, "lease lost: re-fenced by a catch-up starting or completing; stage not committed, the shard is served again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .expect("valid")
    }

    fn session(node: Option<&str>, worker: u32, until: Option<i64>) -> ShardSession {
        ShardSession {
            shard: ShardIndex(3),
            node_id: node.map(|n| NodeId(n.into())),
            worker_id: Some(WorkerId(worker)),
            epoch: LeaseEpoch(7),
            picked_at: Some(t(0)),
            lease_until: until.map(t),
        }
    }

    #[test]
    fn a_lease_held_by_someone_else_is_a_takeover() {
        let me = NodeId("a".into());
        assert_eq!(
            LeaseLoss::of(
                Some(&session(Some("b"), 0, Some(30))),
                &me,
                WorkerId(0),
                t(10)
            ),
            LeaseLoss::TakenOver {
                by: Some(NodeId("b".into()))
            }
        );
        assert_eq!(
            LeaseLoss::of(
                Some(&session(Some("a"), 1, Some(30))),
                &me,
                WorkerId(0),
                t(10)
            ),
            LeaseLoss::TakenOver {
                by: Some(NodeId("a".into()))
            },
            "another worker of the same node"
        );
    }

    #[test]
    fn a_freed_or_expired_lease_is_a_refence() {
        let me = NodeId("a".into());
        // A catch-up bumps the epoch and frees the lease (lease_until unset).
        assert_eq!(
            LeaseLoss::of(Some(&session(Some("a"), 0, None)), &me, WorkerId(0), t(10)),
            LeaseLoss::Refenced
        );
        assert_eq!(
            LeaseLoss::of(
                Some(&session(Some("b"), 0, Some(5))),
                &me,
                WorkerId(0),
                t(10)
            ),
            LeaseLoss::Refenced,
            "expired"
        );
        assert_eq!(
            LeaseLoss::of(None, &me, WorkerId(0), t(10)),
            LeaseLoss::Refenced
        );
    }
}

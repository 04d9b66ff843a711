//! Starting and cancelling a catch-up, for every caller.
//!
//! ```text
//!  start ─► check the ids ─► CatchUpStore::start_catch_up (overlap refused; affected shards
//!           by the caller's addressing, placed again if re-sharded meanwhile)
//!        ─► no target at all: the job ends completed at once
//!        ─► else its first tick into the Inbox, in the tick's shard by that addressing
//!  cancel ─► CatchUpStore::cancel_catch_up (a request; the job's next step carries it out)
//! ```
//!
//! The affected shards are where the targets' live messages are held while the replay runs:
//! they must be the shards the application's strategy puts the targets in, so the caller
//! gives its [`Addressing`] — the application's own, or the recorded stock strategy rebuilt
//! for a tool (`placement::recorded_addressing`, which refuses a custom strategy).

use crate::catch_up::{affected_shards, tick, PURGED_HINT};
use crate::entity::addressing::Addressing;
use crate::model::error::{DeliveryError, StorageError};
use crate::model::ids::{validate, IdField, ShardIndex};
use crate::model::kind_role::KindRole;
use crate::storage::{
    CatchUpJob, CatchUpStatus, CatchUpStore, CatchUpTargets, InboxStore, Member, NewCatchUp,
    WorkRegistry, WriteBatch,
};
use chrono::{DateTime, Utc};

/// A catch-up to start.
#[derive(Debug, Clone)]
pub struct CatchUpStart {
    /// The projection kind to rebuild.
    pub projection_kind: String,
    /// The tenant of its instances.
    pub tenant: String,
    /// Which instances.
    pub targets: CatchUpTargets,
    /// Replay only events that occurred at or after this time (all history if `None`).
    pub since: Option<DateTime<Utc>>,
    /// Events to replay, as the caller counted them; 0 when it cannot (a tool does not know
    /// the projection's event types): the job's first step counts them then.
    pub total_estimate: i64,
    /// The read model whose new version the job builds beside the served one (see
    /// [`ReadModelVersion`](crate::storage::ReadModelVersion)); `None` for a plain catch-up.
    pub version_of: Option<String>,
}

/// A started catch-up.
#[derive(Debug, Clone)]
pub struct StartedCatchUp {
    /// The job as stored (completed already if it had no target).
    pub job: CatchUpJob,
    /// The shard its first tick was written to (`None` for a job with no target), for the
    /// caller to wake.
    pub tick_shard: Option<ShardIndex>,
}

/// Whether a catch-up of `kind` started by a tool without the application would be served:
/// `Ok` if a live member (`members`, as `WorkRegistry::members` lists them) registers `kind`
/// as a projection. Otherwise [`DeliveryError::NotServed`], saying why — the kind is another
/// role's, no live node registers it (misspelled, or its nodes are down), or no node runs at
/// all — and naming the live nodes' projections: the start would delete the projection's
/// states at once and they would stay empty until such a node runs. A caller may still force
/// the start.
pub fn check_projection_served(members: &[Member], kind: &str) -> Result<(), DeliveryError> {
    let registered = || members.iter().flat_map(|m| m.kinds.iter());
    if registered().any(|k| k.kind == kind && k.role == KindRole::Projection) {
        return Ok(());
    }
    let mut projections: Vec<&str> = registered()
        .filter(|k| k.role == KindRole::Projection)
        .map(|k| k.kind.as_str())
        .collect();
    projections.sort_unstable();
    projections.dedup();
    let live = if projections.is_empty() {
        "the live nodes register no projection".to_owned()
    } else {
        format!("the live nodes' projections: {}", projections.join(", "))
    };
    let why = if members.is_empty() {
        "no node is running".to_owned()
    } else if let Some(other) = registered().find(|k| k.kind == kind) {
        format!(
            "`{kind}` is a{} {}, not a projection: only projections are rebuilt by a catch-up",
            if other.role == KindRole::Aggregate {
                "n"
            } else {
                ""
            },
            other.role.as_str().replace('_', " ")
        )
    } else {
        format!("no live node registers a projection `{kind}` (misspelled, or its nodes are down)")
    };
    Err(DeliveryError::NotServed {
        kind: kind.to_owned(),
        reason: format!(
            "{why}; {live}. A catch-up started now deletes the projection's states at once, and \
             they stay empty until a node with the projection runs: start such a node, or force \
             the start"
        ),
    })
}

/// Starts `start` at `now`: refused with [`DeliveryError::InvalidInput`] for an id outside
/// the id rules, with `StorageError::CatchUpOverlap` if a running catch-up of the same
/// projection overlaps. A job of zero chosen ids completes at once; any other gets its first
/// tick in the Inbox, in the shard `addressing` gives it.
pub async fn start_catch_up<S>(
    store: &S,
    addressing: &Addressing,
    start: CatchUpStart,
    now: DateTime<Utc>,
) -> Result<StartedCatchUp, DeliveryError>
where
    S: CatchUpStore + InboxStore + WorkRegistry + ?Sized,
{
    // One database of a set holds only its own events: a replay of them alone would rebuild
    // the projection from part of its history. The storage over all of them runs it.
    if let Some(place) = store.recorded_database_place().await? {
        return Err(DeliveryError::Storage(StorageError::Unsupported {
            what: format!("a catch-up of `{}`", start.projection_kind),
            reason: format!(
                "this is database {} of {} of a storage over several databases, and holds only its own events; start it on the storage over all {} (every URL, in order)",
                place.index, place.of, place.of
            ),
        }));
    }
    // The ids are stored with the job (PostgreSQL text refuses a NUL): the id rules.
    validate(IdField::TargetKind, &start.projection_kind)?;
    validate(IdField::Tenant, &start.tenant)?;
    if let CatchUpTargets::Ids(ids) = &start.targets {
        for id in ids {
            validate(IdField::TargetId, id)?;
        }
    }
    let zero_targets = matches!(&start.targets, CatchUpTargets::Ids(ids) if ids.is_empty());
    let strategy = addressing.strategy();
    let mut job = addressing
        .addressed(|shard_count| {
            let spec = NewCatchUp {
                projection_kind: start.projection_kind.clone(),
                tenant: start.tenant.clone(),
                targets: start.targets.clone(),
                since: start.since,
                affected_shards: affected_shards(
                    &start.targets,
                    &start.projection_kind,
                    shard_count,
                    |kind, id| strategy.shard_of(kind, id, shard_count),
                ),
                total_estimate: if zero_targets {
                    0
                } else {
                    start.total_estimate
                },
                created_at: now,
                version_of: start.version_of.clone(),
                // A storage over several databases sets its own count.
                databases: 1,
            };
            store.start_catch_up(spec, shard_count)
        })
        .await?;
    tracing::info!(
        job = job.id,
        kind = %job.spec.projection_kind,
        total_estimate = job.spec.total_estimate,
        "catch-up started"
    );
    if zero_targets {
        job.status = CatchUpStatus::Completed;
        job.finished_at = Some(now);
        job.updated_at = now;
        store.update_catch_up(&job).await?;
        return Ok(StartedCatchUp {
            job,
            tick_shard: None,
        });
    }
    let first = tick(&job, now, None);
    addressing
        .addressed(|shard_count| {
            let mut rows = vec![crate::model::message::InboxWrite {
                shard: ShardIndex(0),
                message: first.clone(),
            }];
            addressing.address_by(&mut rows, shard_count);
            store.write_all_addressed(
                vec![WriteBatch {
                    events: vec![],
                    messages: rows,
                }],
                shard_count,
            )
        })
        .await?;
    Ok(StartedCatchUp {
        job,
        tick_shard: Some(addressing.shard_of(&first.target_kind, &first.target_id)),
    })
}

/// Asks running job `id` to stop at `now` (see `CatchUpStore::cancel_catch_up`): the job as
/// stored, with `cancel_requested_at` set. [`DeliveryError::NotFound`] for no such job (or
/// one purged); a finished one is refused with `StorageError::CatchUpNotRunning`.
pub async fn cancel_catch_up<S>(
    store: &S,
    id: i64,
    now: DateTime<Utc>,
) -> Result<CatchUpJob, DeliveryError>
where
    S: CatchUpStore + ?Sized,
{
    let job = store
        .cancel_catch_up(id, now)
        .await?
        .ok_or_else(|| DeliveryError::NotFound {
            what: format!("catch-up job {id}"),
            hint: PURGED_HINT.into(),
        })?;
    tracing::info!(
        job = id,
        kind = %job.spec.projection_kind,
        cursor = job.cursor,
        "catch-up cancel requested"
    );
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::NodeId;
    use crate::model::kind_role::RegisteredKind;

    fn member(node: &str, kinds: &[(&str, KindRole)]) -> Member {
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        Member {
            node_id: NodeId(node.into()),
            started_at: t,
            beat_at: t,
            alive_until: t,
            kinds: kinds
                .iter()
                .map(|&(kind, role)| RegisteredKind {
                    kind: kind.into(),
                    role,
                })
                .collect(),
        }
    }

    #[tokio::test]
    async fn a_catch_up_on_one_database_of_a_set_is_refused_and_writes_nothing() {
        use crate::memory::MemoryStorage;
        use crate::model::strategy::StableHashStrategy;
        use crate::storage::DatabasePlace;
        let store = MemoryStorage::new();
        store.claim_shard_count(4).await.unwrap();
        let addressing = Addressing::new(std::sync::Arc::new(StableHashStrategy::new()), 4);
        let start = || CatchUpStart {
            projection_kind: "ledger".into(),
            tenant: String::new(),
            targets: CatchUpTargets::All,
            since: None,
            total_estimate: 0,
            version_of: None,
        };
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        store
            .claim_database_place(DatabasePlace { index: 1, of: 3 })
            .await
            .unwrap();
        match start_catch_up(&store, &addressing, start(), now).await {
            Err(e @ DeliveryError::Storage(StorageError::Unsupported { .. })) => {
                assert!(e.to_string().contains("database 1 of 3"), "{e}");
            }
            other => panic!("not refused: {other:?}"),
        }
        assert!(store.running_catch_ups().await.unwrap().is_empty());
        // The same store alone (no place recorded) starts it.
        let alone = MemoryStorage::new();
        alone.claim_shard_count(4).await.unwrap();
        start_catch_up(&alone, &addressing, start(), now)
            .await
            .expect("a database used alone runs catch-ups");
    }

    fn reason(result: Result<(), DeliveryError>) -> String {
        match result {
            Err(DeliveryError::NotServed { reason, .. }) => reason,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_catch_up_is_served_only_by_a_live_node_with_the_projection() {
        let members = [
            member("a", &[("account", KindRole::Aggregate)]),
            member(
                "b",
                &[
                    ("statement", KindRole::Projection),
                    ("balance", KindRole::Projection),
                    ("mailer", KindRole::Reactor),
                ],
            ),
        ];
        assert!(check_projection_served(&members, "balance").is_ok());
        let misspelled = reason(check_projection_served(&members, "balanse"));
        assert!(
            misspelled.contains("no live node registers a projection `balanse`")
                && misspelled.contains("the live nodes' projections: balance, statement")
                && misspelled.contains("force"),
            "{misspelled}"
        );
        let aggregate = reason(check_projection_served(&members, "account"));
        assert!(
            aggregate.starts_with("`account` is an aggregate, not a projection"),
            "{aggregate}"
        );
        let reactor = reason(check_projection_served(&members, "mailer"));
        assert!(reactor.starts_with("`mailer` is a reactor"), "{reactor}");
        let nobody = reason(check_projection_served(&[], "balance"));
        assert!(
            nobody.starts_with("no node is running; the live nodes register no projection"),
            "{nobody}"
        );
    }
}

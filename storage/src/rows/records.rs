//! Rows of the smaller tables: events, entity states, shard sessions, catch-up jobs.

use super::{
    metadata, metadata_json, micros, opt_micros, opt_time, parsed, shard, time, version,
    version_column,
};
use crate::error::Failure;
use crate::schema::{catch_ups, entity_states, events, shard_sessions};
use diesel::prelude::*;
use shardbox_core::storage::{
    CatchUpJob, CatchUpSpread, CatchUpStatus, CatchUpTargets, EntityKey, EntityState, NewCatchUp,
    ShardSession,
};
use shardbox_core::{
    EventSource, LeaseEpoch, NewEvent, NodeId, ShardIndex, SignalId, StoredEvent, WorkerId,
};

/// An event as read.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = events)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct EventRow {
    pub seq: i64,
    #[diesel(embed)]
    pub event: NewEventRow,
}

impl EventRow {
    /// The event as core sees it.
    pub(crate) fn into_event(self) -> Result<StoredEvent, Failure> {
        let e = self.event;
        Ok(StoredEvent {
            seq: self.seq,
            event: NewEvent {
                id: SignalId(e.id),
                event_type: e.event_type,
                source: EventSource {
                    kind: e.source_kind,
                    id: e.source_id,
                },
                tenant: e.tenant,
                occurred_at: time(e.occurred_at)?,
                payload: e.payload,
                version: version(e.version)?,
                metadata: metadata(&e.metadata)?,
            },
        })
    }
}

/// An event to append (`seq` is given by the database).
#[derive(Debug, Insertable, Queryable, Selectable)]
#[diesel(table_name = events)]
#[diesel(treat_none_as_default_value = false)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct NewEventRow {
    pub id: String,
    pub event_type: String,
    pub source_kind: String,
    pub source_id: String,
    pub tenant: String,
    pub occurred_at: i64,
    pub payload: Vec<u8>,
    pub metadata: String,
    pub version: i32,
}

impl NewEventRow {
    /// The row for an event.
    pub(crate) fn from_event(e: NewEvent) -> Result<Self, Failure> {
        Ok(NewEventRow {
            metadata: metadata_json(&e.metadata)?,
            id: e.id.0,
            event_type: e.event_type,
            source_kind: e.source.kind,
            source_id: e.source.id,
            tenant: e.tenant,
            occurred_at: micros(e.occurred_at),
            payload: e.payload,
            version: version_column(e.version)?,
        })
    }
}

/// An entity state as read.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = entity_states)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct EntityStateRow {
    pub kind: String,
    pub tenant: String,
    pub id: String,
    pub version: i64,
    pub state: Vec<u8>,
    pub updated_at: i64,
    pub state_version: i32,
}

impl EntityStateRow {
    /// The state as core sees it.
    pub(crate) fn into_state(self) -> Result<EntityState, Failure> {
        Ok(EntityState {
            key: EntityKey {
                kind: self.kind,
                tenant: self.tenant,
                id: self.id,
            },
            version: self.version,
            state: self.state,
            state_version: version(self.state_version)?,
            updated_at: time(self.updated_at)?,
        })
    }
}

/// The first version of an entity state (an upsert raises the version of an existing one).
#[derive(Debug, Insertable)]
#[diesel(table_name = entity_states)]
#[diesel(treat_none_as_default_value = false)]
pub(crate) struct NewEntityStateRow<'a> {
    pub kind: &'a str,
    pub tenant: &'a str,
    pub id: &'a str,
    pub version: i64,
    pub state: &'a [u8],
    pub updated_at: i64,
    pub state_version: i32,
}

/// A row of the lock table as read.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = shard_sessions)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct SessionRow {
    pub shard: i32,
    pub node_id: Option<String>,
    pub worker_id: Option<i64>,
    pub epoch: i64,
    pub picked_at: Option<i64>,
    pub lease_until: Option<i64>,
}

impl SessionRow {
    /// The session as core sees it.
    pub(crate) fn into_session(self) -> Result<ShardSession, Failure> {
        Ok(ShardSession {
            shard: shard(self.shard)?,
            node_id: self.node_id.map(NodeId),
            worker_id: self.worker_id.map(worker).transpose()?,
            epoch: LeaseEpoch(self.epoch),
            picked_at: opt_time(self.picked_at)?,
            lease_until: opt_time(self.lease_until)?,
        })
    }
}

/// A stored worker number.
pub(crate) fn worker(n: i64) -> Result<WorkerId, Failure> {
    u32::try_from(n)
        .map(WorkerId)
        .map_err(|_| Failure::corrupt(format!("worker id {n} is out of range")))
}

/// A catch-up job as read.
#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = catch_ups)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct CatchUpRow {
    pub id: i64,
    #[diesel(embed)]
    pub job: NewCatchUpRow,
    /// Written only by a cancel request, so not part of the stored job's changeset.
    pub cancel_requested_at: Option<i64>,
}

impl CatchUpRow {
    /// The job as core sees it.
    pub(crate) fn into_job(self) -> Result<CatchUpJob, Failure> {
        let r = self.job;
        let targets = match r.target_ids {
            None => CatchUpTargets::All,
            Some(json) => CatchUpTargets::Ids(serde_json::from_str(&json).map_err(|e| {
                Failure::corrupt(format!("catch-up {} target ids {json:?}: {e}", self.id))
            })?),
        };
        let shards: Vec<i64> = serde_json::from_str(&r.affected_shards).map_err(|e| {
            Failure::corrupt(format!(
                "catch-up {} affected shards {:?}: {e}",
                self.id, r.affected_shards
            ))
        })?;
        let spread = r
            .spread
            .as_deref()
            .map(CatchUpSpread::parse)
            .transpose()
            .map_err(|e| Failure::corrupt(format!("catch-up {}: {e}", self.id)))?;
        let affected_shards = shards
            .into_iter()
            .map(|s| {
                u32::try_from(s)
                    .map(ShardIndex)
                    .map_err(|_| Failure::corrupt(format!("catch-up {}: shard {s}", self.id)))
            })
            .collect::<Result<_, _>>()?;
        Ok(CatchUpJob {
            id: self.id,
            spec: NewCatchUp {
                projection_kind: r.projection_kind,
                tenant: r.tenant,
                targets,
                since: opt_time(r.since)?,
                affected_shards,
                total_estimate: r.total_estimate,
                created_at: time(r.created_at)?,
                version_of: r.version_of,
                databases: spread.as_ref().map_or(1, |s| s.databases),
            },
            status: parsed("catch-up status", &r.status, CatchUpStatus::parse)?,
            cursor: r.cursor_seq,
            until_seq: r.until_seq,
            replayed: r.replayed,
            updated_at: time(r.updated_at)?,
            finished_at: opt_time(r.finished_at)?,
            cancel_requested_at: opt_time(self.cancel_requested_at)?,
            spread,
        })
    }
}

/// A catch-up job's columns (all but `id` and `cancel_requested_at`).
#[derive(Debug, Insertable, Queryable, Selectable, AsChangeset)]
#[diesel(table_name = catch_ups)]
#[diesel(treat_none_as_default_value = false, treat_none_as_null = true)]
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres"),
    diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))
)]
pub(crate) struct NewCatchUpRow {
    pub projection_kind: String,
    pub tenant: String,
    pub target_ids: Option<String>,
    pub since: Option<i64>,
    pub status: String,
    pub cursor_seq: i64,
    pub replayed: i64,
    pub total_estimate: i64,
    pub affected_shards: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub version_of: Option<String>,
    pub until_seq: Option<i64>,
    pub spread: Option<String>,
}

impl NewCatchUpRow {
    /// The row for a job as it stands.
    pub(crate) fn from_job(job: &CatchUpJob) -> Result<Self, Failure> {
        let spec = &job.spec;
        let target_ids = match &spec.targets {
            CatchUpTargets::All => None,
            CatchUpTargets::Ids(ids) => Some(
                serde_json::to_string(ids)
                    .map_err(|e| Failure::corrupt(format!("catch-up target ids: {e}")))?,
            ),
        };
        let shards: Vec<u32> = spec.affected_shards.iter().map(|s| s.0).collect();
        Ok(NewCatchUpRow {
            projection_kind: spec.projection_kind.clone(),
            tenant: spec.tenant.clone(),
            target_ids,
            since: opt_micros(spec.since),
            status: job.status.as_str().to_owned(),
            cursor_seq: job.cursor,
            replayed: job.replayed,
            total_estimate: spec.total_estimate,
            affected_shards: serde_json::to_string(&shards)
                .map_err(|e| Failure::corrupt(format!("catch-up affected shards: {e}")))?,
            created_at: micros(spec.created_at),
            updated_at: micros(job.updated_at),
            finished_at: opt_micros(job.finished_at),
            version_of: spec.version_of.clone(),
            until_seq: job.until_seq,
            spread: job.spread.as_ref().map(CatchUpSpread::to_text),
        })
    }
}

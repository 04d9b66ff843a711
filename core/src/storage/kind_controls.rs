//! [`KindControlStore`]: the stored controls of entity kinds — a pause, run-time settings —
//! that every node reads (see [`crate::model::kind_controls`]).
//!
//! ```text
//!  pause_kind    record the pause; stages park the kind's rows they read from then on
//!                (`RowChange::Paused`, applied only if the kind is still paused at commit)
//!  resume_kind   clear it and make the kind's parked rows due at once, in one transaction
//!                that waits for commits in flight (so that none parks a row after it)
//!  set_kind_settings / kind_controls   the run-time settings, read by every node
//! ```

use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::model::kind_controls::{KindControl, KindSettings};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// What a resume did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeReport {
    /// Whether the kind was paused.
    pub was_paused: bool,
    /// Parked rows of the kind made due at once (rows parked behind a block or by a catch-up
    /// among them are parked again by the stage that reads them, if they still must wait).
    pub released: usize,
    /// The shards of those rows, sorted, each once.
    pub shards: Vec<ShardIndex>,
}

/// The stored controls of entity kinds.
#[async_trait]
pub trait KindControlStore: Send + Sync {
    /// Every kind with stored controls, by kind name.
    async fn kind_controls(&self) -> Result<Vec<KindControl>, StorageError>;

    /// Pauses `kind` as of `now`; returns whether it was not paused before (a pause of a
    /// paused kind keeps its first time). Stages that read a row of a paused kind park it
    /// untouched otherwise (no attempt, no error); other kinds go on.
    async fn pause_kind(&self, kind: &str, now: DateTime<Utc>) -> Result<bool, StorageError>;

    /// Resumes `kind`: clears its pause and makes its parked rows due at once, in one
    /// transaction that a stage commit in flight finishes before (on PostgreSQL it takes every
    /// shard's session row, as an unblock takes its target's), so that no stage parks a row of
    /// the kind after the resume.
    async fn resume_kind(
        &self,
        kind: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeReport, StorageError>;

    /// Stores `settings` as `kind`'s run-time settings (replacing the stored ones; an empty
    /// value puts the kind back on its build-time configuration). Nodes follow it from their
    /// next read of the controls.
    async fn set_kind_settings(
        &self,
        kind: &str,
        settings: &KindSettings,
        now: DateTime<Utc>,
    ) -> Result<(), StorageError>;
}

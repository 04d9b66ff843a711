//! The in-memory [`KindControlStore`]: pauses and run-time settings, and the parking of a
//! paused kind's rows.

use super::{MemoryStorage, State};
use crate::model::error::StorageError;
use crate::model::kind_controls::{KindControl, KindSettings};
use crate::storage::{KindControlStore, ResumeReport};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

impl State {
    /// The stored controls of `kind`, made if it has none (not paused, no settings).
    fn control_mut(&mut self, kind: &str, now: DateTime<Utc>) -> &mut KindControl {
        self.kind_controls
            .entry(kind.to_owned())
            .or_insert_with(|| KindControl {
                kind: kind.to_owned(),
                paused_since: None,
                settings: KindSettings::default(),
                updated_at: now,
            })
    }

    /// Parks row `seq` if its kind is paused (see `RowChange::Paused`), or leaves it due.
    pub(super) fn park_paused(&mut self, seq: i64) {
        let Some(row) = self.rows.get(&seq) else {
            return;
        };
        let paused = self
            .kind_controls
            .get(&row.message.target_kind)
            .is_some_and(|c| c.paused_since.is_some());
        if paused {
            if let Some(row) = self.rows.get_mut(&seq) {
                row.message.deliver_after = Some(crate::catch_up::parked_until());
            }
        }
    }
}

#[async_trait]
impl KindControlStore for MemoryStorage {
    async fn kind_controls(&self) -> Result<Vec<KindControl>, StorageError> {
        Ok(self.lock().kind_controls.values().cloned().collect())
    }

    async fn pause_kind(&self, kind: &str, now: DateTime<Utc>) -> Result<bool, StorageError> {
        let mut state = self.lock();
        let control = state.control_mut(kind, now);
        if control.paused_since.is_some() {
            return Ok(false);
        }
        control.paused_since = Some(now);
        control.updated_at = now;
        Ok(true)
    }

    async fn resume_kind(
        &self,
        kind: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeReport, StorageError> {
        // One lock: a stage commit either parked its rows before (released here) or finds the
        // kind resumed (parks nothing).
        let mut state = self.lock();
        let was_paused = match state.kind_controls.get_mut(kind) {
            Some(c) if c.paused_since.is_some() => {
                c.paused_since = None;
                c.updated_at = now;
                true
            }
            _ => false,
        };
        let mut shards = state.release_parked_where(|row| row.message.target_kind == kind);
        let released = shards.len();
        shards.sort_unstable();
        shards.dedup();
        Ok(ResumeReport {
            was_paused,
            released,
            shards,
        })
    }

    async fn set_kind_settings(
        &self,
        kind: &str,
        settings: &KindSettings,
        now: DateTime<Utc>,
    ) -> Result<(), StorageError> {
        let mut state = self.lock();
        let control = state.control_mut(kind, now);
        control.settings = settings.clone();
        control.updated_at = now;
        Ok(())
    }
}

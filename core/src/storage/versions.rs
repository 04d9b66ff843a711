//! Read-model versions (blue/green rebuilds): which projection kind serves a read model, and
//! which one is being built beside it.
//!
//! ```text
//!  build a version   start_catch_up(kind, version_of = model): in the start's transaction
//!                    the model's record gets building = kind, building_job = the job
//!                    (refused while another build of the model runs, or for the served kind)
//!  the job completes the stage commit that completes it (and releases the new kind's live
//!                    rows it parked) switches the record in the same transaction:
//!                    served = kind, previous = the kind served before, building cleared
//!  the job is cancelled  building cleared, served untouched
//!  retire a version  its states deleted (refused for the served and the building kind)
//! ```
//!
//! A read model is named by the kind that first serves it: until a build completes, model
//! `order-list` is served by the projection kind `order-list`. Each version is a projection
//! kind of its own, registered by the application, following the same events: the served
//! version keeps receiving live events while the new one replays the history, and the new
//! one's live events wait (parked, as for any catch-up) until the commit that switches.
//!
//! The rules are here, as plain functions over the record; each backend loads the record,
//! applies them and stores it inside the transaction named above.

use crate::model::error::StorageError;
use chrono::{DateTime, Utc};

/// What a read model is served by, and what is being built beside it (serialized as the
/// operators' views show it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadModelVersion {
    /// The read model's name: the kind that served it first.
    pub model: String,
    /// The projection kind serving reads now.
    pub served: String,
    /// The projection kind being built beside it, if a build runs.
    pub building: Option<String>,
    /// The catch-up job building it.
    pub building_job: Option<i64>,
    /// The kind served before the last switch, until it is retired.
    pub previous: Option<String>,
    /// When the last switch happened.
    pub switched_at: Option<DateTime<Utc>>,
}

impl ReadModelVersion {
    /// The record of a model never switched: served by the kind of its own name.
    pub fn first(model: &str) -> Self {
        ReadModelVersion {
            model: model.to_owned(),
            served: model.to_owned(),
            building: None,
            building_job: None,
            previous: None,
            switched_at: None,
        }
    }

    /// Starts building `kind` with catch-up job `job`; refused while another build runs, and
    /// for the kind that serves the model now.
    pub fn start_build(&mut self, kind: &str, job: i64) -> Result<(), StorageError> {
        if let (Some(building), Some(running)) = (&self.building, self.building_job) {
            return Err(StorageError::VersionRefused {
                model: self.model.clone(),
                reason: format!(
                    "version `{building}` is being built (catch-up job {running}); wait for it \
                     to complete or cancel it"
                ),
            });
        }
        if kind == self.served {
            return Err(StorageError::VersionRefused {
                model: self.model.clone(),
                reason: format!(
                    "`{kind}` serves it now; build another projection kind beside it (a \
                     rebuild of the served kind in place is a plain catch-up)"
                ),
            });
        }
        self.building = Some(kind.to_owned());
        self.building_job = Some(job);
        Ok(())
    }

    /// What the end of catch-up job `job` makes of the record: if it builds this model's new
    /// version, a completion switches to it and a cancel drops it. Returns whether the record
    /// changed.
    pub fn finish_build(&mut self, job: i64, completed: bool, at: DateTime<Utc>) -> bool {
        if self.building_job != Some(job) {
            return false;
        }
        let built = self.building.take();
        self.building_job = None;
        if let (true, Some(built)) = (completed, built) {
            self.previous = Some(std::mem::replace(&mut self.served, built));
            self.switched_at = Some(at);
        }
        true
    }

    /// Checks that `kind` may be retired (its states deleted): not the served kind, not the
    /// one being built. Returns whether it was the previous version (the record then forgets
    /// it).
    pub fn retire(&mut self, kind: &str) -> Result<bool, StorageError> {
        let refuse = |reason: String| StorageError::VersionRefused {
            model: self.model.clone(),
            reason,
        };
        if kind == self.served {
            return Err(refuse(format!(
                "`{kind}` serves it; only a version it no longer serves can be retired"
            )));
        }
        if self.building.as_deref() == Some(kind) {
            return Err(refuse(format!(
                "`{kind}` is being built; cancel its catch-up job first"
            )));
        }
        let was_previous = self.previous.as_deref() == Some(kind);
        if was_previous {
            self.previous = None;
        }
        Ok(was_previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    #[test]
    fn a_completed_build_switches_and_keeps_the_old_as_previous() {
        let mut v = ReadModelVersion::first("list");
        v.start_build("list-v2", 7).expect("start");
        assert!(!v.finish_build(8, true, at()), "another job's end");
        assert_eq!(v.served, "list");
        assert!(v.finish_build(7, true, at()));
        assert_eq!(
            (
                v.served.as_str(),
                v.previous.as_deref(),
                v.building.as_deref()
            ),
            ("list-v2", Some("list"), None)
        );
        assert_eq!((v.building_job, v.switched_at), (None, Some(at())));
    }

    #[test]
    fn a_cancelled_build_leaves_the_served_version() {
        let mut v = ReadModelVersion::first("list");
        v.start_build("list-v2", 7).expect("start");
        assert!(v.finish_build(7, false, at()));
        assert_eq!(v, ReadModelVersion::first("list"));
    }

    #[test]
    fn builds_do_not_overlap_and_the_served_kind_is_not_rebuilt_beside_itself() {
        let mut v = ReadModelVersion::first("list");
        assert!(matches!(
            v.start_build("list", 1),
            Err(StorageError::VersionRefused { .. })
        ));
        v.start_build("list-v2", 1).expect("start");
        let err = v
            .start_build("list-v3", 2)
            .expect_err("one build at a time");
        assert!(err.to_string().contains("job 1"), "{err}");
    }

    #[test]
    fn only_a_version_that_is_neither_served_nor_built_is_retired() {
        let mut v = ReadModelVersion::first("list");
        v.start_build("list-v2", 7).expect("start");
        assert!(v.retire("list").is_err(), "served");
        assert!(v.retire("list-v2").is_err(), "being built");
        v.finish_build(7, true, at());
        assert!(v.retire("list-v2").is_err(), "served now");
        assert!(v.retire("list").expect("retired"));
        assert_eq!(v.previous, None);
        assert!(!v.retire("list").expect("again"));
    }
}

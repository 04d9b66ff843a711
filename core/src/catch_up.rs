//! Catch-up: rebuilding a projection from the event store while live traffic flows.
//!
//! This module holds the request ([`CatchUp`]), the pure decisions of the catch-up station
//! (the job's status machine and what to do with a live row of a target being rebuilt), and
//! progress arithmetic. The station (in `shardbox-stations`) feeds them and records what they
//! decide; nothing here does I/O.
//!
//! ```text
//!  start ──► Started ──first tick──► InProgress ──short page──► Finalizing ──no replay rows left──► Completed
//!             (states reset,            (replays one page       (replay rows still       (live rows of the
//!              shards re-fenced)         per tick, cursor)       being delivered)          targets flow again)
//! ```
//!
//! A live event row of a target under catch-up carries the `seq` of its event. If the replay
//! cursor has passed that `seq`, the replay delivers the event, so the live copy is dropped as
//! covered; otherwise it is parked (see [`parked_until`]) until the job completes, when the
//! parked rows the replay covered by then are removed and the others are released, in `seq`
//! order, to live delivery. So no event is applied twice, none is skipped, and each target
//! sees its events in order.
//!
//! ```text
//!  cancel requested (any running status) ──next tick──► no more replay; replayed rows left? ──► Cancelled
//!                                                        wait (AwaitDelivery)      none ─┘  (parked rows settled
//!                                                                                            as at a completion)
//! ```
//!
//! A cancelled job's targets keep the state the replay built up to its cursor, and their
//! parked live events (all after the cursor) are delivered in order: nothing live is lost or
//! doubled. Events before the start that the replay had not reached yet are not re-applied,
//! so a cancelled rebuild is partial until a new catch-up of the same targets runs.

use crate::model::ids::ShardIndex;
use crate::storage::{CatchUpJob, CatchUpSpread, CatchUpStatus, CatchUpTargets};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// What to rebuild: all instances of a projection kind or chosen ids, from a point in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatchUp {
    /// Which instances.
    pub targets: CatchUpTargets,
    /// Replay events that occurred at or after this time (all history if `None`).
    pub since: Option<DateTime<Utc>>,
    /// Tenant of the instances.
    pub tenant: String,
}

impl CatchUp {
    /// Every instance of the projection.
    pub fn all() -> Self {
        CatchUp {
            targets: CatchUpTargets::All,
            since: None,
            tenant: String::new(),
        }
    }

    /// The instances with these ids.
    pub fn ids<I, S>(ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut ids: Vec<String> = ids.into_iter().map(Into::into).collect();
        ids.sort();
        ids.dedup();
        CatchUp {
            targets: CatchUpTargets::Ids(ids),
            since: None,
            tenant: String::new(),
        }
    }

    /// Replays only events that occurred at or after `since`.
    pub fn since(mut self, since: DateTime<Utc>) -> Self {
        self.since = Some(since);
        self
    }

    /// Rebuilds the instances of `tenant`.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }
}

/// Why a catch-up job may not be found: the hint of every "does not exist" error about one.
pub const PURGED_HINT: &str =
    "finished (completed or cancelled) jobs are purged after catch_up_retention";

/// The target kind of the control rows that drive a job (one "tick" per replay step).
pub const TICK_KIND: &str = "shardbox.catch-up";

/// The stable type name of tick payloads.
pub const TICK_TYPE: &str = "shardbox.catch-up.tick";

/// The control row (before it is given a shard) that makes `job` take its next replay step
/// at `due` (at once if `None`); written at `now`.
pub fn tick(
    job: &CatchUpJob,
    now: DateTime<Utc>,
    due: Option<DateTime<Utc>>,
) -> crate::model::message::NewMessage {
    crate::model::message::NewMessage {
        signal_id: crate::model::ids::SignalId(tick_signal(job.id, job.cursor)),
        kind: crate::model::message::MessageKind::Command,
        target_kind: TICK_KIND.to_owned(),
        target_id: job.id.to_string(),
        tenant: String::new(),
        payload: b"{}".to_vec(),
        payload_type: TICK_TYPE.to_owned(),
        payload_version: 1,
        metadata: Default::default(),
        received_at: now,
        deliver_after: due,
        expires_at: None,
    }
}

/// Whether a job's first step must estimate its total: it was started without the projection's
/// event types (the `shardbox` command line), so its estimate is 0 and nothing is replayed yet.
pub fn needs_estimate(job: &CatchUpJob) -> bool {
    job.status == CatchUpStatus::Started && job.replayed == 0 && job.spec.total_estimate == 0
}

/// The signal id of the tick that replays the page after `cursor` for job `job`. Writing it
/// twice is harmless: the second write is a duplicate.
pub fn tick_signal(job: i64, cursor: i64) -> String {
    format!("catch-up/{job}/tick/{cursor}")
}

/// The signal id of the replayed copy of event `event_id` for job `job`.
pub fn replay_signal(job: i64, event_id: &str) -> String {
    format!("catch-up/{job}/event/{event_id}")
}

/// What one replay step (a tick) does to the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepDecision {
    /// Replay the events read, advance the cursor to `cursor`, tick again at once.
    Replay {
        /// The `seq` of the last event read.
        cursor: i64,
        /// Whether this was the last page (fewer events than asked for): the job finalizes.
        last: bool,
    },
    /// All history replayed: wait for the replayed rows to be delivered, tick again later.
    AwaitDelivery,
    /// Replayed rows all delivered: the job completes.
    Complete,
    /// Cancel requested and no replayed row left: the job ends `Cancelled` (its parked rows
    /// are settled as at a completion).
    Cancel,
}

/// The shards a catch-up of `projection_kind` over `targets` touches among `shard_count`
/// shards, sorted and distinct: every shard for [`CatchUpTargets::All`], else the shard of each
/// id by `route` — at a start, and again when the Inbox is re-sharded under a running job.
pub fn affected_shards(
    targets: &CatchUpTargets,
    projection_kind: &str,
    shard_count: u32,
    route: impl Fn(&str, &str) -> ShardIndex,
) -> Vec<ShardIndex> {
    let mut affected: Vec<ShardIndex> = match targets {
        CatchUpTargets::All => (0..shard_count).map(ShardIndex).collect(),
        CatchUpTargets::Ids(ids) => ids.iter().map(|id| route(projection_kind, id)).collect(),
    };
    affected.sort_unstable();
    affected.dedup();
    affected
}

/// Whether a tick of `job` replays events (`false`: it only waits for the replayed rows
/// already written, because the history is replayed or a cancel was requested).
pub fn replays(job: &CatchUpJob) -> bool {
    job.cancel_requested_at.is_none()
        && matches!(
            job.status,
            CatchUpStatus::Started | CatchUpStatus::InProgress
        )
}

/// Decides a tick: `read` events were read after the cursor (asking for `page_size`), and
/// `pending_replay_rows` replayed rows of the projection are not yet delivered.
pub fn decide_step(
    job: &CatchUpJob,
    read: &[i64],
    page_size: usize,
    pending_replay_rows: u64,
) -> StepDecision {
    if job.cancel_requested_at.is_some() && job.status.is_running() {
        // Stop reading history; end once the replayed rows already written are delivered.
        return if pending_replay_rows == 0 {
            StepDecision::Cancel
        } else {
            StepDecision::AwaitDelivery
        };
    }
    match job.status {
        CatchUpStatus::Started | CatchUpStatus::InProgress => {
            let cursor = read.last().copied().unwrap_or(job.cursor).max(job.cursor);
            StepDecision::Replay {
                cursor,
                // A short page: the store's end; or the end the first step recorded, which
                // traffic appending events faster than a page a step cannot push away.
                last: read.len() < page_size || job.until_seq.is_some_and(|end| cursor >= end),
            }
        }
        CatchUpStatus::Finalizing if pending_replay_rows == 0 => StepDecision::Complete,
        CatchUpStatus::Finalizing => StepDecision::AwaitDelivery,
        // A finished job has no ticks, and the station consumes a stray one unread; should
        // one be decided, it ends the job as it already ended (and writes no next tick).
        CatchUpStatus::Completed => StepDecision::Complete,
        CatchUpStatus::Cancelled => StepDecision::Cancel,
    }
}

/// Applies a step decision to the job (pure: returns the new job row).
pub fn apply_step(
    job: &CatchUpJob,
    decision: &StepDecision,
    replayed: usize,
    now: DateTime<Utc>,
) -> CatchUpJob {
    let mut next = job.clone();
    next.updated_at = now;
    match *decision {
        StepDecision::Replay { cursor, last } => {
            next.cursor = cursor;
            next.replayed += replayed as i64;
            next.status = if last {
                CatchUpStatus::Finalizing
            } else {
                CatchUpStatus::InProgress
            };
        }
        StepDecision::AwaitDelivery => {}
        StepDecision::Complete => {
            next.status = CatchUpStatus::Completed;
            next.finished_at = Some(now);
        }
        StepDecision::Cancel => {
            next.status = CatchUpStatus::Cancelled;
            next.finished_at = Some(now);
        }
    }
    next
}

/// What the catch-up station does with a live event row of a target being rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveRowDecision {
    /// The replay has passed its event: the replayed copy applies it, drop this one.
    Covered,
    /// The replay has not reached its event yet: park it (hold it until [`parked_until`]),
    /// so that no page reads it again while the job runs. The job's completion releases it.
    Park,
    /// A job over several databases whose set is not read yet: hold it a poll interval and
    /// decide again (neither delivered nor parked; see [`decide_spread_live_row`]).
    Hold,
    /// A job over several databases that is ending, in a database that has released its
    /// parked rows: a live row like any other (its older parked rows are due before it).
    Deliver,
}

pub use crate::model::parked::{is_parked, parked_until};

/// Decides a live row carrying event `event_seq` while the job's cursor is `cursor`.
pub fn decide_live_row(cursor: i64, event_seq: Option<i64>) -> LiveRowDecision {
    match event_seq {
        Some(seq) if seq <= cursor => LiveRowDecision::Covered,
        _ => LiveRowDecision::Park,
    }
}

/// Decides a live row in `shard` of a target of a job over several databases (see
/// [`crate::storage::CatchUpSpread`]), its event having global seq `event_seq` (`None`: not
/// found): an event of the set is covered whether the replay reached it or not (the replay
/// applies every event of the set before the job ends), a later one is parked; until the set
/// is read the row is held; once the job ends and the row's database has released its
/// parked rows, it is delivered.
pub fn decide_spread_live_row(
    spread: &CatchUpSpread,
    event_seq: Option<i64>,
    shard: ShardIndex,
) -> LiveRowDecision {
    if !spread.prepared() {
        return LiveRowDecision::Hold;
    }
    if spread.settling && spread.released_in(spread.database_of_shard(shard)) {
        return LiveRowDecision::Deliver;
    }
    match event_seq {
        Some(seq) if spread.in_set(seq) => LiveRowDecision::Covered,
        _ => LiveRowDecision::Park,
    }
}

/// Decides a live row in `shard` of a target `job` rebuilds, its event having seq
/// `event_seq`: by the job's cursor on one database, by its set over several.
pub fn decide_job_live_row(
    job: &CatchUpJob,
    event_seq: Option<i64>,
    shard: ShardIndex,
) -> LiveRowDecision {
    match &job.spread {
        None => decide_live_row(job.cursor, event_seq),
        Some(spread) => decide_spread_live_row(spread, event_seq, shard),
    }
}

/// Whether `job` rebuilds instance `id` of its projection.
pub fn covers(job: &CatchUpJob, tenant: &str, id: &str) -> bool {
    job.spec.tenant == tenant
        && match &job.spec.targets {
            CatchUpTargets::All => true,
            CatchUpTargets::Ids(ids) => ids.binary_search_by(|x| x.as_str().cmp(id)).is_ok(),
        }
}

/// A job's progress, readable at any time.
#[derive(Debug, Clone, PartialEq)]
pub struct CatchUpProgress {
    /// Job id.
    pub id: i64,
    /// Where the job is.
    pub status: CatchUpStatus,
    /// Events replayed so far.
    pub replayed: i64,
    /// Events to replay in all: an estimate made at the start (events appended since are
    /// replayed too, so `replayed` may pass it).
    pub total_estimate: i64,
    /// Replayed events per second since the start.
    pub rate: f64,
    /// Time left at the current rate (`None` before anything was replayed, once done, or
    /// once a cancel was requested).
    pub eta: Option<Duration>,
    /// Whether an operator asked to cancel the job. While it still runs, it is stopping: it
    /// replays nothing more and ends `Cancelled` at its next step.
    pub cancel_requested: bool,
}

impl CatchUpProgress {
    /// Progress of `job` at `now`.
    pub fn of(job: &CatchUpJob, now: DateTime<Utc>) -> Self {
        let end = job.finished_at.unwrap_or(now);
        let elapsed = (end - job.spec.created_at)
            .to_std()
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let rate = if elapsed > 0.0 {
            job.replayed as f64 / elapsed
        } else {
            0.0
        };
        let left = (job.spec.total_estimate - job.replayed).max(0) as f64;
        let eta = (job.status.is_running() && job.cancel_requested_at.is_none() && rate > 0.0)
            .then(|| Duration::from_secs_f64(left / rate));
        CatchUpProgress {
            id: job.id,
            status: job.status,
            replayed: job.replayed,
            total_estimate: job.spec.total_estimate,
            rate,
            cancel_requested: job.cancel_requested_at.is_some(),
            eta,
        }
    }

    /// Fraction done, 0.0..=1.0 (1.0 once completed; a cancelled job keeps what it reached).
    pub fn fraction(&self) -> f64 {
        if self.status == CatchUpStatus::Completed {
            return 1.0;
        }
        if self.total_estimate <= 0 {
            return 0.0;
        }
        (self.replayed as f64 / self.total_estimate as f64).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::NewCatchUp;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn job(status: CatchUpStatus, cursor: i64) -> CatchUpJob {
        CatchUpJob {
            id: 7,
            spec: NewCatchUp {
                projection_kind: "p".into(),
                tenant: String::new(),
                targets: CatchUpTargets::Ids(vec!["a".into(), "c".into()]),
                since: None,
                affected_shards: vec![],
                total_estimate: 100,
                created_at: t0(),
                version_of: None,
                databases: 1,
            },
            status,
            cursor,
            until_seq: None,
            replayed: 0,
            updated_at: t0(),
            finished_at: None,
            cancel_requested_at: None,
            spread: None,
        }
    }

    /// Traffic appending a page of events per step never let a replay read a short page, so
    /// a job never finalized: the end the first step recorded ends it.
    #[test]
    fn a_full_page_that_reaches_the_recorded_end_finalizes() {
        let mut j = job(CatchUpStatus::InProgress, 6);
        j.until_seq = Some(9);
        assert_eq!(
            decide_step(&j, &[7, 8], 2, 0),
            StepDecision::Replay {
                cursor: 8,
                last: false
            },
            "short of the end"
        );
        assert_eq!(
            decide_step(&j, &[8, 10], 2, 0),
            StepDecision::Replay {
                cursor: 10,
                last: true
            },
            "a full page past the end, more events after it"
        );
        let next = apply_step(&j, &decide_step(&j, &[8, 10], 2, 0), 2, t0());
        assert_eq!(
            (next.status, next.until_seq),
            (CatchUpStatus::Finalizing, Some(9))
        );
    }

    #[test]
    fn a_full_page_keeps_replaying_a_short_page_finalizes() {
        let j = job(CatchUpStatus::Started, 0);
        let full = decide_step(&j, &[3, 5, 9], 3, 0);
        assert_eq!(
            full,
            StepDecision::Replay {
                cursor: 9,
                last: false
            }
        );
        let next = apply_step(&j, &full, 3, t0());
        assert_eq!(
            (next.status, next.cursor, next.replayed),
            (CatchUpStatus::InProgress, 9, 3)
        );
        let short = decide_step(&next, &[12], 3, 0);
        assert_eq!(
            short,
            StepDecision::Replay {
                cursor: 12,
                last: true
            }
        );
        let fin = apply_step(&next, &short, 1, t0());
        assert_eq!(
            (fin.status, fin.cursor, fin.replayed),
            (CatchUpStatus::Finalizing, 12, 4)
        );
    }

    #[test]
    fn an_empty_read_keeps_the_cursor_and_finalizes() {
        let j = job(CatchUpStatus::InProgress, 40);
        assert_eq!(
            decide_step(&j, &[], 10, 0),
            StepDecision::Replay {
                cursor: 40,
                last: true
            }
        );
    }

    #[test]
    fn finalizing_waits_for_replayed_rows_then_completes() {
        let j = job(CatchUpStatus::Finalizing, 40);
        assert_eq!(decide_step(&j, &[], 10, 3), StepDecision::AwaitDelivery);
        assert_eq!(decide_step(&j, &[], 10, 0), StepDecision::Complete);
        let done = apply_step(&j, &StepDecision::Complete, 0, t0());
        assert_eq!(done.status, CatchUpStatus::Completed);
        assert_eq!(done.finished_at, Some(t0()));
    }

    #[test]
    fn a_cancel_stops_the_replay_waits_for_replayed_rows_then_cancels() {
        for status in [
            CatchUpStatus::Started,
            CatchUpStatus::InProgress,
            CatchUpStatus::Finalizing,
        ] {
            let mut j = job(status, 40);
            assert_eq!(replays(&j), status != CatchUpStatus::Finalizing);
            j.cancel_requested_at = Some(t0());
            assert!(!replays(&j), "{status:?}");
            // Whatever was read, the cursor does not move.
            assert_eq!(
                decide_step(&j, &[41, 42], 2, 1),
                StepDecision::AwaitDelivery
            );
            let waiting = apply_step(&j, &StepDecision::AwaitDelivery, 0, t0());
            assert_eq!((waiting.status, waiting.cursor), (status, 40));
            assert_eq!(decide_step(&j, &[], 10, 0), StepDecision::Cancel);
            let done = apply_step(&j, &StepDecision::Cancel, 0, t0());
            assert_eq!(
                (done.status, done.cursor, done.finished_at),
                (CatchUpStatus::Cancelled, 40, Some(t0()))
            );
            assert!(!done.status.is_running());
        }
    }

    #[test]
    fn a_finished_job_is_left_as_it_is_by_a_stray_step() {
        for status in [CatchUpStatus::Completed, CatchUpStatus::Cancelled] {
            let mut j = job(status, 40);
            j.cancel_requested_at = Some(t0());
            let d = decide_step(&j, &[], 10, 0);
            assert_eq!(apply_step(&j, &d, 0, t0()).status, status);
        }
    }

    #[test]
    fn live_rows_are_covered_up_to_the_cursor_and_held_after() {
        assert_eq!(decide_live_row(10, Some(9)), LiveRowDecision::Covered);
        assert_eq!(decide_live_row(10, Some(10)), LiveRowDecision::Covered);
        assert_eq!(decide_live_row(10, Some(11)), LiveRowDecision::Park);
        assert_eq!(decide_live_row(10, None), LiveRowDecision::Park);
        assert!(is_parked(Some(parked_until())));
        assert!(!is_parked(None));
        assert!(!is_parked(Some(t0())));
        // Representable by every backend (microseconds in an i64).
        assert_eq!(parked_until().timestamp_micros(), 253_402_300_799_000_000);
    }

    #[test]
    fn spread_live_rows_are_held_until_the_set_is_read_and_delivered_once_released() {
        let s = ShardIndex(4); // database 1 of 3
        let d = |spread: &CatchUpSpread, seq: Option<i64>, shard: ShardIndex| {
            decide_spread_live_row(spread, seq, shard)
        };
        let fresh = CatchUpSpread::new(3);
        assert_eq!(d(&fresh, Some(3), s), LiveRowDecision::Hold);
        // Database 0 held local seqs 1..=10 (global 3..=30), database 2 local 1..=4.
        let set = CatchUpSpread {
            events: vec![10, 0, 4],
            ..CatchUpSpread::new(3)
        };
        assert_eq!(d(&set, Some(30), s), LiveRowDecision::Covered);
        assert_eq!(d(&set, Some(33), s), LiveRowDecision::Park);
        assert_eq!(d(&set, Some(4), s), LiveRowDecision::Park);
        assert_eq!(d(&set, None, s), LiveRowDecision::Park);
        // Settling: a database that has not released yet still parks (its release re-fences
        // the stage, or releases what it parked); one that has delivers.
        let settling = CatchUpSpread {
            settling: true,
            released: vec![false, true, false],
            ..set.clone()
        };
        assert_eq!(d(&settling, Some(33), s), LiveRowDecision::Deliver);
        let home = ShardIndex(3);
        assert_eq!(d(&settling, Some(33), home), LiveRowDecision::Park);
        assert_eq!(d(&settling, Some(30), home), LiveRowDecision::Covered);
        // A job's rows are decided by its set, not its cursor, over several databases.
        let mut j = job(CatchUpStatus::InProgress, 0);
        assert_eq!(decide_job_live_row(&j, Some(30), s), LiveRowDecision::Park);
        j.spread = Some(set);
        assert_eq!(
            decide_job_live_row(&j, Some(30), s),
            LiveRowDecision::Covered
        );
    }

    #[test]
    fn jobs_cover_their_ids_and_tenant_only() {
        let j = job(CatchUpStatus::InProgress, 0);
        assert!(covers(&j, "", "a") && covers(&j, "", "c"));
        assert!(!covers(&j, "", "b"));
        assert!(!covers(&j, "other", "a"));
        let mut all = j.clone();
        all.spec.targets = CatchUpTargets::All;
        assert!(covers(&all, "", "anything"));
    }

    #[test]
    fn ids_are_sorted_and_deduplicated_for_lookup() {
        let c = CatchUp::ids(["c", "a", "c"]);
        assert_eq!(c.targets, CatchUpTargets::Ids(vec!["a".into(), "c".into()]));
    }

    #[test]
    fn progress_reports_rate_and_eta() {
        let mut j = job(CatchUpStatus::InProgress, 50);
        j.replayed = 50;
        let p = CatchUpProgress::of(&j, t0() + chrono::Duration::seconds(10));
        assert_eq!(p.rate, 5.0);
        assert_eq!(p.eta, Some(Duration::from_secs(10)));
        assert_eq!(p.fraction(), 0.5);
        j.status = CatchUpStatus::Completed;
        j.finished_at = Some(t0() + chrono::Duration::seconds(20));
        let p = CatchUpProgress::of(&j, t0() + chrono::Duration::seconds(99));
        assert_eq!((p.rate, p.eta, p.fraction()), (2.5, None, 1.0));
    }
}

//! The Conveyor carries one page of a shard through the stations and collects what they
//! decide; [`Conveyor::into_commit`] turns that into one [`StageCommit`] (what each row
//! becomes is `row_changes`'s).
//!
//! Each row of the page gets at most one [`Intent`] (a later station may replace an earlier
//! one). A row that no station claims is held for one poll interval and reported, so that an
//! incomplete pipeline slows a shard down but never spins on it or loses a row.
//!
//! Targets that must wait come with the page: behind a retry until its time
//! ([`Conveyor::waiting`]), behind a blocked message until an operator unblocks it
//! ([`Conveyor::blocked`]; their rows are parked with [`Intent::BehindBlock`], written once
//! and made due together by the unblock, so that they go on in `seq` order).

use crate::model::event::NewEvent;
use crate::model::message::{InboxMessage, InboxWrite, MessageStatus};
use crate::stage::context::StationContext;
pub use crate::stage::intent::{Intent, EXPIRED_REASON};
use crate::stage::row_changes::RowChanges;
use crate::storage::{
    CatchUpJob, DeadLetter, EntityKey, EntityStateWrite, FailedBatch, FailedWrites, InTransaction,
    Lease, Page, StageCommit, WriteBatch,
};
use crate::telemetry::monitor::StageReport;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Work a station defers until its stage committed (see [`Conveyor::after_commit`]).
pub type AfterCommit = Box<dyn FnOnce() + Send + Sync>;

/// One page of a shard on its way through the stations.
pub struct Conveyor {
    context: Arc<StationContext>,
    lease: Lease,
    now: DateTime<Utc>,
    page: Vec<InboxMessage>,
    intents: Vec<Option<Intent>>,
    states: Vec<EntityStateWrite>,
    writes: WriteBatch,
    purge_delivered: usize,
    /// Whether the page read saw a delivered row past its window.
    purge_due: bool,
    waiting: Vec<(EntityKey, DateTime<Utc>)>,
    blocked: Vec<EntityKey>,
    extra_dead_letters: Vec<DeadLetter>,
    catch_ups: Vec<CatchUpJob>,
    purge_catch_ups_before: Option<DateTime<Utc>>,
    in_transaction: Vec<InTransaction>,
    after_commit: Vec<AfterCommit>,
}

impl Conveyor {
    /// A conveyor for `page` (sorted by `seq`) read under `lease` at `now`.
    pub fn new(context: Arc<StationContext>, lease: Lease, now: DateTime<Utc>, page: Page) -> Self {
        let Page {
            messages: mut page,
            waiting,
            blocked,
            next_due: _,
            purge_due,
        } = page;
        page.sort_by_key(|m| m.seq);
        let intents = vec![None; page.len()];
        Conveyor {
            context,
            lease,
            now,
            page,
            intents,
            states: Vec::new(),
            writes: WriteBatch::default(),
            purge_delivered: 0,
            purge_due,
            waiting,
            blocked,
            extra_dead_letters: Vec::new(),
            catch_ups: Vec::new(),
            purge_catch_ups_before: None,
            in_transaction: Vec::new(),
            after_commit: Vec::new(),
        }
    }

    /// Adds a target's application writes to run inside the commit's transaction (a SQL
    /// projection's batch): the intents recorded for its rows are those of a success, and
    /// the work says what they become if its writes fail (see [`InTransaction`]).
    pub fn in_transaction(&mut self, work: InTransaction) {
        self.in_transaction.push(work);
    }

    /// Runs `f` once this stage's commit succeeded, and never if the stage failed, its lease
    /// was lost or its commit was refused (or lost its acknowledgement): for what a station
    /// keeps in memory that must only reflect committed work, such as the live station's
    /// cache of recent deliveries. A delivery remembered before its commit and then never
    /// committed would make a later row of the same key look like a duplicate of it.
    pub fn after_commit(&mut self, f: impl FnOnce() + Send + Sync + 'static) {
        self.after_commit.push(Box::new(f));
    }

    /// Takes the work deferred with [`Conveyor::after_commit`] (the runner runs it after a
    /// successful commit).
    #[doc(hidden)]
    pub fn take_after_commit(&mut self) -> Vec<AfterCommit> {
        std::mem::take(&mut self.after_commit)
    }

    /// What the stations can see: registry, configuration, clock, monitor and the storage's
    /// reads (never a write: see [`StationContext`]).
    pub fn context(&self) -> &Arc<StationContext> {
        &self.context
    }

    /// The lease the stage runs under.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The stage's time.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The page, in `seq` order.
    pub fn page(&self) -> &[InboxMessage] {
        &self.page
    }

    /// Targets whose earlier failed message waits for its retry, with the retry time: their
    /// messages in this page must be held until then (per-target order).
    pub fn waiting(&self) -> &[(EntityKey, DateTime<Utc>)] {
        &self.waiting
    }

    /// Targets of the shard stopped by a blocked message: their messages in this page wait
    /// behind it ([`Intent::BehindBlock`]) until an operator unblocks it.
    pub fn blocked(&self) -> &[EntityKey] {
        &self.blocked
    }

    /// The rows no station has claimed yet, with their index in the page.
    pub fn open(&self) -> impl Iterator<Item = (usize, &InboxMessage)> {
        self.page
            .iter()
            .enumerate()
            .filter(|(i, _)| self.intents[*i].is_none())
    }

    /// The open rows of `status`, with their index.
    pub fn open_with_status(
        &self,
        status: MessageStatus,
    ) -> impl Iterator<Item = (usize, &InboxMessage)> {
        self.open().filter(move |(_, m)| m.status == status)
    }

    /// The intent recorded for row `index`.
    pub fn intent(&self, index: usize) -> Option<&Intent> {
        self.intents.get(index).and_then(Option::as_ref)
    }

    /// Records the intent for row `index` (replacing an earlier one). Out-of-range indexes
    /// are ignored.
    pub fn record(&mut self, index: usize, intent: Intent) {
        if let Some(slot) = self.intents.get_mut(index) {
            *slot = Some(intent);
        }
    }

    /// Stores a new entity state (or deletes it with `None`) with the stage.
    pub fn set_state(&mut self, write: EntityStateWrite) {
        self.states.push(write);
    }

    /// Appends events (with their fan-out rows) to the stage's writes.
    pub fn emit_events(&mut self, events: Vec<NewEvent>, fan_out: Vec<InboxWrite>) {
        self.writes.events.extend(events);
        self.writes.messages.extend(fan_out);
    }

    /// Adds rows (commands) to the stage's writes.
    pub fn emit_messages(&mut self, messages: Vec<InboxWrite>) {
        self.writes.messages.extend(messages);
    }

    /// Records a dead letter that is not a row of the page (an emitted event's copy that
    /// could not be routed to a subscriber), so that it is kept and counted, never lost.
    pub fn add_dead_letter(&mut self, dead_letter: DeadLetter) {
        self.extra_dead_letters.push(dead_letter);
    }

    /// Stores an advanced catch-up job with the stage (inside the fenced transaction).
    pub fn update_catch_up(&mut self, job: CatchUpJob) {
        self.catch_ups.retain(|j| j.id != job.id);
        self.catch_ups.push(job);
    }

    /// Asks the commit to delete the completed catch-up jobs that finished before `before`
    /// (their retention ran out), inside the fenced transaction.
    pub fn purge_catch_ups(&mut self, before: DateTime<Utc>) {
        self.purge_catch_ups_before = Some(before);
    }

    /// Whether the shard held a delivered row whose window had passed when the page was read
    /// (a purge now has work).
    pub fn purge_due(&self) -> bool {
        self.purge_due
    }

    /// Asks the commit to purge up to `limit` delivered rows whose window has passed.
    pub fn purge_delivered(&mut self, limit: usize) {
        self.purge_delivered = self.purge_delivered.max(limit);
    }

    /// Turns the recorded decisions into one commit renewing the lease to `lease_until`, and
    /// the stage's counters (without `purged`, known only after the commit).
    pub fn into_commit(self, lease_until: DateTime<Utc>) -> (StageCommit, StageReport) {
        let mut rows = RowChanges::new(
            self.context.config(),
            self.now,
            self.page.len(),
            self.writes.messages.len(),
            self.extra_dead_letters,
        );
        for (message, intent) in self.page.into_iter().zip(self.intents) {
            rows.settle(message, intent);
        }
        let commit = StageCommit {
            lease: self.lease,
            now: self.now,
            lease_until,
            updates: rows.updates,
            states: self.states,
            writes: self.writes,
            dead_letters: rows.dead_letters,
            purge_delivered: self.purge_delivered,
            catch_ups: self.catch_ups,
            purge_catch_ups_before: self.purge_catch_ups_before,
            release_holds: rows.release_holds,
            outcomes: rows.outcomes,
            outcomes_decided: rows.outcomes_decided,
            in_transaction: self.in_transaction,
            // A storage over several databases moves the rows of other databases' targets
            // here from `writes`; a stage addresses every row to its shard alone.
            outbox: Vec::new(),
        };
        (commit, rows.report)
    }
}

/// What `rows` (one target's, in `seq` order) become under `intents` (one each) in a commit at
/// `now`: the changes, dead letters and outcomes [`Conveyor::into_commit`] would make of them.
/// For a target whose writes inside the transaction failed (see
/// [`TransactionalWork::settle_failure`](crate::storage::TransactionalWork::settle_failure)),
/// decided when the commit runs.
pub fn settle_rows(
    context: &StationContext,
    now: DateTime<Utc>,
    rows: Vec<InboxMessage>,
    intents: Vec<Intent>,
) -> FailedBatch {
    let mut changes = RowChanges::new(context.config(), now, rows.len(), 0, Vec::new());
    for (message, intent) in rows.into_iter().zip(intents) {
        changes.settle(message, Some(intent));
    }
    let r = &changes.report;
    let counts = FailedWrites {
        rows: r.retried + r.dead_lettered + r.dropped + r.blocked + r.held + r.expired,
        retried: r.retried,
        dead_lettered: r.dead_lettered,
        dropped: r.dropped,
        expired: r.expired,
        blocked: r.blocked,
        held: r.held,
    };
    FailedBatch {
        updates: changes.updates,
        dead_letters: changes.dead_letters,
        outcomes: changes.outcomes,
        counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::registry::EntityRegistry;
    use crate::memory::MemoryStorage;
    use crate::model::attempt_errors::ErrorHistory;
    use crate::model::clock::ManualClock;
    use crate::model::config::DeliveryConfig;
    use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, SignalId, WorkerId};
    use crate::model::outcome::CommandOutcome;
    use crate::model::strategy::StableHashStrategy;
    use crate::storage::{RowChange, RowUpdate};
    use crate::telemetry::fates::{Fate, Settled};
    use crate::telemetry::monitor::NoopMonitor;
    use std::time::Duration;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    fn secs(s: i64) -> chrono::Duration {
        chrono::Duration::seconds(s)
    }

    fn env(poll_interval: Duration) -> Arc<StationContext> {
        let config = DeliveryConfig::builder()
            .shard_count(1)
            .poll_interval(poll_interval)
            .node_id(NodeId("node-a".into()))
            .build()
            .unwrap();
        Arc::new(StationContext::new(
            Arc::new(EntityRegistry::new(Arc::new(StableHashStrategy::new()), 1)),
            Arc::new(MemoryStorage::new()),
            config,
            Arc::new(NoopMonitor),
            Arc::new(ManualClock::new(t0())),
        ))
    }

    fn lease() -> Lease {
        Lease {
            shard: ShardIndex(0),
            node_id: NodeId("node-a".into()),
            worker_id: WorkerId(3),
            epoch: LeaseEpoch(7),
            picked_at: t0(),
            lease_until: t0() + secs(30),
            taken_over: false,
        }
    }

    fn row(seq: i64, status: MessageStatus, attempts: u32) -> InboxMessage {
        InboxMessage {
            seq,
            shard: ShardIndex(0),
            status,
            attempts,
            last_error: None,
            first_failed_at: None,
            errors: ErrorHistory::default(),
            keep_until: None,
            message: crate::model::message::test_command(
                &format!("sig-{seq}"),
                "counter",
                &format!("t-{seq}"),
                t0() - secs(5),
            ),
        }
    }

    fn conveyor(rows: Vec<InboxMessage>) -> Conveyor {
        Conveyor::new(
            env(Duration::from_millis(250)),
            lease(),
            t0(),
            Page {
                messages: rows,
                ..Page::default()
            },
        )
    }

    fn seqs<'a>(rows: impl Iterator<Item = (usize, &'a InboxMessage)>) -> Vec<(usize, i64)> {
        rows.map(|(i, m)| (i, m.seq)).collect()
    }

    #[test]
    fn the_page_is_carried_in_seq_order() {
        let c = conveyor(vec![
            row(30, MessageStatus::ToDeliver, 0),
            row(10, MessageStatus::ToDeliver, 0),
            row(20, MessageStatus::ToDeliver, 0),
        ]);
        let order: Vec<i64> = c.page().iter().map(|m| m.seq).collect();
        assert_eq!(order, vec![10, 20, 30]);
        let (commit, _) = c.into_commit(t0() + secs(30));
        let updated: Vec<i64> = commit.updates.iter().map(|u| u.seq).collect();
        assert_eq!(updated, vec![10, 20, 30]);
    }

    #[test]
    fn into_commit_maps_every_intent_to_its_row_change_and_counter() {
        let rows: Vec<InboxMessage> = (1..=9)
            .map(|seq| row(seq, MessageStatus::ToDeliver, 0))
            .collect();
        let mut retried = rows[3].clone();
        retried.attempts = 2;
        retried.errors = ErrorHistory::default().with(t0() - secs(2), 2, "first boom");
        let mut dead = rows[4].clone();
        dead.attempts = 4;
        dead.last_error = Some("earlier failure".into());
        dead.errors = ErrorHistory::default().with(t0() - secs(1), 4, "earlier failure");
        let mut rows = rows;
        rows[3] = retried;
        rows[4] = dead.clone();

        let mut c = conveyor(rows);
        let keep = t0() + secs(60);
        c.record(
            0,
            Intent::Delivered {
                keep_until: Some(keep),
            },
        );
        c.record(1, Intent::Delivered { keep_until: None });
        c.record(2, Intent::Duplicate);
        c.record(
            3,
            Intent::RetryAt {
                at: t0() + secs(4),
                error: "boom".into(),
            },
        );
        c.record(
            4,
            Intent::DeadLetter {
                reason: "gave up".into(),
            },
        );
        c.record(
            5,
            Intent::Drop {
                reason: "dropped".into(),
            },
        );
        c.record(6, Intent::Expired);
        c.record(
            7,
            Intent::Hold {
                until: t0() + secs(9),
            },
        );
        // Row 8 (seq 9) is claimed by no station.

        let lease_until = t0() + secs(45);
        let (commit, report) = c.into_commit(lease_until);
        let settled_dead = Settled::of(&dead, 5, Fate::DeadLettered, "gave up");

        let change = |seq: i64, change: RowChange| RowUpdate { seq, change };
        assert_eq!(
            commit.updates,
            vec![
                change(1, RowChange::Delivered { keep_until: keep }),
                change(2, RowChange::Remove),
                change(3, RowChange::Remove),
                change(
                    4,
                    RowChange::RetryAt {
                        at: t0() + secs(4),
                        attempts: 3,
                        error: "boom".into(),
                        // The history read with the page, this attempt appended.
                        errors: ErrorHistory::default()
                            .with(t0() - secs(2), 2, "first boom")
                            .with(t0(), 3, "boom"),
                    }
                ),
                change(5, RowChange::Remove),
                change(6, RowChange::Remove),
                change(7, RowChange::Remove),
                change(
                    8,
                    RowChange::Hold {
                        until: t0() + secs(9)
                    }
                ),
                change(
                    9,
                    RowChange::Hold {
                        until: t0() + chrono::Duration::milliseconds(250)
                    }
                ),
            ]
        );
        assert_eq!(
            commit.dead_letters,
            vec![DeadLetter {
                // The original row as read, its history ending with the dead letter's reason.
                original: InboxMessage {
                    errors: dead.errors.with(t0(), 5, "gave up"),
                    ..dead.clone()
                },
                reason: "gave up".into(),
                attempts: 5,
                first_attempt_at: Some(t0()),
                last_attempt_at: t0(),
            }]
        );
        assert_eq!(
            report,
            StageReport {
                page_len: 9,
                delivered: 2,
                duplicates: 1,
                retried: 1,
                dead_lettered: 1,
                dropped: 1,
                blocked: 0,
                expired: 1,
                held: 2,
                purged: 0,
                fanned_out: 0,
                elapsed: Duration::ZERO,
                settled: vec![
                    settled_dead,
                    Settled::of(
                        &row(6, MessageStatus::ToDeliver, 0),
                        1,
                        Fate::Dropped,
                        "dropped"
                    ),
                    Settled::of(
                        &row(7, MessageStatus::ToDeliver, 0),
                        0,
                        Fate::Expired {
                            dead_lettered: false
                        },
                        EXPIRED_REASON
                    ),
                ],
            }
        );
        assert_eq!(commit.lease, lease());
        assert_eq!(commit.now, t0());
        assert_eq!(commit.lease_until, lease_until);
        assert!(commit.states.is_empty());
        assert!(commit.writes.is_empty());
        assert_eq!(commit.purge_delivered, 0);
    }

    #[test]
    fn settled_commands_get_outcome_records_except_handled_ones_and_nothing_else_does() {
        let mut event_row = row(4, MessageStatus::ToDeliver, 0);
        event_row.message.kind = crate::model::message::MessageKind::Event;
        let mut c = conveyor(vec![
            row(1, MessageStatus::ToDeliver, 0),
            row(2, MessageStatus::ToDeliver, 0),
            row(3, MessageStatus::ToDeliver, 0),
            event_row,
            row(5, MessageStatus::ToDeliver, 0),
        ]);
        let keep = Some(t0() + secs(60));
        c.record(0, Intent::Delivered { keep_until: keep });
        c.record(1, Intent::DeadLetter { reason: "r".into() });
        c.record(
            2,
            Intent::RetryAt {
                at: t0(),
                error: "again".into(),
            },
        );
        c.record(3, Intent::Delivered { keep_until: keep });
        c.record(4, Intent::Expired);
        let (commit, _) = c.into_commit(t0());
        let got: Vec<(String, CommandOutcome)> = commit
            .outcomes
            .iter()
            .map(|o| (o.key.signal_id.0.clone(), o.outcome.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "sig-2".into(),
                    CommandOutcome::DeadLettered { reason: "r".into() }
                ),
                ("sig-5".into(), CommandOutcome::Expired),
            ],
            "a handled command's outcome is its delivered row, a retry decides nothing, an \
             event copy has no outcome"
        );
        assert!(commit.updates.contains(&RowUpdate {
            seq: 1,
            change: RowChange::Delivered {
                keep_until: t0() + secs(60)
            }
        }));
        assert!(
            commit.outcomes_decided,
            "a handled command wakes its sender though it has no record"
        );
        // Kept for the deduplication window (the test configuration's default).
        let window = env(Duration::from_millis(250)).config().dedup_span();
        assert!(commit
            .outcomes
            .iter()
            .all(|o| o.keep_until == t0() + window && o.decided_at == t0()));
    }

    #[test]
    fn an_unclaimed_row_is_held_for_exactly_one_poll_interval() {
        let c = Conveyor::new(
            env(Duration::from_millis(1_500)),
            lease(),
            t0(),
            Page {
                messages: vec![row(1, MessageStatus::ToCatchUp, 2)],
                ..Page::default()
            },
        );
        let (commit, report) = c.into_commit(t0() + secs(30));
        assert_eq!(
            commit.updates,
            vec![RowUpdate {
                seq: 1,
                change: RowChange::Hold {
                    until: t0() + chrono::Duration::milliseconds(1_500)
                },
            }]
        );
        assert_eq!(report.held, 1);
        assert_eq!(report.delivered + report.retried + report.dead_lettered, 0);
        assert!(commit.dead_letters.is_empty());
    }

    #[test]
    fn a_row_behind_a_block_is_parked_with_no_time_of_its_own() {
        let blocked = crate::storage::EntityKey {
            kind: "counter".into(),
            tenant: String::new(),
            id: "t-1".into(),
        };
        let mut c = Conveyor::new(
            env(Duration::from_millis(250)),
            lease(),
            t0(),
            Page {
                messages: vec![row(1, MessageStatus::ToDeliver, 0)],
                blocked: vec![blocked.clone()],
                ..Page::default()
            },
        );
        assert_eq!(c.blocked(), [blocked]);
        assert!(c.waiting().is_empty(), "a block is not a retry with a time");
        c.record(0, Intent::BehindBlock);
        let (commit, report) = c.into_commit(t0() + secs(30));
        assert_eq!(
            commit.updates,
            vec![RowUpdate {
                seq: 1,
                change: RowChange::BehindBlock
            }]
        );
        assert_eq!(report.held, 1);
        assert_eq!(commit.earliest_delay(), None);
    }

    #[test]
    fn a_block_records_its_attempt_in_the_history_read_with_the_page() {
        let mut blocked = row(1, MessageStatus::ToDeliver, 1);
        blocked.errors = ErrorHistory::default().with(t0() - secs(3), 1, "first");
        let mut c = conveyor(vec![blocked]);
        c.record(
            0,
            Intent::Block {
                reason: "second".into(),
            },
        );
        let (commit, _) = c.into_commit(t0() + secs(30));
        let errors = match &commit.updates[0].change {
            RowChange::Block { errors, .. } => errors.clone(),
            other => panic!("expected a block, got {other:?}"),
        };
        let kept: Vec<(u32, &str)> = errors
            .entries()
            .iter()
            .map(|e| (e.attempt, e.error.as_str()))
            .collect();
        assert_eq!(kept, vec![(1, "first"), (2, "second")]);
        assert_eq!(errors.entries()[1].at, t0());
    }

    #[test]
    fn attempts_do_not_overflow() {
        let mut c = conveyor(vec![
            row(1, MessageStatus::ToDeliver, u32::MAX),
            row(2, MessageStatus::ToDeliver, u32::MAX),
        ]);
        c.record(
            0,
            Intent::RetryAt {
                at: t0(),
                error: "e".into(),
            },
        );
        c.record(1, Intent::DeadLetter { reason: "r".into() });
        let (commit, _) = c.into_commit(t0());
        assert_eq!(
            commit.updates[0].change,
            RowChange::RetryAt {
                at: t0(),
                attempts: u32::MAX,
                error: "e".into(),
                errors: ErrorHistory::default().with(t0(), u32::MAX, "e"),
            }
        );
        assert_eq!(commit.dead_letters[0].attempts, u32::MAX);
    }

    #[test]
    fn record_replaces_the_earlier_intent_and_ignores_unknown_rows() {
        let mut c = conveyor(vec![row(1, MessageStatus::ToDeliver, 0)]);
        assert_eq!(c.intent(0), None);
        c.record(
            0,
            Intent::Hold {
                until: t0() + secs(1),
            },
        );
        assert_eq!(
            c.intent(0),
            Some(&Intent::Hold {
                until: t0() + secs(1)
            })
        );
        c.record(0, Intent::Duplicate);
        assert_eq!(c.intent(0), Some(&Intent::Duplicate));
        c.record(5, Intent::Expired);
        assert_eq!(c.intent(5), None);
        let (commit, report) = c.into_commit(t0());
        assert_eq!(
            commit.updates,
            vec![RowUpdate {
                seq: 1,
                change: RowChange::Remove
            }]
        );
        assert_eq!((report.duplicates, report.held, report.expired), (1, 0, 0));
    }

    #[test]
    fn open_rows_skip_the_claimed_ones() {
        let mut c = conveyor(vec![
            row(1, MessageStatus::ToDeliver, 0),
            row(2, MessageStatus::ToCatchUp, 0),
            row(3, MessageStatus::ToDeliver, 0),
            row(4, MessageStatus::ToCatchUp, 0),
            row(5, MessageStatus::ToDeliver, 0),
        ]);
        assert_eq!(seqs(c.open()), vec![(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]);
        c.record(0, Intent::Duplicate);
        c.record(3, Intent::Expired);
        assert_eq!(seqs(c.open()), vec![(1, 2), (2, 3), (4, 5)]);
        assert_eq!(
            seqs(c.open_with_status(MessageStatus::ToDeliver)),
            vec![(2, 3), (4, 5)]
        );
        assert_eq!(
            seqs(c.open_with_status(MessageStatus::ToCatchUp)),
            vec![(1, 2)]
        );
        assert_eq!(seqs(c.open_with_status(MessageStatus::Delivered)), vec![]);
    }

    #[test]
    fn purge_delivered_keeps_the_largest_request() {
        let c = conveyor(Vec::new());
        let (commit, _) = c.into_commit(t0());
        assert_eq!(commit.purge_delivered, 0);

        let mut c = conveyor(Vec::new());
        c.purge_delivered(10);
        c.purge_delivered(3);
        let (commit, _) = c.into_commit(t0());
        assert_eq!(commit.purge_delivered, 10);

        let mut c = conveyor(Vec::new());
        c.purge_delivered(3);
        c.purge_delivered(12);
        let (commit, _) = c.into_commit(t0());
        assert_eq!(commit.purge_delivered, 12);
    }

    #[test]
    fn states_and_emitted_rows_go_into_the_commit_and_count_as_fanned_out() {
        let mut c = conveyor(vec![row(1, MessageStatus::ToDeliver, 0)]);
        let key = crate::storage::EntityKey {
            kind: "counter".into(),
            tenant: String::new(),
            id: "t-1".into(),
        };
        c.set_state(EntityStateWrite {
            key: key.clone(),
            state: Some(b"{\"n\":1}".to_vec()),
            state_version: 1,
        });
        let event = NewEvent {
            id: SignalId("sig-1/event/0".into()),
            event_type: "counter.added".into(),
            source: crate::model::event::EventSource {
                kind: "counter".into(),
                id: "t-1".into(),
            },
            tenant: String::new(),
            occurred_at: t0(),
            payload: b"{}".to_vec(),
            version: 1,
            metadata: Default::default(),
        };
        let copy = InboxWrite {
            shard: ShardIndex(0),
            message: row(100, MessageStatus::ToDeliver, 0).message,
        };
        let command = InboxWrite {
            shard: ShardIndex(0),
            message: row(101, MessageStatus::ToDeliver, 0).message,
        };
        c.emit_events(vec![event.clone()], vec![copy.clone()]);
        c.emit_messages(vec![command.clone()]);
        let (commit, report) = c.into_commit(t0());
        assert_eq!(
            commit.states,
            vec![EntityStateWrite {
                key,
                state: Some(b"{\"n\":1}".to_vec()),
                state_version: 1,
            }]
        );
        assert_eq!(commit.writes.events, vec![event]);
        assert_eq!(commit.writes.messages, vec![copy, command]);
        assert_eq!(report.fanned_out, 2);
        assert_eq!(report.page_len, 1);
    }
}

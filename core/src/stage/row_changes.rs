//! What the rows of a stage's page become in its commit: each row's [`RowChange`] from the
//! intent a station recorded for it, and what settles with it — dead letters, the outcomes of
//! commands, the holds an expired retry releases — with the stage's counters.
//!
//! ```text
//!  (row, intent) ─► outcome recorded? (a command's, within the dedup window)
//!                ─► Delivered / Duplicate ─► delivered (kept for its window) or removed
//!                   Hold / BehindBlock    ─► held, or parked behind the block
//!                   Paused                ─► parked until its kind is resumed
//!                   RetryAt / Block       ─► attempts + 1, the error kept, appended to the
//!                                            row's error history (read with the page)
//!                   DeadLetter / Drop     ─► removed (the dead letter kept, its original's
//!                                            history ending with its reason)
//!                   Expired               ─► removed (dead-lettered if configured); rows held
//!                                            behind its retry released
//!                   none                  ─► held one poll interval, reported
//! ```
//!
//! Only [`Conveyor::into_commit`](crate::stage::conveyor::Conveyor::into_commit) uses it, row
//! by row in `seq` order; the lease, states, writes and catch-up changes of the commit are the
//! Conveyor's own.

use crate::model::config::DeliveryConfig;
use crate::model::message::{InboxMessage, MessageKind, MessageStatus};
use crate::model::outcome::OutcomeRecord;
use crate::stage::intent::{Intent, EXPIRED_REASON};
use crate::storage::{DeadLetter, EntityKey, HoldRelease, RowChange, RowUpdate};
use crate::telemetry::fates::{Fate, Settled};
use crate::telemetry::monitor::StageReport;
use chrono::{DateTime, Utc};

/// The page's rows settled so far, in `seq` order, and what settles with them.
pub(crate) struct RowChanges {
    now: DateTime<Utc>,
    /// How long a row no station claimed is held (one poll interval).
    hold_for: chrono::Duration,
    dead_letter_expired: bool,
    /// Until when decided command outcomes are kept; `None`: not kept at all.
    outcomes_until: Option<DateTime<Utc>>,
    pub(crate) report: StageReport,
    pub(crate) updates: Vec<RowUpdate>,
    pub(crate) dead_letters: Vec<DeadLetter>,
    pub(crate) release_holds: Vec<HoldRelease>,
    pub(crate) outcomes: Vec<OutcomeRecord>,
    pub(crate) outcomes_decided: bool,
}

impl RowChanges {
    /// Starts on a page of `page_len` rows whose stations fanned out `fanned_out` rows and
    /// kept `extra_dead_letters` (dead letters that are no row of the page).
    pub(crate) fn new(
        config: &DeliveryConfig,
        now: DateTime<Utc>,
        page_len: usize,
        fanned_out: usize,
        extra_dead_letters: Vec<DeadLetter>,
    ) -> Self {
        let hold_for = config.poll_span();
        let dead_letter_expired = config.dead_letter_expired;
        // Outcomes are kept for the deduplication window; with none they are not kept at all.
        let outcomes_until = (!config.dedup_window.is_zero()).then(|| now + config.dedup_span());
        let mut report = StageReport {
            page_len,
            fanned_out,
            ..StageReport::default()
        };
        report.dead_lettered += extra_dead_letters.len();
        report.settled.extend(
            extra_dead_letters
                .iter()
                .map(|d| Settled::of(&d.original, d.attempts, Fate::DeadLettered, &d.reason)),
        );
        RowChanges {
            now,
            hold_for,
            dead_letter_expired,
            outcomes_until,
            report,
            updates: Vec::with_capacity(page_len),
            dead_letters: extra_dead_letters,
            release_holds: Vec::new(),
            outcomes: Vec::new(),
            outcomes_decided: false,
        }
    }

    /// Settles the next row of the page with the intent recorded for it (`None`: unclaimed).
    pub(crate) fn settle(&mut self, message: InboxMessage, intent: Option<Intent>) {
        self.record_outcome(&message, intent.as_ref());
        let change = self.change(&message, intent);
        self.updates.push(RowUpdate {
            seq: message.seq,
            change,
        });
    }

    /// Records the outcome a command's intent decides, if outcomes are kept. An event's copy
    /// that is settled records nothing (its delivered row is what a read-your-writes wait
    /// reads, see `send/projected.rs`) but wakes the waiters of its shard all the same.
    fn record_outcome(&mut self, message: &InboxMessage, intent: Option<&Intent>) {
        if let (Some(keep_until), Some(intent)) = (self.outcomes_until, intent) {
            if message.message.kind == MessageKind::Event && intent.decides_outcome() {
                self.outcomes_decided = true;
            }
            if message.message.kind == MessageKind::Command
                && message.status != MessageStatus::ToCatchUp
                && intent.decides_outcome()
            {
                self.outcomes_decided = true;
                // A handled command's outcome is its delivered row (kept for the same
                // window): only the others are recorded.
                if let Some(outcome) = intent.recorded_outcome() {
                    self.outcomes.push(OutcomeRecord {
                        key: message.dedup_key(),
                        shard: message.shard,
                        outcome,
                        decided_at: self.now,
                        keep_until,
                    });
                }
            }
        }
    }

    /// The row's change for `intent`, counted in the report (with what settles with it).
    fn change(&mut self, message: &InboxMessage, intent: Option<Intent>) -> RowChange {
        let report = &mut self.report;
        match intent {
            Some(Intent::Delivered { keep_until }) => {
                report.delivered += 1;
                match keep_until {
                    Some(keep_until) => RowChange::Delivered { keep_until },
                    None => RowChange::Remove,
                }
            }
            Some(Intent::Duplicate) => {
                report.duplicates += 1;
                RowChange::Remove
            }
            Some(Intent::Hold { until }) => {
                report.held += 1;
                RowChange::Hold { until }
            }
            Some(Intent::BehindBlock) => {
                report.held += 1;
                RowChange::BehindBlock
            }
            Some(Intent::Paused) => {
                report.held += 1;
                RowChange::Paused
            }
            Some(Intent::RetryAt { at, error }) => {
                report.retried += 1;
                RowChange::RetryAt {
                    at,
                    attempts: message.attempts.saturating_add(1),
                    errors: message.errors_after_failure(self.now, &error),
                    error,
                }
            }
            Some(Intent::DeadLetter { reason }) => self.dead_letter(message, reason),
            Some(Intent::Block { reason }) => {
                report.blocked += 1;
                report.settled.push(Settled::of(
                    message,
                    message.attempts.saturating_add(1),
                    Fate::Blocked,
                    &reason,
                ));
                RowChange::Block {
                    attempts: message.attempts.saturating_add(1),
                    errors: message.errors_after_failure(self.now, &reason),
                    error: reason,
                }
            }
            Some(Intent::Drop { reason }) => {
                report.dropped += 1;
                report.settled.push(Settled::of(
                    message,
                    message.attempts.saturating_add(1),
                    Fate::Dropped,
                    &reason,
                ));
                RowChange::Remove
            }
            Some(Intent::Expired) => self.expired(message),
            None => {
                report.held += 1;
                tracing::warn!(
                    seq = message.seq,
                    kind = %message.message.target_kind,
                    status = message.status.as_str(),
                    "no station claimed the message; holding it for one poll interval"
                );
                RowChange::Hold {
                    until: self.now + self.hold_for,
                }
            }
        }
    }

    /// A row a station dead-lettered: removed, its dead letter kept.
    fn dead_letter(&mut self, message: &InboxMessage, reason: String) -> RowChange {
        self.report.dead_lettered += 1;
        self.report.settled.push(Settled::of(
            message,
            message.attempts.saturating_add(1),
            Fate::DeadLettered,
            &reason,
        ));
        // The original row as it was, but for its history: that ends with this attempt, so
        // the dead letter shows every kept failure, its reason included.
        let mut original = message.clone();
        original.errors = message.errors_after_failure(self.now, &reason);
        self.dead_letters.push(DeadLetter {
            attempts: message.attempts.saturating_add(1),
            reason,
            first_attempt_at: Some(message.first_failed_at.unwrap_or(self.now)),
            last_attempt_at: self.now,
            original,
        });
        RowChange::Remove
    }

    /// A row past its expiry: removed (dead-lettered if so configured), and the rows held
    /// behind its retry released.
    fn expired(&mut self, message: &InboxMessage) -> RowChange {
        self.report.expired += 1;
        self.report.settled.push(Settled::of(
            message,
            message.attempts,
            Fate::Expired {
                dead_lettered: self.dead_letter_expired,
            },
            EXPIRED_REASON,
        ));
        // A row in retry back-off expired before its retry: the rows held behind it until
        // that retry go on now, in their order (not at the retry time, when later rows of the
        // target would already have overtaken them).
        if let Some(at) = message.message.deliver_after {
            if message.attempts > 0 && at > self.now {
                self.release_holds.push(HoldRelease {
                    target: EntityKey::new(
                        &message.message.target_kind,
                        &message.message.tenant,
                        &message.message.target_id,
                    ),
                    until: at,
                });
            }
        }
        if self.dead_letter_expired {
            self.report.dead_lettered += 1;
            self.dead_letters.push(DeadLetter {
                attempts: message.attempts,
                reason: EXPIRED_REASON.to_owned(),
                first_attempt_at: message.first_failed_at,
                last_attempt_at: self.now,
                original: message.clone(),
            });
        }
        RowChange::Remove
    }
}

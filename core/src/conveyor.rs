//! The Conveyor carries one page of a shard through the stations and collects what they
//! decide; [`Conveyor::into_commit`] turns that into one [`StageCommit`].
//!
//! Each row of the page gets at most one [`Intent`] (a later station may replace an earlier
//! one). A row that no station claims is held for one poll interval and reported, so that an
//! incomplete pipeline slows a shard down but never spins on it or loses a row.

use crate::delivery::DeliveryEnv;
use crate::event::NewEvent;
use crate::message::{InboxMessage, InboxWrite, MessageStatus};
use crate::monitor::StageReport;
use crate::storage::{
    DeadLetter, EntityKey, EntityStateWrite, Lease, Page, RowChange, RowUpdate, StageCommit, WriteBatch,
};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// What a station decided for one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Intent {
    /// Handled: mark delivered and keep until `keep_until` for deduplication (removed at once
    /// when `None`, i.e. with a zero window).
    Delivered {
        /// End of the deduplication window.
        keep_until: Option<DateTime<Utc>>,
    },
    /// A duplicate of a message already delivered: remove it without handling.
    Duplicate,
    /// Not handled now; due again at `until` with its attempts unchanged.
    Hold {
        /// When it is due again.
        until: DateTime<Utc>,
    },
    /// Failed; try again at `at`.
    RetryAt {
        /// Next attempt.
        at: DateTime<Utc>,
        /// Why it failed.
        error: String,
    },
    /// Failed for the last time: move to the dead letters.
    DeadLetter {
        /// Why.
        reason: String,
    },
    /// Failed for the last time: drop (counted and logged).
    Drop {
        /// Why.
        reason: String,
    },
    /// Its time to live ran out before delivery.
    Expired,
}

/// One page of a shard on its way through the stations.
pub struct Conveyor {
    env: Arc<DeliveryEnv>,
    lease: Lease,
    now: DateTime<Utc>,
    page: Vec<InboxMessage>,
    intents: Vec<Option<Intent>>,
    states: Vec<EntityStateWrite>,
    writes: WriteBatch,
    purge_delivered: usize,
    waiting: Vec<(EntityKey, DateTime<Utc>)>,
}

impl Conveyor {
    /// A conveyor for `page` (sorted by `seq`) read under `lease` at `now`.
    pub fn new(
        env: Arc<DeliveryEnv>,
        lease: Lease,
        now: DateTime<Utc>,
        page: Page,
    ) -> Self {
        let Page {
            messages: mut page,
            waiting,
        } = page;
        page.sort_by_key(|m| m.seq);
        let intents = vec![None; page.len()];
        Conveyor {
            env,
            lease,
            now,
            page,
            intents,
            states: Vec::new(),
            writes: WriteBatch::default(),
            purge_delivered: 0,
            waiting,
        }
    }

    /// What the stations can reach: registry, storage, configuration, monitor, clock.
    pub fn env(&self) -> &Arc<DeliveryEnv> {
        &self.env
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

    /// Asks the commit to purge up to `limit` delivered rows whose window has passed.
    pub fn purge_delivered(&mut self, limit: usize) {
        self.purge_delivered = self.purge_delivered.max(limit);
    }

    /// Turns the recorded decisions into one commit renewing the lease to `lease_until`, and
    /// the stage's counters (without `purged`, known only after the commit).
    pub fn into_commit(self, lease_until: DateTime<Utc>) -> (StageCommit, StageReport) {
        let hold_for = chrono::Duration::from_std(self.env.config.poll_interval)
            .unwrap_or(chrono::Duration::seconds(1));
        let mut report = StageReport {
            page_len: self.page.len(),
            fanned_out: self.writes.messages.len(),
            ..StageReport::default()
        };
        let mut updates = Vec::with_capacity(self.page.len());
        let mut dead_letters = Vec::new();
        for (message, intent) in self.page.into_iter().zip(self.intents) {
            let change = match intent {
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
                Some(Intent::RetryAt { at, error }) => {
                    report.retried += 1;
                    RowChange::RetryAt {
                        at,
                        attempts: message.attempts.saturating_add(1),
                        error,
                    }
                }
                Some(Intent::DeadLetter { reason }) => {
                    report.dead_lettered += 1;
                    dead_letters.push(DeadLetter {
                        attempts: message.attempts.saturating_add(1),
                        reason,
                        last_attempt_at: self.now,
                        original: message.clone(),
                    });
                    RowChange::Remove
                }
                Some(Intent::Drop { reason }) => {
                    report.dropped += 1;
                    tracing::warn!(
                        seq = message.seq,
                        target = %message.message.target_id,
                        kind = %message.message.target_kind,
                        %reason,
                        "message dropped by failure policy"
                    );
                    RowChange::Remove
                }
                Some(Intent::Expired) => {
                    report.expired += 1;
                    RowChange::Remove
                }
                None => {
                    report.held += 1;
                    tracing::warn!(
                        seq = message.seq,
                        kind = %message.message.target_kind,
                        status = message.status.as_str(),
                        "no station claimed the message; holding it for one poll interval"
                    );
                    RowChange::Hold {
                        until: self.now + hold_for,
                    }
                }
            };
            updates.push(RowUpdate {
                seq: message.seq,
                change,
            });
        }
        let commit = StageCommit {
            lease: self.lease,
            now: self.now,
            lease_until,
            updates,
            states: self.states,
            writes: self.writes,
            dead_letters,
            purge_delivered: self.purge_delivered,
        };
        (commit, report)
    }
}

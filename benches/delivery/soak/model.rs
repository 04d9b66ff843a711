//! The soak's entities: a tally aggregate whose commands say how they should fare (applied at
//! once, after a transient failure, refused for good, or expected to expire unseen), and a
//! view projection that folds the tally's events and events posted from outside.
//!
//! Both count what they applied, so the audit compares every target's counts with what the
//! producer sent it. Only the send → handler-start latency of plain commands on their first
//! attempt is recorded (delays and back-offs would measure the schedule, not the delivery).

use chrono::Utc;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use shardbox::core::sync::lock;
use shardbox::prelude::*;
use std::sync::Mutex;

/// Send → handler-start latencies (µs) of plain commands since the last sample.
pub static LATENCY: Mutex<Option<Histogram<u64>>> = Mutex::new(None);

/// A fresh latency histogram (1 µs .. 10 min, 3 digits).
pub fn histogram() -> Histogram<u64> {
    // The bounds are constant and valid (low >= 1, high >= 2 * low, 3 significant digits).
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// How a command should fare; the producer decides, the handler acts it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fate {
    /// Applied at its first attempt (sent at once, delayed, or with a TTL it outlives).
    Apply,
    /// Fails once with a transient error, then is applied at its second attempt.
    FailOnce,
    /// Refused for good: dead-lettered after one attempt.
    Refuse,
    /// Sent with a TTL shorter than its delay: expires before it is due, never handled.
    Expire,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Add {
    pub fate: Fate,
    /// Sent without delay: its latency is recorded.
    pub timed: bool,
}

impl Message for Add {
    const TYPE: &'static str = "soak.add";
}

/// The tally's event; also posted from outside (`late` false) straight to the view.
#[derive(Debug, Serialize, Deserialize)]
pub struct Tallied {
    /// Applied although it should have expired first.
    pub late: bool,
}

impl Message for Tallied {
    const TYPE: &'static str = "soak.tallied";
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Tally {
    /// Commands applied.
    pub applied: u64,
    /// Commands applied that should have expired before they were due.
    pub late: u64,
}

impl Aggregate for Tally {
    const KIND: &'static str = "soak-tally";
    type Command = Add;
    type Event = Tallied;

    async fn handle(&self, c: &Add, cx: &Context<'_>) -> Result<Vec<Tallied>, HandlerError> {
        if c.timed && cx.attempts == 0 {
            let us = (Utc::now() - cx.received_at)
                .num_microseconds()
                .unwrap_or(0)
                .max(1);
            if let Some(h) = lock(&LATENCY).as_mut() {
                h.saturating_record(us as u64);
            }
        }
        match c.fate {
            Fate::Apply => Ok(vec![Tallied { late: false }]),
            Fate::FailOnce if cx.attempts == 0 => Err(HandlerError::new("soak: transient")),
            Fate::FailOnce => Ok(vec![Tallied { late: false }]),
            Fate::Refuse => Err(HandlerError::permanent("soak: refused")),
            Fate::Expire => Ok(vec![Tallied { late: true }]),
        }
    }

    fn apply(&mut self, e: &Tallied) {
        if e.late {
            self.late += 1;
        } else {
            self.applied += 1;
        }
    }
}

/// The read side: every `Tallied` of one id, the tally's and those posted from outside.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct View {
    pub events: u64,
    pub late: u64,
}

impl Projection for View {
    const KIND: &'static str = "soak-view";
    type Event = Tallied;

    async fn apply(&mut self, e: &Tallied, _: &Context<'_>) -> Result<(), HandlerError> {
        if e.late {
            self.late += 1;
        } else {
            self.events += 1;
        }
        Ok(())
    }
}

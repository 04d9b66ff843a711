//! The entities of the simulation: two aggregates that record the numbers they apply (one
//! under a dead-letter policy, one under a block policy), a projection of their events, and a
//! process manager with a timeout (`Relay`) that collects some of those events and, when its
//! timeout fires, hands what it collected to a third aggregate (`Sink`) and finishes.
//!
//! Every command carries a number `n`, unique in a run and increasing in send order; the
//! states record the numbers in the order they were applied, which is what the invariants
//! read back: each accepted number at most (and, unless dead-lettered, dropped or expired,
//! exactly) once, in send order per target.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

thread_local! {
    /// Poison commands that have been "fixed": their handler accepts them now. Per thread:
    /// a run drives its nodes on one current-thread runtime (handlers run on the thread that
    /// called `run`), so runs in parallel never share an entry, and [`forget_healed`] at the
    /// start of a run makes a replay of the seed start from the same state.
    static HEALED: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

pub fn heal(signal: &str) {
    HEALED.with(|h| h.borrow_mut().insert(signal.to_owned()));
}

/// Starts a run with nothing healed.
pub fn forget_healed() {
    HEALED.with(|h| h.borrow_mut().clear());
}

fn healed(signal: &str) -> bool {
    HEALED.with(|h| h.borrow().contains(signal))
}

/// A command to apply `n`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Apply {
    pub n: u64,
    /// Transient failure: the first `fail_first` attempts fail.
    pub fail_first: u32,
    /// Permanent failure: fails until its signal is healed.
    pub poison: bool,
    /// The audit projection instance its event goes to.
    pub audit: String,
    /// Transient failures of the projection on the emitted event.
    pub audit_fail_first: u32,
    /// The relay flow its event joins, if any.
    pub relay: Option<String>,
}

impl Message for Apply {
    const TYPE: &'static str = "sim.apply";
}

/// What an aggregate emits, and what the driver posts from outside.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Applied {
    /// The producer (aggregate id, or the posting driver's source id).
    pub source: String,
    pub n: u64,
    pub audit: String,
    pub audit_fail_first: u32,
    /// The relay flow (`Relay` instance) that collects it, if any.
    pub relay: Option<String>,
}

impl Message for Applied {
    const TYPE: &'static str = "sim.applied";
}

fn decide(c: &Apply, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
    if c.poison && !healed(cx.signal_id.0.as_str()) {
        return Err(HandlerError::new(format!("poison {}", c.n)));
    }
    if cx.attempts < c.fail_first {
        return Err(HandlerError::new(format!(
            "transient failure of {} (attempt {})",
            c.n,
            cx.attempts + 1
        )));
    }
    Ok(vec![Applied {
        source: cx.target_id.to_owned(),
        n: c.n,
        audit: c.audit.clone(),
        audit_fail_first: c.audit_fail_first,
        relay: c.relay.clone(),
    }])
}

/// Under the default (dead-letter) policy.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Ledger {
    pub applied: Vec<u64>,
}

impl Aggregate for Ledger {
    const KIND: &'static str = "sim-ledger";
    type Command = Apply;
    type Event = Applied;

    async fn handle(&self, c: &Apply, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
        decide(c, cx)
    }

    fn apply(&mut self, e: &Applied) {
        self.applied.push(e.n);
    }
}

/// Under a block policy: a poison command stops its target until an operator unblocks it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Gate {
    pub applied: Vec<u64>,
}

impl Aggregate for Gate {
    const KIND: &'static str = "sim-gate";
    type Command = Apply;
    type Event = Applied;

    async fn handle(&self, c: &Apply, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
        decide(c, cx)
    }

    fn apply(&mut self, e: &Applied) {
        self.applied.push(e.n);
    }
}

/// Every `Applied` event of its instance, in the order applied.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Audit {
    pub seen: Vec<(String, u64)>,
}

impl Projection for Audit {
    const KIND: &'static str = "sim-audit";
    type Event = Applied;

    fn route(e: &Applied, _: &EventSource) -> Vec<String> {
        vec![e.audit.clone()]
    }

    async fn apply(&mut self, e: &Applied, cx: &Context<'_>) -> Result<(), HandlerError> {
        if cx.attempts < e.audit_fail_first {
            return Err(HandlerError::new(format!("audit of {} fails once", e.n)));
        }
        self.seen.push((e.source.clone(), e.n));
        Ok(())
    }
}

/// The timeout of a relay flow that starts with event `n`: 300 ms to 1.5 s, so that flows
/// end during the run and in the settle phase, some across restarts and re-shardings.
pub fn relay_timeout(n: u64) -> Duration {
    Duration::from_millis(300 + (n % 4) * 400)
}

/// A process manager (saga) with a timeout: its first event starts a flow and schedules
/// `Flush` to itself after [`relay_timeout`]; every event of the flow is collected; the
/// timeout sends what was collected to the `Sink` of the same id and finishes (the state is
/// removed). A later event starts a new flow. The invariants read the sinks back: every
/// relayed event in exactly one flushed batch, in event-store order, none flushed early, and
/// no flow left unfinished.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Relay {
    pub collected: Vec<u64>,
    /// When the flow's timeout is due (set by its first event).
    pub due_at: Option<DateTime<Utc>>,
}

/// A relay's own command: its timeout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flush;

impl Message for Flush {
    const TYPE: &'static str = "sim.flush";
}

impl ProcessManager for Relay {
    const KIND: &'static str = "sim-relay";
    type Event = Applied;
    type Command = Flush;

    fn correlation_id(e: &Applied, _: &EventSource) -> Option<String> {
        e.relay.clone()
    }

    async fn on_event(
        &mut self,
        e: &Applied,
        cx: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        self.collected.push(e.n);
        if self.due_at.is_some() {
            return Ok(ProcessActions::new());
        }
        let after = relay_timeout(e.n);
        let after_chrono = chrono::Duration::from_std(after)
            .map_err(|err| HandlerError::new(format!("timeout {after:?}: {err}")))?;
        self.due_at = Some(cx.now + after_chrono);
        ProcessActions::new().schedule::<Relay>(cx, &Flush, after)
    }

    async fn on_command(
        &mut self,
        _: &Flush,
        cx: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        let Some(due_at) = self.due_at else {
            // A fresh instance: a timeout of a flow that already finished (it cannot be one
            // here, each flow schedules one), kept nothing.
            return Ok(ProcessActions::new().finish());
        };
        let flushed = Flushed {
            ns: std::mem::take(&mut self.collected),
            early_ms: (due_at - cx.now).num_milliseconds().max(0),
        };
        Ok(ProcessActions::new()
            .send(Outgoing::command::<Sink>(cx.target_id, &flushed)?)
            .finish())
    }
}

/// What a relay flow hands over when its timeout fires.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Flushed {
    pub ns: Vec<u64>,
    /// How long before its due time the timeout was handled (0 unless it fired early).
    pub early_ms: i64,
}

impl Message for Flushed {
    const TYPE: &'static str = "sim.flushed";
}

/// The event of a flushed batch (no one follows it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sunk(pub Flushed);

impl Message for Sunk {
    const TYPE: &'static str = "sim.sunk";
}

/// Every batch its relay flows flushed, in the order applied.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Sink {
    pub batches: Vec<Flushed>,
}

impl Aggregate for Sink {
    const KIND: &'static str = "sim-sink";
    type Command = Flushed;
    type Event = Sunk;

    async fn handle(&self, c: &Flushed, _: &Context<'_>) -> Result<Vec<Sunk>, HandlerError> {
        Ok(vec![Sunk(c.clone())])
    }

    fn apply(&mut self, e: &Sunk) {
        self.batches.push(e.0.clone());
    }
}

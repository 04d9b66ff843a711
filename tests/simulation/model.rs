//! The entities of the simulation: two aggregates that record the numbers they apply (one
//! under a dead-letter policy, one under a block policy) and a projection of their events.
//!
//! Every command carries a number `n`, unique in a run and increasing in send order; the
//! states record the numbers in the order they were applied, which is what the invariants
//! read back: each accepted number at most (and, unless dead-lettered, dropped or expired,
//! exactly) once, in send order per target.

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use std::cell::RefCell;
use std::collections::BTreeSet;

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

//! One delivery stage, as the stations see it.
//!
//! ```text
//!  Page ──► Conveyor ──► Station ──► Station ──► …  ──► Conveyor::into_commit ──► StageCommit
//!             ▲  records intents, states, events      (one fenced transaction, by the runner)
//!             └─ StationContext: registry, config, clock, monitor, read-only storage views
//! ```
//!
//! `row_changes` is the per-row half of `into_commit`: what each row's intent becomes in the
//! commit, with the dead letters, outcomes and counters that settle with it.
//!
//! A station reads through its [`StationContext`](context::StationContext) and records on the
//! [`Conveyor`](conveyor::Conveyor); the context has no write method and the conveyor hands out
//! no storage, so a station cannot write anything outside the stage's one fenced commit.
//! Picking up, renewing and releasing leases, timers and the commit itself belong to the
//! runner, not to this folder.

pub mod context;
pub mod conveyor;
pub mod intent;
pub mod kind_rules;
pub mod row_changes;
pub mod station;

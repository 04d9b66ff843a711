//! The model: the plain types every other layer speaks — ids, messages and events, errors,
//! configuration, the failure policy and its back-off, time and the shard strategy.
//!
//! ```text
//!  ids ◄── message ◄── event        error ◄── config ──► failure ──► backoff
//!                                   config_limits (what each config field may be)
//!  time_limits, payload_limit (what a send may carry) ◄── error, config
//!  outcome (what became of a command)   kind_role (what a registered kind is)
//!  kind_controls (a kind's pause, run-time settings and limits) ──► config, failure
//!  clock                strategy (shard_of: kind + id ──► ShardIndex)
//!  upcast_error (versions of stored shapes, why one could not be upcast) ◄── error, message
//!  attempt_errors (a message's last failed attempts) ◄── message
//! ```
//!
//! Nothing here does I/O, holds a runtime service or knows about storage, stages or the
//! runner: every other folder of the crate may depend on `model`, and `model` on none of them.

pub mod attempt_errors;
pub mod backoff;
pub mod clock;
pub mod config;
pub mod config_limits;
pub mod error;
pub mod event;
pub mod failure;
pub mod hash;
pub mod ids;
pub mod kind_controls;
pub mod kind_role;
pub mod message;
pub mod outcome;
pub mod parked;
pub mod payload_limit;
pub mod strategy;
pub mod time_limits;
pub mod upcast_error;

//! What became of a command: the [`CommandOutcome`] a stage decides for each command row it
//! settles, kept (as an [`OutcomeRecord`]) for the deduplication window so that its sender
//! can ask for it.
//!
//! ```text
//!  stage: command row ─► Delivered ─────────────► Handled: no record; the row, marked delivered
//!                      │                              and kept for the window, is the outcome
//!                      ├ DeadLetter / Drop / Block ► DeadLettered / Dropped / Blocked { reason }
//!                      └ Expired (page or sweep) ─► Expired          (these three: a record)
//!         (retries, holds and duplicates decide nothing: the row, or its original, goes on)
//!  read:  row still waiting ─► Pending
//!         row delivered within its window ─► Handled { events: handled_events(..) }
//!         record within its window ─► Decided · else Unknown
//! ```
//!
//! A handled command writes nothing beyond its delivered row: the common outcome costs no
//! write of its own (a record per command cost `live` about 40 % of its throughput on
//! SQLite). Its events are found again by their ids, which are derived from the command and
//! its target ([`handled_events`]).
//!
//! Plain data: no I/O, no clock. The stored form is a name (`outcome`), a detail (the reason)
//! and the emitted event ids as a JSON array of strings.

use crate::model::ids::{ShardIndex, SignalId};
use crate::model::message::DedupKey;
use chrono::{DateTime, Utc};

/// What became of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandOutcome {
    /// Handled: its state change and the events it emitted committed, with these ids (in the
    /// order emitted; empty when it emitted none).
    Handled {
        /// Ids of the events the handler emitted for this command.
        events: Vec<SignalId>,
    },
    /// Failed for good and moved to the dead letters (its last error, or why it could not be
    /// handled).
    DeadLettered {
        /// The last error.
        reason: String,
    },
    /// Failed for good and dropped by the kind's failure policy.
    Dropped {
        /// The last error.
        reason: String,
    },
    /// Failed for good under a `block` policy: its target waits for an operator, who may
    /// requeue it (its outcome is then decided again) or drop it.
    Blocked {
        /// The last error.
        reason: String,
    },
    /// Its time to live ran out before it was handled.
    Expired,
    /// Not known: its outcome was kept for the deduplication window and that has passed (or
    /// the window is zero, or no such command was sent). Never stored.
    Unknown,
}

impl CommandOutcome {
    /// The stored name: `handled`, `dead_lettered`, `dropped`, `blocked`, `expired`
    /// (`unknown` is never stored).
    pub fn name(&self) -> &'static str {
        match self {
            CommandOutcome::Handled { .. } => "handled",
            CommandOutcome::DeadLettered { .. } => "dead_lettered",
            CommandOutcome::Dropped { .. } => "dropped",
            CommandOutcome::Blocked { .. } => "blocked",
            CommandOutcome::Expired => "expired",
            CommandOutcome::Unknown => "unknown",
        }
    }

    /// The reason of a failure outcome.
    pub fn reason(&self) -> Option<&str> {
        match self {
            CommandOutcome::DeadLettered { reason }
            | CommandOutcome::Dropped { reason }
            | CommandOutcome::Blocked { reason } => Some(reason),
            _ => None,
        }
    }

    /// The ids of the emitted events of a handled command (empty otherwise).
    pub fn events(&self) -> &[SignalId] {
        match self {
            CommandOutcome::Handled { events } => events,
            _ => &[],
        }
    }

    /// The stored form: name, detail (the reason) and the event ids as a JSON array.
    pub fn to_stored(&self) -> (&'static str, Option<String>, String) {
        let ids: Vec<&str> = self.events().iter().map(|id| id.0.as_str()).collect();
        // A list of strings always serializes; the fallback is never taken.
        let events = serde_json::to_string(&ids).unwrap_or_else(|_| "[]".to_owned());
        (self.name(), self.reason().map(str::to_owned), events)
    }

    /// Reads the stored form back; `Err` names what is wrong with it.
    pub fn from_stored(name: &str, detail: Option<String>, events: &str) -> Result<Self, String> {
        let reason = || detail.clone().unwrap_or_default();
        Ok(match name {
            "handled" => {
                let ids: Vec<String> = serde_json::from_str(events).map_err(|e| {
                    format!("outcome event ids `{events}` are not a JSON list: {e}")
                })?;
                CommandOutcome::Handled {
                    events: ids.into_iter().map(SignalId).collect(),
                }
            }
            "dead_lettered" => CommandOutcome::DeadLettered { reason: reason() },
            "dropped" => CommandOutcome::Dropped { reason: reason() },
            "blocked" => CommandOutcome::Blocked { reason: reason() },
            "expired" => CommandOutcome::Expired,
            other => return Err(format!("unknown stored outcome `{other}`")),
        })
    }
}

/// How many emitted ids [`handled_events`] asks about at a time.
const PROBE: usize = 16;

/// The ids of the events a handled command emitted, read back from what is stored. Its
/// target's handler gave its `n`-th event the id [`DedupKey::emitted_id`]`("event", n)` and
/// the stage committed all of them with the delivery, so they are the first ids of that
/// sequence that are stored. `count_stored` says how many of the ids it is given are stored
/// (asked a few at a time, in order, until one is missing).
///
/// ```
/// use shardbox_core::{handled_events, DedupKey, SignalId};
/// let key = DedupKey {
///     tenant: String::new(),
///     target_kind: "account".into(),
///     target_id: "acc-1".into(),
///     signal_id: SignalId::from("cmd-7"),
/// };
/// let stored = [key.emitted_id("event", 0), key.emitted_id("event", 1)];
/// let events = handled_events(&key, |ids| {
///     Ok::<_, ()>(ids.iter().filter(|id| stored.contains(id)).count())
/// });
/// assert_eq!(events, Ok(stored.to_vec()));
/// ```
pub fn handled_events<E>(
    key: &DedupKey,
    mut count_stored: impl FnMut(&[SignalId]) -> Result<usize, E>,
) -> Result<Vec<SignalId>, E> {
    let mut events = Vec::new();
    loop {
        let from = events.len();
        let ids: Vec<SignalId> = (from..from + PROBE)
            .map(|n| key.emitted_id("event", n))
            .collect();
        let found = count_stored(&ids)?.min(PROBE);
        events.extend(ids.into_iter().take(found));
        if found < PROBE {
            return Ok(events);
        }
    }
}

/// The outcome of one command as a stage commits it: kept until `keep_until` (the end of the
/// deduplication window), replacing an earlier record of the same key (a requeued message
/// decided again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeRecord {
    /// The command: tenant, target and signal.
    pub key: DedupKey,
    /// Its shard (purges and notifications go by shard).
    pub shard: ShardIndex,
    /// What became of it (never [`CommandOutcome::Unknown`]).
    pub outcome: CommandOutcome,
    /// When the stage decided it.
    pub decided_at: DateTime<Utc>,
    /// Forgotten after this time.
    pub keep_until: DateTime<Utc>,
}

/// What a storage knows of a command's outcome (see `InboxStore::outcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomeLookup {
    /// Its row still waits for delivery (due, delayed, retrying or held): not decided yet.
    Pending,
    /// Decided.
    Decided {
        /// What became of it.
        outcome: CommandOutcome,
        /// When.
        decided_at: DateTime<Utc>,
    },
    /// Neither a waiting row nor a record within its window.
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stored_outcome_reads_back_as_itself() {
        let all = [
            CommandOutcome::Handled {
                events: vec![SignalId("a/\"x\"".into()), SignalId("b".into())],
            },
            CommandOutcome::Handled { events: vec![] },
            CommandOutcome::DeadLettered {
                reason: "r1".into(),
            },
            CommandOutcome::Dropped {
                reason: "r2".into(),
            },
            CommandOutcome::Blocked {
                reason: "r3".into(),
            },
            CommandOutcome::Expired,
        ];
        for outcome in all {
            let (name, detail, events) = outcome.to_stored();
            assert_eq!(
                CommandOutcome::from_stored(name, detail, &events),
                Ok(outcome)
            );
        }
    }

    #[test]
    fn bad_stored_forms_are_named_errors() {
        let e = CommandOutcome::from_stored("unknown", None, "[]").unwrap_err();
        assert!(e.contains("`unknown`"), "{e}");
        let e = CommandOutcome::from_stored("handled", None, "nope").unwrap_err();
        assert!(e.contains("nope"), "{e}");
    }
}

//! The per-target rules every adapter (aggregate, projection, reactor, process manager)
//! shares, written once:
//!
//! ```text
//!  context           what a handler sees of its message and of the run
//!  decode            the message's payload, upcast to the code's version (`upcast`), as
//!                    the kind's command type or the values of its event set
//!  routed            the ids an event goes to: the route of each value it stands for
//!  load_state        the stored state, upcast to the kind's state version, or the
//!                    default of a fresh entity; an error names kind, tenant, id, version
//!  settle            after each message, in `seq` order: Handled, or the first failure
//!                    stops the batch and the messages after it are NotAttempted
//!  finish_state      the state saved if anything was handled (or the whole batch failed)
//!  emitted_commands  what a handler sends, checked, with ids derived from its message
//!  subscriber_face   the EntityHandler methods every event subscriber has alike
//! ```
//!
//! These are plain functions over one target's batch: no I/O and no timers (a handler call's
//! timeout and panic guard are `guard`'s).

use crate::entity::context::Context;
use crate::entity::handler::{BatchResult, BatchRun, MessageOutcome, StoredState};
use crate::entity::handler_error::HandlerError;
use crate::entity::traits::{EventSet, Outgoing};
use crate::entity::upcast::Upcasters;
use crate::model::event::{EventSource, NewEvent};
use crate::model::ids::validate_address;
use crate::model::message::{InboxMessage, NewMessage};

/// What a handler sees of message `m` of a batch of `kind` in `run`.
pub(crate) fn context<'a>(kind: &'a str, m: &'a InboxMessage, run: &BatchRun<'a>) -> Context<'a> {
    Context {
        kind,
        target_id: &m.message.target_id,
        tenant: &m.message.tenant,
        signal_id: &m.message.signal_id,
        metadata: &m.message.metadata,
        received_at: m.message.received_at,
        now: run.now,
        attempts: m.attempts,
        services: run.services,
    }
}

/// The message's payload as the one `T` it stands for at the code's version (upcast if it
/// was stored at an older one): a command type (a [`Message`](crate::Message), a set of one)
/// or the event set of an aggregate's own event. An upcaster that splits it is refused here
/// (a command is handled once, as one value); an error names the type and the version.
pub(crate) fn decode<T: EventSet>(m: &InboxMessage, run: &BatchRun<'_>) -> Result<T, HandlerError> {
    let mut values = decode_all::<T>(m, run)?;
    match values.len() {
        1 => Ok(values.remove(0)),
        n => Err(HandlerError::permanent(format!(
            "payload of type `{}` at version {} was upcast into {n} values; a command upcasts into exactly one",
            m.message.payload_type, m.message.payload_version
        ))),
    }
}

/// The message's payload as the values of the subscriber's event set `T` it stands for at
/// the code's version, in order: one, or several when an upcaster split it, or none when one
/// retired it.
pub(crate) fn decode_all<T: EventSet>(
    m: &InboxMessage,
    run: &BatchRun<'_>,
) -> Result<Vec<T>, HandlerError> {
    let m = &m.message;
    decode_stored(
        &m.payload_type,
        m.payload_version,
        &m.payload,
        run.upcasters,
    )
}

/// A stored event as the values of `E` it stands for (see [`decode_all`]).
pub(crate) fn decode_event<E: EventSet>(
    event: &NewEvent,
    upcasters: &Upcasters,
) -> Result<Vec<E>, HandlerError> {
    decode_stored(&event.event_type, event.version, &event.payload, upcasters)
}

/// The one decoding of every stored payload a handler reads: upcast from its stored version
/// to the code's (`EventSet::version_of`), then decoded. A payload of newer code is a
/// transient failure (a node of that code may take it); a missing or failing upcaster, and a
/// payload that does not decode, fail the same way at every attempt.
fn decode_stored<T: EventSet>(
    payload_type: &str,
    version: u32,
    payload: &[u8],
    upcasters: &Upcasters,
) -> Result<Vec<T>, HandlerError> {
    if !T::TYPES.contains(&payload_type) {
        // Not of the set: its own decode says so, naming the type.
        return T::decode(payload_type, payload).map(|v| vec![v]);
    }
    let current = T::version_of(payload_type);
    let parts = upcasters
        .upcast(payload_type, version, current, payload)
        .map_err(|e| {
            if e.is_transient() {
                HandlerError::new(e.to_string())
            } else {
                HandlerError::permanent(e.to_string())
            }
        })?;
    parts
        .iter()
        .map(|part| {
            T::decode(payload_type, part).map_err(|mut e| {
                if version != current {
                    e.reason = format!("{} (upcast from version {version} to {current})", e.reason);
                }
                e
            })
        })
        .collect()
}

/// The stored state of the target of `batch` (a batch is one target's), upcast from its
/// stored version to the kind's `current` one and decoded; the default of a fresh entity if
/// it has none. An error names the kind, tenant, id and version, and says what to do: never
/// a silent default. It is transient whatever failed (state of newer code, a missing or
/// failing upcaster, a state that no longer decodes): every message of the target would fail
/// alike, so they wait behind the first, in order, for a fix (the upcaster deployed, the
/// state reset) rather than each becoming a dead letter.
pub(crate) fn load_state<S: serde::de::DeserializeOwned + Default>(
    kind: &str,
    current: u32,
    state: Option<StoredState<'_>>,
    batch: &[&InboxMessage],
    run: &BatchRun<'_>,
) -> Result<S, HandlerError> {
    let Some(stored) = state else {
        return Ok(S::default());
    };
    let whose = || match batch.first() {
        Some(m) => format!(
            "stored state of `{kind}` (tenant {:?}, id {:?}, state version {})",
            m.message.tenant, m.message.target_id, stored.version
        ),
        None => format!(
            "stored state of `{kind}` (state version {})",
            stored.version
        ),
    };
    let bytes = run
        .upcasters
        .upcast_state(kind, stored.version, current, stored.bytes)
        .map_err(|e| HandlerError::new(format!("{}: {e}", whose())))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        let hint = if stored.version == current {
            format!("if the state type changed, raise its STATE_VERSION above {current} and register a state upcaster (`.upcast_state::<E, _>({current}, …)`); or fix or reset the state")
        } else {
            format!("upcast from version {} to {current}; fix the state upcaster, or reset the state", stored.version)
        };
        HandlerError::new(format!("{} does not deserialize: {e}; {hint}", whose()))
    })
}

fn save_state<S: serde::Serialize>(kind: &str, state: &S) -> Result<Vec<u8>, HandlerError> {
    serde_json::to_vec(state)
        .map_err(|e| HandlerError::new(format!("state of `{kind}` does not serialize: {e}")))
}

/// Fills `outcomes` for a batch that failed at `failed` (index) with `error`.
fn fail_from(outcomes: &mut Vec<MessageOutcome>, len: usize, error: HandlerError) {
    outcomes.push(MessageOutcome::Failed(error));
    while outcomes.len() < len {
        outcomes.push(MessageOutcome::NotAttempted);
    }
}

/// The per-target rule every adapter shares, applied after each message of a batch of `len`
/// handled in order: a message whose step succeeded is `Handled`; the first that fails stops
/// the batch, and the messages after it are `NotAttempted` (they wait behind it). Returns
/// whether the batch goes on.
pub(crate) fn settle(result: &mut BatchResult, len: usize, step: Result<(), HandlerError>) -> bool {
    match step {
        Ok(()) => {
            result.outcomes.push(MessageOutcome::Handled);
            true
        }
        Err(e) => {
            fail_from(&mut result.outcomes, len, e);
            false
        }
    }
}

pub(crate) fn all_failed(len: usize, error: HandlerError) -> BatchResult {
    let mut outcomes = Vec::with_capacity(len);
    fail_from(&mut outcomes, len, error);
    BatchResult {
        outcomes,
        ..BatchResult::default()
    }
}

/// The ids of a subscriber's kind that `event` goes to: the route of each value it stands
/// for at the code's version, in order, each id once (a split event goes to every instance
/// one of its parts routes to).
pub(crate) fn routed<E: EventSet>(
    event: &NewEvent,
    upcasters: &Upcasters,
    route: impl Fn(&E, &EventSource) -> Vec<String>,
) -> Result<Vec<String>, HandlerError> {
    let mut ids: Vec<String> = Vec::new();
    for value in decode_event::<E>(event, upcasters)? {
        for id in route(&value, &event.source) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// The commands a handler sends while handling `m`, addressed and checked, all before any is
/// kept: one invalid command (an id outside the limits, a delay out of range) fails the
/// handling whole, and its failure policy decides. The n-th command's signal id is derived
/// from `m`'s signal and its target (`NewMessage::emitted_id`), so a redelivery sends the same
/// ids and they deduplicate while two targets handling one signal never collide; this is the
/// one place emitted command ids are made (reactors and process managers alike).
pub(crate) fn emitted_commands(
    m: &InboxMessage,
    outgoing: Vec<Outgoing>,
    run: &BatchRun<'_>,
    span: &tracing::Span,
) -> Result<Vec<NewMessage>, HandlerError> {
    let metadata = crate::entity::trace::emitted_metadata(run.trace, span, m);
    outgoing
        .into_iter()
        .enumerate()
        .map(|(n, out)| {
            let id = m.message.emitted_id("command", n);
            emitted_payload(m, &out.payload_type, &out.payload, run.max_payload_bytes)?;
            let c = out.into_message(id, &m.message.tenant, &metadata, run.now)?;
            validate_address(&c.tenant, &c.target_kind, &c.target_id, &c.signal_id)
                .map(|()| c)
                .map_err(|e| HandlerError::new(format!("reacted with an invalid command: {e}")))
        })
        .collect()
}

/// Checks the payload a handler emits while handling `m` against the limit: over it, the
/// message fails permanently (the handler would emit the same again; the kind's failure
/// policy decides, a dead letter by default, requeued once the limit is raised).
pub(crate) fn emitted_payload(
    m: &InboxMessage,
    payload_type: &str,
    payload: &[u8],
    limit: usize,
) -> Result<(), HandlerError> {
    crate::model::payload_limit::check_payload(payload_type, payload, limit).map_err(|e| {
        HandlerError::permanent(format!(
            "handling `{}` emitted a payload too large to write: {e}",
            m.message.signal_id
        ))
    })
}

/// Saves the state into the result if any message was handled.
pub(crate) fn finish_state<S: serde::Serialize>(kind: &str, state: &S, result: &mut BatchResult) {
    if !result.outcomes.contains(&MessageOutcome::Handled) {
        return;
    }
    match save_state(kind, state) {
        Ok(bytes) => result.state = Some(bytes),
        Err(e) => {
            // Nothing of the batch may commit without its state: fail all of it.
            let len = result.outcomes.len();
            *result = all_failed(len, e);
        }
    }
}

/// The part of [`EntityHandler`] that every event subscriber (projection, reactor, process
/// manager) has alike: its kind, whether it keeps state, its command type (none but a process
/// manager's), its event set's types, and its routing function (`route` by default).
macro_rules! subscriber_face {
    ($t:ident, $stateful:expr) => {
        subscriber_face!($t, $stateful, None, $t::route);
    };
    ($t:ident, $stateful:expr, $command:expr, $route:expr) => {
        fn kind(&self) -> &'static str {
            $t::KIND
        }
        fn is_stateful(&self) -> bool {
            $stateful
        }
        fn command_type(&self) -> Option<&'static str> {
            $command
        }
        fn event_types(&self) -> &'static [&'static str] {
            <$t::Event as EventSet>::TYPES
        }
        fn route(
            &self,
            event: &NewEvent,
            upcasters: &Upcasters,
        ) -> Result<Vec<String>, HandlerError> {
            routed::<$t::Event>(event, upcasters, $route)
        }
    };
}
pub(crate) use subscriber_face;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::services::Services;
    use crate::model::ids::ShardIndex;
    use crate::model::message::test_command;
    use serde::Deserialize;
    use std::time::Duration;

    #[derive(Debug, Default, PartialEq, Deserialize)]
    struct Tally {
        count: u32,
    }

    fn load(upcasters: &Upcasters, stored: Option<(&[u8], u32)>) -> Result<Tally, HandlerError> {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut m = test_command("s-1", "tally", "t-7", now);
        m.tenant = "acme".into();
        let m = InboxMessage::fresh(1, ShardIndex(0), m);
        let services = Services::new();
        let run = BatchRun {
            now,
            services: &services,
            timeout: Duration::from_secs(1),
            max_payload_bytes: 1 << 20,
            gate: None,
            trace: None,
            upcasters,
        };
        let state = stored.map(|(bytes, version)| StoredState { bytes, version });
        load_state::<Tally>("tally", 2, state, &[&m], &run)
    }

    #[test]
    fn a_state_is_upcast_to_the_kind_s_version_or_refused_naming_kind_tenant_id_and_version() {
        let none = Upcasters::new();
        assert_eq!(load(&none, None), Ok(Tally::default()), "a fresh entity");
        assert_eq!(
            load(&none, Some((br#"{"count":4}"#, 2))),
            Ok(Tally { count: 4 })
        );
        let mut upcasters = Upcasters::new();
        upcasters
            .register_state("tally", 1, |v| {
                Ok(vec![serde_json::json!({ "count": v["n"] })])
            })
            .unwrap();
        assert_eq!(
            load(&upcasters, Some((br#"{"n":3}"#, 1))),
            Ok(Tally { count: 3 })
        );
        for (upcasters, stored, says) in [
            (&none, (&br#"{"n":3}"#[..], 1), "no upcaster"),
            (&upcasters, (&br#"{"count":1}"#[..], 3), "newer code"),
            (&upcasters, (&br#"{"m":3}"#[..], 1), "does not deserialize"),
            (&none, (&br#"{"n":3}"#[..], 2), "raise its STATE_VERSION"),
        ] {
            let err = load(upcasters, Some(stored)).unwrap_err();
            let version = format!("state version {}", stored.1);
            assert!(
                err.reason.contains("`tally`")
                    && err.reason.contains("\"acme\"")
                    && err.reason.contains("\"t-7\"")
                    && err.reason.contains(&version)
                    && err.reason.contains(says),
                "{says}: {err}"
            );
            assert!(
                !err.permanent,
                "the target's messages wait for the fix: {err}"
            );
        }
    }
}

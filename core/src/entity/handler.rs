//! The type-erased face of an entity kind, as delivery sees it: [`EntityHandler`] takes the
//! serialized state and a target's batch of messages and returns what changed.
//!
//! The typed traits of [`crate::entity::traits`] are adapted here. The adapters own the per-target
//! rules: messages are handled in the given (`seq`) order; the first failure stops the batch
//! (later messages of the target are `NotAttempted` and wait behind it); a failed message
//! leaves no trace in the state; what a handler emits gets ids derived from its message, so a
//! redelivery emits the same ids and they deduplicate.

use crate::entity::traits::{Aggregate, Context, HandlerError, Message, Projection, Reactor};
use crate::model::event::{EventSource, NewEvent};
use crate::model::ids::{validate_address, SignalId};
use crate::model::message::{InboxMessage, NewMessage};
use chrono::{DateTime, Utc};
use std::marker::PhantomData;

/// What became of one message of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum MessageOutcome {
    /// Handled; its effects are in the batch result.
    Handled,
    /// The handler (or decoding) failed; the message follows the failure policy.
    Failed(HandlerError),
    /// Not attempted because an earlier message of the target failed.
    NotAttempted,
}

/// What handling one target's batch produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchResult {
    /// The new serialized state, if the entity keeps state and anything was handled.
    pub state: Option<Vec<u8>>,
    /// One outcome per message of the batch, in the batch's order.
    pub outcomes: Vec<MessageOutcome>,
    /// Events to append to the event store (and fan out to their subscribers).
    pub events: Vec<NewEvent>,
    /// Commands to write to their targets' inboxes.
    pub commands: Vec<NewMessage>,
}

/// An entity kind as delivery sees it.
pub trait EntityHandler: Send + Sync + 'static {
    /// The kind's stable name.
    fn kind(&self) -> &'static str;

    /// Whether the framework keeps state for this kind.
    fn is_stateful(&self) -> bool;

    /// The command type it accepts, if it accepts commands.
    fn command_type(&self) -> Option<&'static str>;

    /// The event type it subscribes to, if any.
    fn event_type(&self) -> Option<&'static str>;

    /// The ids of this kind that receive `event` (only called for the subscribed type).
    fn route(&self, event: &NewEvent) -> Result<Vec<String>, HandlerError>;

    /// Handles one target's messages, in order, on top of `state` (None: a fresh entity).
    fn handle_batch(
        &self,
        state: Option<&[u8]>,
        batch: &[&InboxMessage],
        now: DateTime<Utc>,
    ) -> BatchResult;
}

fn context<'a>(kind: &'a str, m: &'a InboxMessage, now: DateTime<Utc>) -> Context<'a> {
    Context {
        kind,
        target_id: &m.message.target_id,
        tenant: &m.message.tenant,
        signal_id: &m.message.signal_id,
        metadata: &m.message.metadata,
        received_at: m.message.received_at,
        now,
        attempts: m.attempts,
    }
}

fn decode<T: Message>(m: &InboxMessage) -> Result<T, HandlerError> {
    if m.message.payload_type != T::TYPE {
        return Err(HandlerError::new(format!(
            "payload type `{}` is not accepted here (expected `{}`)",
            m.message.payload_type,
            T::TYPE
        )));
    }
    serde_json::from_slice(&m.message.payload).map_err(|e| {
        HandlerError::new(format!(
            "payload of type `{}` does not deserialize: {e}",
            T::TYPE
        ))
    })
}

fn load_state<S: serde::de::DeserializeOwned + Default>(
    kind: &str,
    state: Option<&[u8]>,
) -> Result<S, HandlerError> {
    match state {
        None => Ok(S::default()),
        Some(bytes) => serde_json::from_slice(bytes).map_err(|e| {
            HandlerError::new(format!(
                "stored state of `{kind}` does not deserialize: {e}; fix or reset the state"
            ))
        }),
    }
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

/// The per-target rule every adapter shares: handles `batch` in order, one `step` per
/// message (given its index); a message whose step succeeds is `Handled`, the first that fails
/// stops the batch, and the messages after it are `NotAttempted` (they wait behind it).
fn run_batch<'b>(
    batch: &[&'b InboxMessage],
    result: &mut BatchResult,
    mut step: impl FnMut(usize, &'b InboxMessage, &mut BatchResult) -> Result<(), HandlerError>,
) {
    for (i, m) in batch.iter().enumerate() {
        match step(i, m, result) {
            Ok(()) => result.outcomes.push(MessageOutcome::Handled),
            Err(e) => {
                fail_from(&mut result.outcomes, batch.len(), e);
                return;
            }
        }
    }
}

fn all_failed(len: usize, error: HandlerError) -> BatchResult {
    let mut outcomes = Vec::with_capacity(len);
    fail_from(&mut outcomes, len, error);
    BatchResult {
        outcomes,
        ..BatchResult::default()
    }
}

fn decode_event<E: Message>(event: &NewEvent) -> Result<E, HandlerError> {
    serde_json::from_slice(&event.payload).map_err(|e| {
        HandlerError::new(format!(
            "event of type `{}` does not deserialize: {e}",
            E::TYPE
        ))
    })
}

/// Adapts an [`Aggregate`] type.
pub struct AggregateHandler<A>(PhantomData<fn() -> A>);

impl<A> Default for AggregateHandler<A> {
    fn default() -> Self {
        AggregateHandler(PhantomData)
    }
}

impl<A: Aggregate> AggregateHandler<A> {
    fn handle_one(
        state: &A,
        m: &InboxMessage,
        now: DateTime<Utc>,
    ) -> Result<(Vec<A::Event>, Vec<NewEvent>), HandlerError> {
        let command: A::Command = decode(m)?;
        let events = state.handle(&command, &context(A::KIND, m, now))?;
        let mut stored = Vec::with_capacity(events.len());
        for (n, event) in events.iter().enumerate() {
            let payload = serde_json::to_vec(event).map_err(|e| {
                HandlerError::new(format!(
                    "event of type `{}` does not serialize: {e}",
                    <A::Event as Message>::TYPE
                ))
            })?;
            stored.push(NewEvent {
                id: SignalId::derived(&m.message.signal_id, "event", n),
                event_type: <A::Event as Message>::TYPE.to_owned(),
                source: EventSource {
                    kind: A::KIND.to_owned(),
                    id: m.message.target_id.clone(),
                },
                tenant: m.message.tenant.clone(),
                occurred_at: now,
                payload,
                metadata: m.message.metadata.clone(),
            });
        }
        Ok((events, stored))
    }
}

impl<A: Aggregate> EntityHandler for AggregateHandler<A> {
    fn kind(&self) -> &'static str {
        A::KIND
    }
    fn is_stateful(&self) -> bool {
        true
    }
    fn command_type(&self) -> Option<&'static str> {
        Some(<A::Command as Message>::TYPE)
    }
    fn event_type(&self) -> Option<&'static str> {
        None
    }
    fn route(&self, _event: &NewEvent) -> Result<Vec<String>, HandlerError> {
        Ok(Vec::new())
    }

    fn handle_batch(
        &self,
        state: Option<&[u8]>,
        batch: &[&InboxMessage],
        now: DateTime<Utc>,
    ) -> BatchResult {
        // `handle` takes `&self`, so a failed command leaves the state untouched.
        run_stateful(A::KIND, state, batch, |entity: &mut A, _, m, result| {
            let (events, stored) = Self::handle_one(entity, m, now)?;
            for e in &events {
                entity.apply(e);
            }
            result.events.extend(stored);
            Ok(())
        })
    }
}

/// [`run_batch`] for a kind whose state the framework keeps: loads `state` (a target whose
/// stored state does not deserialize fails whole), runs `step` on it per message, and saves
/// it into the result if any message was handled.
fn run_stateful<'b, S: serde::de::DeserializeOwned + serde::Serialize + Default>(
    kind: &str,
    state: Option<&[u8]>,
    batch: &[&'b InboxMessage],
    mut step: impl FnMut(&mut S, usize, &'b InboxMessage, &mut BatchResult) -> Result<(), HandlerError>,
) -> BatchResult {
    let mut entity: S = match load_state(kind, state) {
        Ok(s) => s,
        Err(e) => return all_failed(batch.len(), e),
    };
    let mut result = BatchResult::default();
    run_batch(batch, &mut result, |i, m, result| {
        step(&mut entity, i, m, result)
    });
    finish_state(kind, &entity, &mut result);
    result
}

/// Saves the state into the result if any message was handled.
fn finish_state<S: serde::Serialize>(kind: &str, state: &S, result: &mut BatchResult) {
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

/// The part of [`EntityHandler`] that every event subscriber (projection, reactor) has alike:
/// its kind, whether it keeps state, no command type, its event type, and its `route`.
macro_rules! subscriber_face {
    ($t:ident, $stateful:expr) => {
        fn kind(&self) -> &'static str {
            $t::KIND
        }
        fn is_stateful(&self) -> bool {
            $stateful
        }
        fn command_type(&self) -> Option<&'static str> {
            None
        }
        fn event_type(&self) -> Option<&'static str> {
            Some(<$t::Event as Message>::TYPE)
        }
        fn route(&self, event: &NewEvent) -> Result<Vec<String>, HandlerError> {
            Ok($t::route(&decode_event::<$t::Event>(event)?, &event.source))
        }
    };
}

/// Adapts a [`Projection`] type.
pub struct ProjectionHandler<P>(PhantomData<fn() -> P>);

impl<P> Default for ProjectionHandler<P> {
    fn default() -> Self {
        ProjectionHandler(PhantomData)
    }
}

impl<P: Projection> EntityHandler for ProjectionHandler<P> {
    subscriber_face!(P, true);

    fn handle_batch(
        &self,
        state: Option<&[u8]>,
        batch: &[&InboxMessage],
        now: DateTime<Utc>,
    ) -> BatchResult {
        run_stateful(P::KIND, state, batch, |view: &mut P, i, m, _| {
            let applied = decode::<P::Event>(m)
                .and_then(|event| view.apply(&event, &context(P::KIND, m, now)));
            if applied.is_err() {
                // `apply` may have half-changed the view: rebuild it from the loaded state
                // and the messages before this one (apply is deterministic by contract).
                *view = load_state(P::KIND, state)?;
                for earlier in &batch[..i] {
                    if let Ok(event) = decode::<P::Event>(earlier) {
                        let _ = view.apply(&event, &context(P::KIND, earlier, now));
                    }
                }
            }
            applied
        })
    }
}

/// Adapts a [`Reactor`] value.
pub struct ReactorHandler<R>(pub R);

impl<R: Reactor> EntityHandler for ReactorHandler<R> {
    subscriber_face!(R, false);

    fn handle_batch(
        &self,
        _state: Option<&[u8]>,
        batch: &[&InboxMessage],
        now: DateTime<Utc>,
    ) -> BatchResult {
        let mut result = BatchResult::default();
        run_batch(batch, &mut result, |_, m, result| {
            let event = decode::<R::Event>(m)?;
            let outgoing = self.0.react(&event, &context(R::KIND, m, now))?;
            // Built and checked all before any is kept: a reaction with one invalid command
            // fails whole (its failure policy decides), sending none.
            let commands = outgoing
                .into_iter()
                .enumerate()
                .map(|(n, out)| {
                    let id = SignalId::derived(&m.message.signal_id, "command", n);
                    let c = out.into_message(id, &m.message.tenant, &m.message.metadata, now);
                    validate_address(&c.tenant, &c.target_kind, &c.target_id, &c.signal_id)
                        .map(|()| c)
                        .map_err(|e| {
                            HandlerError::new(format!("reacted with an invalid command: {e}"))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            result.commands.extend(commands);
            Ok(())
        });
        result
    }
}

//! The type-erased face of an entity kind, as delivery sees it: [`EntityHandler`] takes the
//! serialized state and a target's batch of messages and returns what changed.
//!
//! The typed traits of [`crate::entity::traits`] are adapted here. The adapters own the per-target
//! rules: messages are handled in the given (`seq`) order; the first failure stops the batch
//! (later messages of the target are `NotAttempted` and wait behind it); a handler call that
//! exceeds the kind's `handler_timeout` or panics is a failure of its message like any other;
//! a failed message leaves no trace in the state; what a handler emits gets ids derived from its
//! message and its target (`NewMessage::emitted_id`), so a redelivery emits the same ids and
//! they deduplicate, and two targets handling one signal never emit the same id.

use crate::entity::services::Services;
use crate::entity::traits::{
    Aggregate, Context, EventSet, HandlerError, Message, Outgoing, Projection, Reactor,
};
use crate::model::event::{EventSource, NewEvent};
use crate::model::ids::validate_address;
use crate::model::message::{InboxMessage, NewMessage};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

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
    /// The entity finished (a process manager's flow ended): its stored state is removed and
    /// `state` is `None`.
    pub finished: bool,
}

/// How one batch is run: the stage's time, the application's services and the time one
/// handler call may take.
#[derive(Debug, Clone, Copy)]
pub struct BatchRun<'a> {
    /// The time of the delivery stage.
    pub now: DateTime<Utc>,
    /// The application's services, reachable from the handlers' [`Context`].
    pub services: &'a Services,
    /// How long one handler call may take before it fails (`handler_timeout` of the kind).
    pub timeout: Duration,
    /// The largest payload an emitted event or command may carry (`max_payload_bytes`): a
    /// larger one fails its message permanently ([`emitted_payload`]).
    pub max_payload_bytes: usize,
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

/// An entity kind as delivery sees it.
#[async_trait]
pub trait EntityHandler: Send + Sync + 'static {
    /// The kind's stable name.
    fn kind(&self) -> &'static str;

    /// Whether the framework keeps state for this kind.
    fn is_stateful(&self) -> bool;

    /// The command type it accepts, if it accepts commands.
    fn command_type(&self) -> Option<&'static str>;

    /// The event types it subscribes to (none for a kind that takes only commands).
    fn event_types(&self) -> &'static [&'static str];

    /// The ids of this kind that receive `event` (only called for the subscribed types).
    fn route(&self, event: &NewEvent) -> Result<Vec<String>, HandlerError>;

    /// Handles one target's messages, in order, on top of `state` (None: a fresh entity).
    /// A handler call that exceeds `run.timeout` or panics fails its message.
    async fn handle_batch(
        &self,
        state: Option<&[u8]>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult;
}

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

/// Runs one call of application code: a call that takes longer than `timeout` or panics is
/// a failure of its message, with a reason that says so; nothing else of the stage is
/// affected.
///
/// Most calls (a fold, a decision on the state) finish at their first poll: they are polled
/// once before the timer is set, and never pay for one (a timer entry is a lock on the
/// runtime's timer wheel to add it and another to remove it, per call). A call that waits
/// gets its timeout from that first poll on.
pub(crate) async fn guarded<T>(
    kind: &str,
    timeout: Duration,
    call: impl Future<Output = Result<T, HandlerError>>,
) -> Result<T, HandlerError> {
    let mut call = CatchUnwind(Box::pin(call));
    let first = std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut call).poll(cx) {
            Poll::Ready(done) => Some(done),
            Poll::Pending => None,
        })
    })
    .await;
    let done = match first {
        Some(done) => done,
        None => match tokio::time::timeout(timeout, call).await {
            Ok(done) => done,
            Err(_) => {
                return Err(HandlerError::new(format!(
                    "handler of `{kind}` exceeded handler_timeout of {timeout:?}"
                )))
            }
        },
    };
    done.unwrap_or_else(|panic| Err(panicked(kind, panic.as_ref())))
}

/// The failure of a handler that panicked, with the panic's message.
fn panicked(kind: &str, panic: &(dyn Any + Send)) -> HandlerError {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    HandlerError::new(format!("handler of `{kind}` panicked: {message}"))
}

/// A future that turns a panic while it is polled into an error (what `catch_unwind` is for
/// a closure). Boxed so that it needs no pin projection (and no `unsafe`). Also the runner's
/// guard around a worker's turn.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        // Unwind safety: after a panic the future is dropped, never polled again, and the
        // adapters rebuild any state it may have half-changed.
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// The message's payload as `T`: a command type (a [`Message`], a set of one) or the event
/// set of a subscriber; an error names the type refused.
pub(crate) fn decode<T: EventSet>(m: &InboxMessage) -> Result<T, HandlerError> {
    T::decode(&m.message.payload_type, &m.message.payload)
}

pub(crate) fn load_state<S: serde::de::DeserializeOwned + Default>(
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

pub(crate) fn decode_event<E: EventSet>(event: &NewEvent) -> Result<E, HandlerError> {
    E::decode(&event.event_type, &event.payload)
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
) -> Result<Vec<NewMessage>, HandlerError> {
    outgoing
        .into_iter()
        .enumerate()
        .map(|(n, out)| {
            emitted_payload(m, &out.payload_type, &out.payload, run.max_payload_bytes)?;
            let id = m.message.emitted_id("command", n);
            let c = out.into_message(id, &m.message.tenant, &m.message.metadata, run.now)?;
            validate_address(&c.tenant, &c.target_kind, &c.target_id, &c.signal_id)
                .map(|()| c)
                .map_err(|e| HandlerError::new(format!("reacted with an invalid command: {e}")))
        })
        .collect()
}

/// Adapts an [`Aggregate`] type.
pub struct AggregateHandler<A>(PhantomData<fn() -> A>);

impl<A> Default for AggregateHandler<A> {
    fn default() -> Self {
        AggregateHandler(PhantomData)
    }
}

impl<A: Aggregate> AggregateHandler<A> {
    async fn handle_one(
        state: &A,
        m: &InboxMessage,
        run: &BatchRun<'_>,
    ) -> Result<(Vec<A::Event>, Vec<NewEvent>), HandlerError> {
        let command: A::Command = decode(m)?;
        let cx = context(A::KIND, m, run);
        let events = guarded(A::KIND, run.timeout, state.handle(&command, &cx)).await?;
        let mut stored = Vec::with_capacity(events.len());
        for (n, event) in events.iter().enumerate() {
            let payload = serde_json::to_vec(event).map_err(|e| {
                HandlerError::new(format!(
                    "event of type `{}` does not serialize: {e}",
                    <A::Event as Message>::TYPE
                ))
            })?;
            emitted_payload(
                m,
                <A::Event as Message>::TYPE,
                &payload,
                run.max_payload_bytes,
            )?;
            stored.push(NewEvent {
                id: m.message.emitted_id("event", n),
                event_type: <A::Event as Message>::TYPE.to_owned(),
                source: EventSource {
                    kind: A::KIND.to_owned(),
                    id: m.message.target_id.clone(),
                },
                tenant: m.message.tenant.clone(),
                occurred_at: run.now,
                payload,
                metadata: m.message.metadata.clone(),
            });
        }
        Ok((events, stored))
    }
}

#[async_trait]
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
    fn event_types(&self) -> &'static [&'static str] {
        &[]
    }
    fn route(&self, _event: &NewEvent) -> Result<Vec<String>, HandlerError> {
        Ok(Vec::new())
    }

    async fn handle_batch(
        &self,
        state: Option<&[u8]>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut entity: A = match load_state(A::KIND, state) {
            Ok(s) => s,
            Err(e) => return all_failed(batch.len(), e),
        };
        let mut result = BatchResult::default();
        // The events applied so far, to rebuild the state after a panicking `apply`.
        let mut applied: Vec<A::Event> = Vec::new();
        for m in batch {
            // `handle` takes `&self`, so a failed command leaves the state untouched.
            let step = match Self::handle_one(&entity, m, &run).await {
                Ok((events, stored)) => {
                    let applying = catch_unwind(AssertUnwindSafe(|| {
                        for e in &events {
                            entity.apply(e);
                        }
                    }));
                    match applying {
                        Ok(()) => {
                            applied.extend(events);
                            result.events.extend(stored);
                            Ok(())
                        }
                        Err(panic) => {
                            // The state may be half-changed: rebuild it without this message.
                            match load_state::<A>(A::KIND, state) {
                                Ok(mut rebuilt) => {
                                    for e in &applied {
                                        rebuilt.apply(e);
                                    }
                                    entity = rebuilt;
                                    Err(panicked(A::KIND, panic.as_ref()))
                                }
                                Err(e) => Err(e),
                            }
                        }
                    }
                }
                Err(e) => Err(e),
            };
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        finish_state(A::KIND, &entity, &mut result);
        result
    }
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
        fn route(&self, event: &NewEvent) -> Result<Vec<String>, HandlerError> {
            Ok($route(&decode_event::<$t::Event>(event)?, &event.source))
        }
    };
}
pub(crate) use subscriber_face;

/// Adapts a [`Projection`] type.
pub struct ProjectionHandler<P>(PhantomData<fn() -> P>);

impl<P> Default for ProjectionHandler<P> {
    fn default() -> Self {
        ProjectionHandler(PhantomData)
    }
}

#[async_trait]
impl<P: Projection> EntityHandler for ProjectionHandler<P> {
    subscriber_face!(P, true);

    async fn handle_batch(
        &self,
        state: Option<&[u8]>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut view: P = match load_state(P::KIND, state) {
            Ok(s) => s,
            Err(e) => return all_failed(batch.len(), e),
        };
        let mut result = BatchResult::default();
        for (i, m) in batch.iter().enumerate() {
            let mut step = match decode::<P::Event>(m) {
                Ok(event) => {
                    let cx = context(P::KIND, m, &run);
                    guarded(P::KIND, run.timeout, view.apply(&event, &cx)).await
                }
                Err(e) => Err(e),
            };
            if step.is_err() {
                // `apply` may have half-changed the view: rebuild it from the loaded state
                // and the messages before this one (apply is deterministic by contract).
                match load_state::<P>(P::KIND, state) {
                    Ok(rebuilt) => {
                        view = rebuilt;
                        for earlier in &batch[..i] {
                            if let Ok(event) = decode::<P::Event>(earlier) {
                                let cx = context(P::KIND, earlier, &run);
                                let _ =
                                    guarded(P::KIND, run.timeout, view.apply(&event, &cx)).await;
                            }
                        }
                    }
                    Err(e) => step = Err(e),
                }
            }
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        finish_state(P::KIND, &view, &mut result);
        result
    }
}

/// Adapts a [`Reactor`] value.
pub struct ReactorHandler<R>(pub R);

#[async_trait]
impl<R: Reactor> EntityHandler for ReactorHandler<R> {
    subscriber_face!(R, false);

    async fn handle_batch(
        &self,
        _state: Option<&[u8]>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut result = BatchResult::default();
        for m in batch {
            let step = match decode::<R::Event>(m) {
                Ok(event) => {
                    let cx = context(R::KIND, m, &run);
                    guarded(R::KIND, run.timeout, self.0.react(&event, &cx))
                        .await
                        .and_then(|outgoing| {
                            result.commands.extend(emitted_commands(m, outgoing, &run)?);
                            Ok(())
                        })
                }
                Err(e) => Err(e),
            };
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        result
    }
}

//! Process managers (sagas): a stateful entity that follows events of several aggregates,
//! routed by a correlation id, and drives a flow by sending commands — to aggregates, and to
//! itself later (timeouts) — until it finishes.
//!
//! ```text
//!  event of its set ──► correlation_id(event) = instance ──► on_event(&mut state)  ─┐
//!  its own command  ──► (sent to the instance, e.g. a timeout) ──► on_command(&mut state) ─┤
//!                                                                                   ▼
//!        ProcessActions: commands to send (Outgoing, maybe delayed), finish or not
//!        state + inbox status + commands commit with the stage: exactly once per message
//!        finish ──► the instance's state is removed
//! ```
//!
//! The framework keeps the state like an aggregate's: loaded once per batch, saved (or
//! removed) with the stage. A handler that fails leaves no trace: the state is restored to
//! what it was before the failed message and nothing it asked for is sent. The adapter is in
//! `process_handler.rs`, on the rules of [`crate::entity::target_batch`].

use crate::entity::context::Context;
use crate::entity::handler_error::HandlerError;
use crate::entity::traits::{EventSet, Message, Outgoing};
use crate::model::event::EventSource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use std::time::Duration;

/// A stateful entity that coordinates a flow across aggregates (a saga).
///
/// Each instance is one flow (an order's fulfilment), found by the correlation id its events
/// carry. Its handlers change the state in place and return what to do next. `Clone` lets the
/// adapter restore the state when a handler fails.
///
/// A timeout is a command to itself sent with a delay ([`ProcessActions::schedule`]); it is
/// not cancelled when the flow moves on, so its handler checks the state and ignores a timeout
/// that came too late. A message for an instance that has finished starts a fresh one from
/// `Default`: finish again (or do nothing and finish) to leave no state behind.
pub trait ProcessManager:
    Default + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Stable name of this kind.
    const KIND: &'static str;
    /// The version of this state's shape, stored with it: 1 until the state type changes
    /// incompatibly. Raise it then, and register a state upcaster per older version
    /// (`.upcast_state::<Self>(from_version, …)` on the builder); a state that cannot be
    /// upcast or decoded fails its target's messages with an error naming the kind, tenant,
    /// id and version, never a silent default.
    const STATE_VERSION: u32 = crate::entity::upcast::FIRST_VERSION;
    /// The events it follows: one [`Message`] type or an [`event_set!`](crate::event_set).
    type Event: EventSet;
    /// Its own commands (timeouts, and commands the application sends it).
    type Command: Message;

    /// The instance (flow) `event` belongs to; `None`: no instance follows it.
    fn correlation_id(event: &Self::Event, source: &EventSource) -> Option<String>;

    /// Handles an event of its set. Write it as an `async fn`.
    fn on_event(
        &mut self,
        event: &Self::Event,
        cx: &Context<'_>,
    ) -> impl Future<Output = Result<ProcessActions, HandlerError>> + Send;

    /// Handles one of its own commands (a timeout it scheduled). Write it as an `async fn`.
    fn on_command(
        &mut self,
        command: &Self::Command,
        cx: &Context<'_>,
    ) -> impl Future<Output = Result<ProcessActions, HandlerError>> + Send;
}

/// What a process manager does after handling a message: the commands to send and whether the
/// flow is over.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use shardbox_core::*;
/// # #[derive(Serialize, Deserialize)] struct Reserve;
/// # impl Message for Reserve { const TYPE: &'static str = "reserve"; }
/// # #[derive(Default, Serialize, Deserialize)] struct Stock;
/// # impl Aggregate for Stock { const KIND: &'static str = "stock"; type Command = Reserve; type Event = Reserve;
/// #   async fn handle(&self, _: &Reserve, _: &Context<'_>) -> Result<Vec<Reserve>, HandlerError> { Ok(vec![]) }
/// #   fn apply(&mut self, _: &Reserve) {} }
/// # fn next() -> Result<ProcessActions, HandlerError> {
/// let actions = ProcessActions::new().send(Outgoing::command::<Stock>("sku-1", &Reserve)?);
/// assert_eq!(actions.commands().len(), 1);
/// assert!(!actions.is_finished());
/// # Ok(actions) }
/// # next().unwrap();
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use = "the actions take effect only when returned from the handler"]
pub struct ProcessActions {
    commands: Vec<Outgoing>,
    finished: bool,
}

impl ProcessActions {
    /// Nothing to do (the flow goes on).
    pub fn new() -> Self {
        Self::default()
    }

    /// Also sends `command` (built with [`Outgoing::command`] or
    /// [`Outgoing::process_command`]).
    pub fn send(mut self, command: Outgoing) -> Self {
        self.commands.push(command);
        self
    }

    /// Also sends `command` to this very instance after `after`: a timeout. An `after` out of
    /// range fails the handling (a [`HandlerError`] naming the delay), never panics.
    pub fn schedule<P: ProcessManager>(
        self,
        cx: &Context<'_>,
        command: &P::Command,
        after: Duration,
    ) -> Result<Self, HandlerError> {
        if cx.kind != P::KIND {
            return Err(HandlerError::new(format!(
                "a timeout of `{}` was scheduled while handling a message of `{}`",
                P::KIND,
                cx.kind
            )));
        }
        let timeout = Outgoing::process_command::<P>(cx.target_id, command)?.delayed(after);
        Ok(self.send(timeout))
    }

    /// Ends the flow: its state is removed once this message commits.
    pub fn finish(mut self) -> Self {
        self.finished = true;
        self
    }

    /// The commands to send, in order.
    pub fn commands(&self) -> &[Outgoing] {
        &self.commands
    }

    /// Whether the flow ends.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The commands and the end flag, for the adapter.
    pub(crate) fn into_parts(self) -> (Vec<Outgoing>, bool) {
        (self.commands, self.finished)
    }
}

impl Outgoing {
    /// A command for process manager `P` instance `id` (a saga's timeout to itself is one of
    /// these, sent [`delayed`](Self::delayed); see [`ProcessActions::schedule`]).
    pub fn process_command<P: ProcessManager>(
        id: impl Into<String>,
        command: &P::Command,
    ) -> Result<Self, HandlerError> {
        Self::to_kind(P::KIND, id.into(), command)
    }
}

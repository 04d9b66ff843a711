//! The type-erased face of an entity kind, as delivery sees it: [`EntityHandler`] takes the
//! serialized state and a target's batch of messages and returns what changed
//! ([`BatchResult`], one [`MessageOutcome`] per message).
//!
//! ```text
//!  handler             EntityHandler, BatchRun, BatchResult, MessageOutcome (this file)
//!  guard               one call of application code under its timeout and a panic guard
//!  target_batch        the per-target rules every adapter shares
//!  aggregate_handler   ┐
//!  projection_handler  │ the adapters of the typed traits (`traits`), one per kind
//!  reactor_handler     │
//!  process_handler     │
//!  transactional_projection ┘ (writes left for the commit's transaction)
//! ```
//!
//! The adapters own the per-target rules: messages are handled in the given (`seq`) order; the
//! first failure stops the batch (later messages of the target are `NotAttempted` and wait
//! behind it); a handler call that exceeds the kind's `handler_timeout` or panics is a failure
//! of its message like any other; a failed message leaves no trace in the state; what a handler
//! emits gets ids derived from its message and its target (`NewMessage::emitted_id`), so a
//! redelivery emits the same ids and they deduplicate, and two targets handling one signal
//! never emit the same id.
//!
//! This file is the contract alone: the adapters use it, it uses none of them.

use crate::entity::handler_error::HandlerError;
use crate::entity::in_transaction::{InTransactionApply, RebuildScope};
use crate::entity::services::Services;
use crate::entity::upcast::{Upcasters, FIRST_VERSION};
use crate::model::event::NewEvent;
use crate::model::kind_role::KindRole;
use crate::model::message::{InboxMessage, NewMessage};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
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
    /// Writes of the handled messages left for the commit's transaction (a
    /// [`TransactionalProjection`](crate::entity::transactional_projection::TransactionalProjection)'s):
    /// the messages count as handled only if they succeed there.
    pub in_transaction: Option<InTransactionApply>,
}

/// How one batch is run: the stage's time, the application's services and the time one
/// handler call may take.
#[derive(Clone, Copy)]
pub struct BatchRun<'a> {
    /// The time of the delivery stage.
    pub now: DateTime<Utc>,
    /// The application's services, reachable from the handlers' [`Context`].
    pub services: &'a Services,
    /// How long one handler call may take before it fails (`handler_timeout` of the kind).
    pub timeout: Duration,
    /// The largest payload an emitted event or command may carry (`max_payload_bytes`): a
    /// larger one fails its message permanently (`target_batch::emitted_payload`).
    pub max_payload_bytes: usize,
    /// The kind's limits on this node, if it has any: each handler call waits for its turn
    /// there first (see [`KindGate`](crate::entity::kind_gate::KindGate)).
    pub gate: Option<&'a crate::entity::kind_gate::KindGate>,
    /// The delivery's trace propagator, if it has one: each handler call then runs in a span
    /// parented on its message's trace context (see [`crate::entity::trace`]).
    pub trace: Option<&'a dyn crate::entity::trace::TracePropagator>,
    /// The application's upcasters: a payload stored at an older version of its type is
    /// upcast to the code's before it is decoded (see [`Upcasters`]).
    pub upcasters: &'a Upcasters,
}

impl std::fmt::Debug for BatchRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchRun")
            .field("now", &self.now)
            .field("timeout", &self.timeout)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("gate", &self.gate)
            .field("traced", &self.trace.is_some())
            .field("upcasters", &self.upcasters)
            .finish_non_exhaustive()
    }
}

/// A target's state as stored: its bytes and the version of its kind's state shape they were
/// saved at (see [`EntityHandler::state_version`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredState<'a> {
    /// The serialized state (JSON).
    pub bytes: &'a [u8],
    /// The state version it was saved at (1 for states saved before versions existed).
    pub version: u32,
}

impl<'a> StoredState<'a> {
    /// The stored form of `state`, as the storage loaded it.
    pub fn of(state: &'a crate::storage::EntityState) -> Self {
        StoredState {
            bytes: &state.state,
            version: state.state_version,
        }
    }
}

/// An entity kind as delivery sees it.
#[async_trait]
pub trait EntityHandler: Send + Sync + 'static {
    /// The kind's stable name.
    fn kind(&self) -> &'static str;

    /// Whether the framework keeps state for this kind.
    fn is_stateful(&self) -> bool;

    /// The version of the kind's state shape its states are saved at (its `STATE_VERSION`);
    /// a stored state of an older version is upcast to it before it is decoded.
    fn state_version(&self) -> u32 {
        FIRST_VERSION
    }

    /// Its role, as the membership records it and the operators' tools show it: by default
    /// the one its shape says (see [`KindRole::of`]).
    fn role(&self) -> KindRole {
        KindRole::of(
            self.command_type().is_some(),
            !self.event_types().is_empty(),
            self.is_stateful(),
        )
    }

    /// Whether its batches leave writes for the commit's transaction
    /// ([`BatchResult::in_transaction`]): such a kind needs a backend that runs them (SQL),
    /// and a catch-up replays it through the Inbox rather than straight into states.
    fn in_transaction(&self) -> bool {
        false
    }

    /// For a kind that writes inside the commit's transaction: what a catch-up of `scope`
    /// runs there before its first replayed page (it empties what the replay writes again).
    /// `None` (the default): nothing, the framework's states are reset by the catch-up.
    fn rebuild_reset(&self, scope: RebuildScope) -> Option<InTransactionApply> {
        let _ = scope;
        None
    }

    /// The command type it accepts, if it accepts commands.
    fn command_type(&self) -> Option<&'static str>;

    /// The event types it subscribes to (none for a kind that takes only commands).
    fn event_types(&self) -> &'static [&'static str];

    /// The ids of this kind that receive `event` (only called for the subscribed types),
    /// read through `upcasters` if it was stored at an older version of its type.
    fn route(&self, event: &NewEvent, upcasters: &Upcasters) -> Result<Vec<String>, HandlerError>;

    /// Handles one target's messages, in order, on top of `state` (None: a fresh entity).
    /// A handler call that exceeds `run.timeout` or panics fails its message.
    async fn handle_batch(
        &self,
        state: Option<StoredState<'_>>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult;
}

//! What application developers implement: [`Aggregate`]s handle commands and emit events,
//! [`Projection`]s apply events to a read model, [`Reactor`]s turn events into commands.
//!
//! State is kept by the framework (serde), loaded once per batch and saved once with the rest
//! of the stage, so handlers stay plain synchronous functions with no I/O.

use crate::model::event::EventSource;
use crate::model::ids::SignalId;
use crate::model::message::{Metadata, NewMessage};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// A command or event type: serde plus a stable type name, stored with every payload.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// enum AccountCommand { Deposit(i64) }
/// impl shardbox_core::Message for AccountCommand { const TYPE: &'static str = "account.command"; }
/// ```
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The stable name of this type. Renaming the Rust type must not change it.
    const TYPE: &'static str;
}

/// What a handler knows about the message it handles.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Kind of the entity handling the message.
    pub kind: &'a str,
    /// Id of the entity handling the message.
    pub target_id: &'a str,
    /// Tenant of the entity.
    pub tenant: &'a str,
    /// The message's signal id.
    pub signal_id: &'a SignalId,
    /// The message's metadata.
    pub metadata: &'a Metadata,
    /// When the message was sent.
    pub received_at: DateTime<Utc>,
    /// The time of this delivery stage.
    pub now: DateTime<Utc>,
    /// Failed attempts before this one.
    pub attempts: u32,
}

/// A handler could not handle a message. The message follows the kind's failure policy;
/// later messages of the same target wait behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    /// Why.
    pub reason: String,
    /// The handler's own wish for the next attempt (like a NACK with a delay); the longer of
    /// this and the policy's back-off wins.
    pub retry_after: Option<Duration>,
}

impl HandlerError {
    /// A failure with a reason.
    pub fn new(reason: impl Into<String>) -> Self {
        HandlerError {
            reason: reason.into(),
            retry_after: None,
        }
    }

    /// Asks for the next attempt no sooner than `delay` from now.
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for HandlerError {}

/// A stateful entity that handles commands and emits events (an event-sourced aggregate whose
/// state the framework keeps).
pub trait Aggregate: Default + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Stable name of this entity kind.
    const KIND: &'static str;
    /// Commands it accepts.
    type Command: Message;
    /// Events it emits.
    type Event: Message;

    /// Decides what a command does: the events to emit, or an error.
    fn handle(
        &self,
        command: &Self::Command,
        cx: &Context<'_>,
    ) -> Result<Vec<Self::Event>, HandlerError>;

    /// Applies one of its own events to the state.
    fn apply(&mut self, event: &Self::Event);
}

/// A stateful read model that applies events.
pub trait Projection: Default + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Stable name of this projection kind.
    const KIND: &'static str;
    /// The events it follows.
    type Event: Message;

    /// Which instances (ids) of this projection receive `event`. By default the one with the
    /// producer's id.
    fn route(event: &Self::Event, source: &EventSource) -> Vec<String> {
        let _ = event;
        vec![source.id.clone()]
    }

    /// Applies an event to the state.
    fn apply(&mut self, event: &Self::Event, cx: &Context<'_>) -> Result<(), HandlerError>;
}

/// A stateless entity that turns events into commands for other entities.
pub trait Reactor: Send + Sync + 'static {
    /// Stable name of this reactor kind.
    const KIND: &'static str;
    /// The events it follows.
    type Event: Message;

    /// Which instances (ids) of this reactor receive `event`. By default the one with the
    /// producer's id.
    fn route(event: &Self::Event, source: &EventSource) -> Vec<String> {
        let _ = event;
        vec![source.id.clone()]
    }

    /// The commands to send in reaction to `event`.
    fn react(&self, event: &Self::Event, cx: &Context<'_>) -> Result<Vec<Outgoing>, HandlerError>;
}

/// A command a reactor sends, addressed and serialized.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// Target kind.
    pub target_kind: String,
    /// Target id.
    pub target_id: String,
    /// Stable type name of the payload.
    pub payload_type: String,
    /// Serialized payload.
    pub payload: Vec<u8>,
    /// Not delivered before this delay has passed.
    pub delay: Option<Duration>,
}

impl Outgoing {
    /// A command for aggregate `A` instance `id`.
    pub fn command<A: Aggregate>(
        id: impl Into<String>,
        command: &A::Command,
    ) -> Result<Self, HandlerError> {
        let payload = serde_json::to_vec(command).map_err(|e| {
            HandlerError::new(format!(
                "command of type `{}` does not serialize: {e}",
                <A::Command as Message>::TYPE
            ))
        })?;
        Ok(Outgoing {
            target_kind: A::KIND.to_owned(),
            target_id: id.into(),
            payload_type: <A::Command as Message>::TYPE.to_owned(),
            payload,
            delay: None,
        })
    }

    /// Delays delivery of the command by `delay`.
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The message this becomes, sent on behalf of `parent`.
    pub(crate) fn into_message(
        self,
        signal_id: SignalId,
        tenant: &str,
        metadata: &Metadata,
        now: DateTime<Utc>,
    ) -> NewMessage {
        NewMessage {
            signal_id,
            kind: crate::model::message::MessageKind::Command,
            target_kind: self.target_kind,
            target_id: self.target_id,
            tenant: tenant.to_owned(),
            payload: self.payload,
            payload_type: self.payload_type,
            metadata: metadata.clone(),
            received_at: now,
            deliver_after: self
                .delay
                .and_then(|d| chrono::Duration::from_std(d).ok())
                .map(|d| now + d),
            expires_at: None,
        }
    }
}

//! What application developers implement: [`Aggregate`]s handle commands and emit events,
//! [`Projection`]s apply events to a read model, [`Reactor`]s turn events into commands.
//! Projections and reactors follow an [`EventSet`]: one event type, or several (from several
//! aggregates) declared with [`event_set!`](crate::event_set).
//!
//! State is kept by the framework (serde), loaded once per batch and saved once with the rest
//! of the stage. What a handler is told of its message is its [`Context`] (`context.rs`); how
//! it fails is a [`HandlerError`] (`handler_error.rs`).
//!
//! Handlers are `async`: a handler that calls another system (an HTTP API, a mailer, a
//! payment gateway) awaits it, and a pure one is written the same way with no `await` in its
//! body. The trait methods are declared as `fn .. -> impl Future<Output = ..> + Send`, which an
//! `async fn` in the `impl` satisfies; the future must be `Send` because the stations run
//! handlers as tokio tasks, several at a time (`handler_concurrency`), each under
//! `handler_timeout` and with panics caught. A handler that blocks its thread (CPU-heavy work,
//! a synchronous client) should move that work into `tokio::task::spawn_blocking`, so that it
//! does not hold one of the runtime's threads (the lease renewal runs on a thread of its own
//! and is never starved, but the other handlers and stages are).
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use shardbox_core::{Aggregate, Context, HandlerError, Message};
//! # #[derive(Serialize, Deserialize)] pub struct Deposit(i64);
//! # impl Message for Deposit { const TYPE: &'static str = "deposit"; }
//! # #[derive(Serialize, Deserialize)] pub struct Deposited(i64);
//! # impl Message for Deposited { const TYPE: &'static str = "deposited"; }
//! #[derive(Default, Serialize, Deserialize)]
//! struct Account { balance: i64 }
//!
//! impl Aggregate for Account {
//!     const KIND: &'static str = "account";
//!     type Command = Deposit;
//!     type Event = Deposited;
//!
//!     // A pure handler: `async fn`, no await.
//!     async fn handle(&self, c: &Deposit, _: &Context<'_>) -> Result<Vec<Deposited>, HandlerError> {
//!         Ok(vec![Deposited(c.0)])
//!     }
//!
//!     fn apply(&mut self, e: &Deposited) {
//!         self.balance += e.0;
//!     }
//! }
//! ```

use crate::entity::context::Context;
use crate::entity::handler_error::HandlerError;
use crate::model::event::EventSource;
use crate::model::ids::SignalId;
use crate::model::message::{Metadata, NewMessage};
use crate::model::time_limits::{self, TimeField};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
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

    /// The version of this type's shape, stored with every payload written from it: 1 until
    /// the shape changes incompatibly (a field renamed, an event split in two). Raise it then,
    /// and register an upcaster per older version on the builder
    /// (`.upcast::<T>(from_version, …)`, see [`Upcasters`](crate::Upcasters)): payloads
    /// stored at an older version are upcast to this one wherever they are read.
    const VERSION: u32 = crate::entity::upcast::FIRST_VERSION;
}

/// The event types a projection, reactor or process manager follows, and how a stored event
/// of one of them becomes a value.
///
/// Every [`Message`] type is a set of one: `type Event = OrderEvent;` keeps working. For
/// several types, declare an enum with [`event_set!`](crate::event_set), one variant per
/// type; the compiler then checks every `match` over what the subscriber receives. A
/// hand-written impl is possible too (an enum that is not itself a [`Message`]):
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use shardbox_core::{EventSet, HandlerError, Message};
/// # #[derive(Serialize, Deserialize)] pub struct OrderPlaced { pub order: String }
/// # impl Message for OrderPlaced { const TYPE: &'static str = "order.placed"; }
/// # #[derive(Serialize, Deserialize)] pub struct PaymentCaptured { pub order: String }
/// # impl Message for PaymentCaptured { const TYPE: &'static str = "payment.captured"; }
/// enum CustomerEvent {
///     Placed(OrderPlaced),
///     Paid(PaymentCaptured),
/// }
///
/// impl EventSet for CustomerEvent {
///     const TYPES: &'static [&'static str] = &[OrderPlaced::TYPE, PaymentCaptured::TYPE];
///
///     fn decode(event_type: &str, payload: &[u8]) -> Result<Self, HandlerError> {
///         match event_type {
///             OrderPlaced::TYPE => OrderPlaced::decode(event_type, payload).map(Self::Placed),
///             PaymentCaptured::TYPE => {
///                 PaymentCaptured::decode(event_type, payload).map(Self::Paid)
///             }
///             other => Err(HandlerError::new(format!("`{other}` is not a customer event"))),
///         }
///     }
/// }
///
/// assert_eq!(CustomerEvent::TYPES, ["order.placed", "payment.captured"]);
/// let paid = CustomerEvent::decode("payment.captured", br#"{"order":"o-1"}"#).unwrap();
/// assert!(matches!(paid, CustomerEvent::Paid(p) if p.order == "o-1"));
/// ```
pub trait EventSet: Sized + Send + Sync + 'static {
    /// The stable type names of the set's events (each once).
    const TYPES: &'static [&'static str];

    /// The event of type `event_type` with serialized `payload`; an error if the type is not
    /// in the set or the payload does not deserialize (the error names the type).
    fn decode(event_type: &str, payload: &[u8]) -> Result<Self, HandlerError>;

    /// The version of `event_type`'s shape this code reads (its [`Message::VERSION`]), to
    /// which a payload stored at an older version is upcast before [`EventSet::decode`]. The
    /// blanket impl of a [`Message`] and [`event_set!`](crate::event_set) say it; a
    /// hand-written set of types above version 1 must too (by default every type is at 1).
    fn version_of(event_type: &str) -> u32 {
        let _ = event_type;
        crate::entity::upcast::FIRST_VERSION
    }
}

/// A stateful entity that handles commands and emits events (an event-sourced aggregate whose
/// state the framework keeps).
pub trait Aggregate: Default + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Stable name of this entity kind.
    const KIND: &'static str;
    /// The version of this state's shape, stored with it: 1 until the state type changes
    /// incompatibly. Raise it then, and register a state upcaster per older version
    /// (`.upcast_state::<Self>(from_version, …)` on the builder); a state that cannot be
    /// upcast or decoded fails its target's messages with an error naming the kind, tenant,
    /// id and version, never a silent default.
    const STATE_VERSION: u32 = crate::entity::upcast::FIRST_VERSION;
    /// Commands it accepts.
    type Command: Message;
    /// Events it emits.
    type Event: Message;

    /// Decides what a command does: the events to emit, or an error. Write it as an
    /// `async fn` (see the module docs).
    fn handle(
        &self,
        command: &Self::Command,
        cx: &Context<'_>,
    ) -> impl Future<Output = Result<Vec<Self::Event>, HandlerError>> + Send;

    /// Applies one of its own events to the state. Stays synchronous: a fold of past events
    /// must be pure and deterministic.
    fn apply(&mut self, event: &Self::Event);
}

/// A stateful read model that applies events.
pub trait Projection: Default + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Stable name of this projection kind.
    const KIND: &'static str;
    /// The version of this state's shape, stored with it: 1 until the state type changes
    /// incompatibly. Raise it then, and register a state upcaster per older version
    /// (`.upcast_state::<Self>(from_version, …)` on the builder); a state that cannot be
    /// upcast or decoded fails its target's messages with an error naming the kind, tenant,
    /// id and version, never a silent default.
    const STATE_VERSION: u32 = crate::entity::upcast::FIRST_VERSION;
    /// The events it follows: one [`Message`] type, or several as an
    /// [`event_set!`](crate::event_set) enum (a multi-stream view).
    type Event: EventSet;

    /// Which instances (ids) of this projection receive `event`. By default the one with the
    /// producer's id.
    fn route(event: &Self::Event, source: &EventSource) -> Vec<String> {
        let _ = event;
        vec![source.id.clone()]
    }

    /// Applies an event to the state. Write it as an `async fn` (see the module docs). Must be
    /// deterministic: after a failure the view is rebuilt by applying the batch's earlier
    /// events again.
    fn apply(
        &mut self,
        event: &Self::Event,
        cx: &Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

/// A stateless entity that turns events into commands for other entities.
pub trait Reactor: Send + Sync + 'static {
    /// Stable name of this reactor kind.
    const KIND: &'static str;
    /// The events it follows: one [`Message`] type, or several as an
    /// [`event_set!`](crate::event_set) enum.
    type Event: EventSet;

    /// Which instances (ids) of this reactor receive `event`. By default the one with the
    /// producer's id.
    fn route(event: &Self::Event, source: &EventSource) -> Vec<String> {
        let _ = event;
        vec![source.id.clone()]
    }

    /// The commands to send in reaction to `event`. Write it as an `async fn` (see the module
    /// docs); use [`Context::idempotency_key`] for the side effects it causes elsewhere.
    fn react(
        &self,
        event: &Self::Event,
        cx: &Context<'_>,
    ) -> impl Future<Output = Result<Vec<Outgoing>, HandlerError>> + Send;
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
    /// The version of the payload type's shape (its [`Message::VERSION`]).
    pub payload_version: u32,
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
        Self::to_kind(A::KIND, id.into(), command)
    }

    /// A command of type `C` for instance `id` of entity kind `kind`.
    pub(crate) fn to_kind<C: Message>(
        kind: &str,
        id: String,
        command: &C,
    ) -> Result<Self, HandlerError> {
        let payload = serde_json::to_vec(command).map_err(|e| {
            HandlerError::new(format!(
                "command of type `{}` does not serialize: {e}",
                C::TYPE
            ))
        })?;
        Ok(Outgoing {
            target_kind: kind.to_owned(),
            target_id: id,
            payload_type: C::TYPE.to_owned(),
            payload_version: C::VERSION,
            payload,
            delay: None,
        })
    }

    /// Delays delivery of the command by `delay`, at most 100 years
    /// ([`crate::model::time_limits::MAX_SPAN`]). A longer one fails the reaction (its
    /// failure policy decides) with an error naming `Outgoing::delayed`: never a panic, never
    /// "no delay".
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The message this becomes, sent on behalf of the message with `signal_id`'s parent; its
    /// delay checked against the time limits (an error naming the target kind and
    /// `Outgoing::delayed`).
    pub(crate) fn into_message(
        self,
        signal_id: SignalId,
        tenant: &str,
        metadata: &Metadata,
        now: DateTime<Utc>,
    ) -> Result<NewMessage, HandlerError> {
        let deliver_after = self
            .delay
            .map(|d| time_limits::after(now, d, TimeField::OutgoingDelay))
            .transpose()
            .map_err(|e| {
                HandlerError::new(format!(
                    "a command to `{}` is out of range: {e}",
                    self.target_kind
                ))
            })?;
        Ok(NewMessage {
            signal_id,
            kind: crate::model::message::MessageKind::Command,
            target_kind: self.target_kind,
            target_id: self.target_id,
            tenant: tenant.to_owned(),
            payload: self.payload,
            payload_type: self.payload_type,
            payload_version: self.payload_version,
            metadata: metadata.clone(),
            received_at: now,
            deliver_after,
            expires_at: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_out_of_range_is_an_error_naming_it_never_a_panic_or_no_delay() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let out = |delay| Outgoing {
            target_kind: "stock".into(),
            target_id: "sku-1".into(),
            payload_type: "reserve".into(),
            payload_version: 1,
            payload: b"{}".to_vec(),
            delay: Some(delay),
        };
        let id = SignalId("s".into());
        let meta = Metadata::default();
        let ok = out(Duration::from_secs(30))
            .into_message(id.clone(), "", &meta, now)
            .unwrap();
        assert_eq!(ok.deliver_after, Some(now + chrono::Duration::seconds(30)));
        for huge in [Duration::MAX, Duration::from_secs(400_000 * 365 * 86_400)] {
            let err = out(huge)
                .into_message(id.clone(), "", &meta, now)
                .unwrap_err();
            assert!(
                err.reason.contains("out of range") && err.reason.contains("stock"),
                "{err}"
            );
        }
    }
}

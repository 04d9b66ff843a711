//! Events in the event store: what a handler or a sender appends ([`NewEvent`]) and what a
//! reader gets back ([`StoredEvent`], with its global `seq`).

use crate::model::ids::SignalId;
use crate::model::message::Metadata;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who produced an event.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventSource {
    /// Entity kind of the producer (`"external"` for events posted from outside).
    pub kind: String,
    /// Id of the producer.
    pub id: String,
}

impl EventSource {
    /// The source of events posted by application code rather than by an entity.
    pub fn external(id: impl Into<String>) -> Self {
        EventSource {
            kind: "external".into(),
            id: id.into(),
        }
    }
}

/// An event to append to the event store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// Identity of the event; also the signal id of every inbox copy of it.
    pub id: SignalId,
    /// Stable name of the event's type.
    pub event_type: String,
    /// Producer.
    pub source: EventSource,
    /// Tenant.
    pub tenant: String,
    /// When it happened.
    pub occurred_at: DateTime<Utc>,
    /// Serialized payload (JSON).
    pub payload: Vec<u8>,
    /// The version of its type's shape the payload was written in (the type's
    /// [`Message::VERSION`](crate::Message::VERSION)); 1 for events stored before versions
    /// existed. Readers upcast older payloads (see [`crate::Upcasters`]).
    #[serde(default = "crate::model::upcast_error::first_version")]
    pub version: u32,
    /// Key/value metadata.
    pub metadata: Metadata,
}

/// An event as the event store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Global position; readers page by it, never by time.
    pub seq: i64,
    /// The event.
    pub event: NewEvent,
}

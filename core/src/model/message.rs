//! Messages as they travel: what a sender writes ([`NewMessage`]) and what the Inbox holds
//! ([`InboxMessage`]).
//!
//! A message is addressed to one target (entity kind + id). The payload is serde JSON bytes,
//! named by `payload_type`, so that the Inbox never needs the Rust type of what it carries.

use crate::model::attempt_errors::ErrorHistory;
use crate::model::ids::{Emitter, ShardIndex, SignalId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Free-form key/value pairs carried with a message (correlation ids, actor, trace context).
pub type Metadata = BTreeMap<String, String>;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MessageKind {
    /// A command for one target.
    Command,
    /// One subscriber's copy of an event.
    Event,
    /// A historical event replayed by a catch-up.
    CatchUp,
}

impl MessageKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Command => "command",
            MessageKind::Event => "event",
            MessageKind::CatchUp => "catch_up",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "command" => MessageKind::Command,
            "event" => MessageKind::Event,
            "catch_up" => MessageKind::CatchUp,
            _ => return None,
        })
    }
}

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MessageStatus {
    /// Waiting for delivery (possibly not yet due).
    ToDeliver,
    /// Delivered; kept until `keep_until` so that duplicates are recognised.
    Delivered,
    /// Replayed history waiting for a catch-up to deliver it.
    ToCatchUp,
    /// Exhausted its attempts under a `block` policy: never read by pages; its target's later
    /// messages wait until an operator requeues or drops it.
    Blocked,
}

impl MessageStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::ToDeliver => "to_deliver",
            MessageStatus::Delivered => "delivered",
            MessageStatus::ToCatchUp => "to_catch_up",
            MessageStatus::Blocked => "blocked",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "to_deliver" => MessageStatus::ToDeliver,
            "delivered" => MessageStatus::Delivered,
            "to_catch_up" => MessageStatus::ToCatchUp,
            "blocked" => MessageStatus::Blocked,
            _ => return None,
        })
    }
}

/// The key under which duplicates are recognised: the same signal to the same target of the
/// same tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DedupKey {
    /// Tenant of the target.
    pub tenant: String,
    /// Entity kind of the target.
    pub target_kind: String,
    /// Id of the target.
    pub target_id: String,
    /// The signal.
    pub signal_id: SignalId,
}

impl DedupKey {
    /// Its target as the emitter of what its handler emits (see [`SignalId::emitted`]).
    pub fn emitter(&self) -> Emitter<'_> {
        Emitter {
            kind: &self.target_kind,
            tenant: &self.tenant,
            id: &self.target_id,
        }
    }

    /// The id of the `n`-th `part` its target's handler emits while handling it: the same as
    /// [`NewMessage::emitted_id`] of the message it keys.
    pub fn emitted_id(&self, part: &str, n: usize) -> SignalId {
        SignalId::emitted(&self.signal_id, self.emitter(), part, n)
    }
}

impl fmt::Display for DedupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}/{}#{}",
            self.tenant, self.target_kind, self.target_id, self.signal_id
        )
    }
}

/// A message as a sender writes it, before it has a shard and a place in the Inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewMessage {
    /// Identity of the signal; a second write of it to the same target is ignored.
    pub signal_id: SignalId,
    /// Command, event copy or catch-up replay.
    pub kind: MessageKind,
    /// Entity kind of the target.
    pub target_kind: String,
    /// Id of the target within its kind.
    pub target_id: String,
    /// Tenant; the empty string for single-tenant applications.
    pub tenant: String,
    /// Serialized payload (JSON).
    pub payload: Vec<u8>,
    /// Stable name of the payload's type (see [`crate::Message::TYPE`]).
    pub payload_type: String,
    /// The version of the payload type's shape it was written in (see
    /// [`crate::Message::VERSION`]); 1 for rows stored before versions existed. An event's
    /// copy keeps its event's version; readers upcast older payloads (see
    /// [`crate::Upcasters`]).
    #[serde(default = "crate::model::upcast_error::first_version")]
    pub payload_version: u32,
    /// Key/value metadata.
    pub metadata: Metadata,
    /// When the sender handed the message over.
    pub received_at: DateTime<Utc>,
    /// Not delivered before this time (delayed delivery, retry back-off).
    pub deliver_after: Option<DateTime<Utc>>,
    /// Not delivered after this time (time to live).
    pub expires_at: Option<DateTime<Utc>>,
}

impl NewMessage {
    /// The status a new row of this message starts in: `to_catch_up` for replayed history,
    /// `to_deliver` otherwise.
    pub fn fresh_status(&self) -> MessageStatus {
        match self.kind {
            MessageKind::CatchUp => MessageStatus::ToCatchUp,
            MessageKind::Command | MessageKind::Event => MessageStatus::ToDeliver,
        }
    }

    /// Its target as the emitter of what its handler emits (see [`SignalId::emitted`]).
    pub fn emitter(&self) -> Emitter<'_> {
        Emitter {
            kind: &self.target_kind,
            tenant: &self.tenant,
            id: &self.target_id,
        }
    }

    /// The id of the `n`-th `part` (`"event"`, `"command"`, ..) its target's handler emits
    /// while handling it: [`SignalId::emitted`] of its signal and its target.
    pub fn emitted_id(&self, part: &str, n: usize) -> SignalId {
        SignalId::emitted(&self.signal_id, self.emitter(), part, n)
    }

    /// The key under which duplicates of this message are recognised.
    pub fn dedup_key(&self) -> DedupKey {
        DedupKey {
            tenant: self.tenant.clone(),
            target_kind: self.target_kind.clone(),
            target_id: self.target_id.clone(),
            signal_id: self.signal_id.clone(),
        }
    }
}

/// A message written to a shard: the unit the Inbox stores.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxWrite {
    /// The shard the target belongs to.
    pub shard: ShardIndex,
    /// The message.
    pub message: NewMessage,
}

/// One row of the Inbox, as a stage reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxMessage {
    /// Position in the Inbox: insertion order, monotonic, unique. Delivery order is `seq` order.
    pub seq: i64,
    /// The shard of the target.
    pub shard: ShardIndex,
    /// Where the message is in its life.
    pub status: MessageStatus,
    /// Delivery attempts that failed so far.
    pub attempts: u32,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// When the first failed attempt failed (kept across retries, cleared by a requeue).
    pub first_failed_at: Option<DateTime<Utc>>,
    /// The errors of its last failed attempts, oldest first (cleared by a requeue). A dead
    /// letter's original row carries the attempt that killed it too.
    pub errors: ErrorHistory,
    /// For delivered rows: kept until this time for deduplication.
    pub keep_until: Option<DateTime<Utc>>,
    /// The message as it was written.
    pub message: NewMessage,
}

impl InboxMessage {
    /// A row just written at `seq` in `shard`: never attempted, in the status its kind starts
    /// in (see [`NewMessage::fresh_status`]). Every backend and station makes new rows here.
    pub fn fresh(seq: i64, shard: ShardIndex, message: NewMessage) -> Self {
        InboxMessage {
            seq,
            shard,
            status: message.fresh_status(),
            attempts: 0,
            last_error: None,
            first_failed_at: None,
            errors: ErrorHistory::default(),
            keep_until: None,
            message,
        }
    }

    /// The key under which duplicates of this message are recognised.
    pub fn dedup_key(&self) -> DedupKey {
        self.message.dedup_key()
    }

    /// Its error history once its next attempt (`attempts + 1`) failed at `at` with `error`:
    /// what a retry, a block or a dead letter of this row records.
    pub fn errors_after_failure(&self, at: DateTime<Utc>, error: &str) -> ErrorHistory {
        self.errors.with(at, self.attempts.saturating_add(1), error)
    }

    /// Whether the message is due at `now` (its delay or back-off has passed).
    pub fn is_due(&self, now: DateTime<Utc>) -> bool {
        self.message.deliver_after.is_none_or(|t| t <= now)
    }

    /// Whether the message's time to live has run out at `now`.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.message.expires_at.is_some_and(|t| t <= now)
    }
}

/// A command for unit tests: signal `signal` to `target_kind` instance `target_id`, received
/// at `received_at`, with an empty JSON object as payload and no delay, TTL or metadata.
#[cfg(test)]
pub(crate) fn test_command(
    signal: &str,
    target_kind: &str,
    target_id: &str,
    received_at: DateTime<Utc>,
) -> NewMessage {
    NewMessage {
        signal_id: SignalId::from(signal),
        kind: MessageKind::Command,
        target_kind: target_kind.into(),
        target_id: target_id.into(),
        tenant: String::new(),
        payload: b"{}".to_vec(),
        payload_type: "counter.command".into(),
        payload_version: 1,
        metadata: Default::default(),
        received_at,
        deliver_after: None,
        expires_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_statuses_round_trip_their_stored_names() {
        for k in [
            MessageKind::Command,
            MessageKind::Event,
            MessageKind::CatchUp,
        ] {
            assert_eq!(MessageKind::parse(k.as_str()), Some(k));
        }
        for s in [
            MessageStatus::ToDeliver,
            MessageStatus::Delivered,
            MessageStatus::ToCatchUp,
            MessageStatus::Blocked,
        ] {
            assert_eq!(MessageStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(MessageKind::parse("bogus"), None);
        assert_eq!(MessageStatus::parse(""), None);
    }
}

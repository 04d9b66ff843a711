//! What a handler is told of the message it handles ([`Context`]): its target, signal,
//! metadata and attempts, the stage's time, the application's services, and an idempotency
//! key for the calls it makes elsewhere.
//!
//! The key is derived here, by a function fixed for good (FNV-1a 128 over the target and the
//! signal): a redelivery gets the same key on any node and in any version, so an outside
//! system that deduplicates by it sees one call.

use crate::entity::handler_error::HandlerError;
use crate::entity::services::Services;
use crate::model::ids::SignalId;
use crate::model::message::Metadata;
use chrono::{DateTime, Utc};

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
    /// The application's services, given to the builder.
    pub(crate) services: &'a Services,
}

impl<'a> Context<'a> {
    /// The application's service of type `T`, given to the builder with `.service(Arc<T>)`.
    pub fn service<T: Send + Sync + 'static>(&self) -> Result<&'a T, HandlerError> {
        self.services.get::<T>().ok_or_else(|| {
            HandlerError::new(format!(
                "no service of type `{}` was given to the builder; add `.service(Arc::new(..))`",
                std::any::type_name::<T>()
            ))
        })
    }

    /// A key for the outside calls of this handling (an idempotency key for a payment API, a
    /// message id for a mailer): the same on every redelivery of this message to this target,
    /// different for every other message or target. Derived from the message's signal id and
    /// the target (kind, tenant, id); 36 characters (`sbx-` and 32 hex digits).
    pub fn idempotency_key(&self) -> String {
        idempotency_key(self.kind, self.tenant, self.target_id, &self.signal_id.0)
    }
}

/// FNV-1a over the parts, each ended by a zero byte so that no two part lists collide by
/// concatenation. 128 bits: collisions are out of reach for any realistic message count, and
/// the function is fixed here, so the key never changes between versions or processes.
fn idempotency_key(kind: &str, tenant: &str, target: &str, signal: &str) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut hash = OFFSET;
    for part in [kind, tenant, target, signal] {
        for &byte in part.as_bytes().iter().chain(&[0u8]) {
            hash ^= u128::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    format!("sbx-{hash:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_stable_and_tell_targets_and_signals_apart() {
        let key = idempotency_key("payment", "t", "p-1", "sig-1");
        assert_eq!(key, idempotency_key("payment", "t", "p-1", "sig-1"));
        assert_eq!(key.len(), 36);
        assert!(key.starts_with("sbx-"));
        let others = [
            idempotency_key("payment", "t", "p-1", "sig-2"),
            idempotency_key("payment", "t", "p-2", "sig-1"),
            idempotency_key("mailer", "t", "p-1", "sig-1"),
            idempotency_key("payment", "u", "p-1", "sig-1"),
            // No collision by moving a boundary between parts.
            idempotency_key("payment", "tp", "-1", "sig-1"),
        ];
        for other in others {
            assert_ne!(key, other);
        }
        // Fixed function: the key of a known input never changes between versions.
        assert_eq!(key, KNOWN_KEY);
    }

    // FNV-1a 128 of "payment\0t\0p-1\0sig-1\0", computed independently.
    const KNOWN_KEY: &str = "sbx-b7d63a65bfae020b86addff8fc32a810";
}

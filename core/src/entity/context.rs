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

/// SHA-256 over the parts, each preceded by its length (so that no two part lists give one
/// input), after a tag of its own (so that no other hash of the same parts is this one), cut
/// to 128 bits. A cryptographic hash because callers choose the parts (signal and target
/// ids): the FNV-1a used until issue 37 let them craft two targets with one key, and the
/// outside system then dropped the second target's call as a repeat. 128 bits keep the
/// documented 36-character form; a collision would cost about 2^64 SHA-256 evaluations. The
/// function is fixed here, so the key never changes between processes (docs/guarantees.md
/// says what an upgrade from the FNV-1a key means for calls in flight).
fn idempotency_key(kind: &str, tenant: &str, target: &str, signal: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"shardbox idempotency key\n");
    for part in [kind, tenant, target, signal] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut key = String::with_capacity(36);
    key.push_str("sbx-");
    for byte in &digest[..16] {
        key.push_str(&format!("{byte:02x}"));
    }
    key
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

    /// The FNV-1a 128 key used until issue 37, kept here to show the crafted collision.
    fn fnv_key(kind: &str, tenant: &str, target: &str, signal: &str) -> u128 {
        let mut hash: u128 = 0x6c62272e07bb014262b821756295c58d;
        for part in [kind, tenant, target, signal] {
            for &byte in part.as_bytes().iter().chain(&[0u8]) {
                hash ^= u128::from(byte);
                hash = hash.wrapping_mul(0x0000000001000000000000000000013B);
            }
        }
        hash
    }

    /// `base` with each two-byte slot after its two-byte prefix that `mask` marks `side` made
    /// one two-byte character (bit 7 set on both bytes: `"B0"` becomes `"°"`).
    fn toggled(base: &str, mask: &str, side: char) -> String {
        let mut bytes = base.as_bytes().to_vec();
        for (slot, mark) in mask.chars().enumerate() {
            if mark == side {
                bytes[2 + 2 * slot] |= 0x80;
                bytes[3 + 2 * slot] |= 0x80;
            }
        }
        String::from_utf8(bytes).expect("a lead byte and a continuation byte")
    }

    /// Two (target, signal) pairs crafted so that the FNV-1a 128 key of issue 37's time was
    /// one value (`sbx-e7fa8eb37fd0d615fc4d2a84c7902d86`): a caller who chose both made one
    /// payment's outside call look like a repeat of another's, and the outside system dropped
    /// it. Found in three minutes on one core: toggling bit 7 of two neighbouring bytes keeps
    /// FNV-1a's low byte, so each toggle adds a fixed amount to the hash; with each of 416
    /// slots toggled in one pair, the other or neither, Wagner's k-tree algorithm (32 lists of
    /// 3^13) found choices that sum to zero modulo 2^128. The SHA-256 key keeps them apart.
    #[test]
    fn crafted_targets_that_collided_under_the_fnv_key_get_distinct_keys() {
        let (one, two) = (
            (
                toggled(CRAFTED_TARGET, CRAFTED_TARGET_MASK, '+'),
                toggled(CRAFTED_SIGNAL, CRAFTED_SIGNAL_MASK, '+'),
            ),
            (
                toggled(CRAFTED_TARGET, CRAFTED_TARGET_MASK, '-'),
                toggled(CRAFTED_SIGNAL, CRAFTED_SIGNAL_MASK, '-'),
            ),
        );
        assert_ne!(one.0, two.0, "two targets");
        assert!(
            one.0.len() <= 512 && one.1.len() <= 512,
            "ids within the limits"
        );
        assert_eq!(
            fnv_key("payment", "", &one.0, &one.1),
            fnv_key("payment", "", &two.0, &two.1),
            "the crafted pairs collide under the old key"
        );
        assert_ne!(
            idempotency_key("payment", "", &one.0, &one.1),
            idempotency_key("payment", "", &two.0, &two.1)
        );
    }

    const CRAFTED_TARGET: &str = concat!(
        "p-P4G0T5S0N2R3D0J3L7W7D7E8Y2O3T3V9V6T4B9Z2K0M8V8I3N0W7P2L6O9H8H8T1I7U1B8X9N2D7F0",
        "I4M9N2Y9Z2J1Z0S8J8H7Q4S1J0Y5Z7H5W2Z9K0Q7L8C8R0Y1R0Q3V2Y3C8T3R3T8P0K2G3I7I7J3Z4V4",
        "G8J9S8U5D8Q9O6N5K0X4Z6G1P8S5R3Z1L6R5V2B5O4N7E7H9X7X7O1X7U9H4R4W9V8H1L1K6J8W7I4C3",
        "W0Y5B1P8C9C3M1R1P8Z7L1F9N0R5U9E7L6J5C6W7V1M1B5T4N3Y7Z1F2U8T1G0R4M2S6N0M9Z4O8I0F8",
        "O7I1P5U4T4O6I1U0C0M3I5I9Q2D7Y5D2H2M3U2O4E3C9D0E0B1O0O0Y0H1E2R5P8N3V6L7C8J6I4V3J3",
        "Z6S9T0C2Q5H7E4Q2E5",
    );
    const CRAFTED_TARGET_MASK: &str = concat!(
        ".-+--+.++....+...--.--..-+++.+++.+---+-.----...+---+-.+----.++.++-+..-+.+++-+++.",
        "..+-+-++-+++.-+++--...+..++-++..+..-+..+-.....+.+...+--..-+...+...+..---.+-.--+-",
        ".++.-..-+...-..--.+++---+.-.-++.+-+++.++-.+.---+",
    );
    const CRAFTED_SIGNAL: &str = concat!(
        "s-S5C6L7F4E1X0F4R2B8F2M1W7F5H1P0U2K6W5Y7J5N0N9Y4R9H6G1I0Z9Q7M2J9N5C1R3C0L5D8Q4P4",
        "U9B9H6K1J0Y8H6R7G7B8J3O7D4B0J3Z0F8G0K1W6M9T0O0P4D0E8C0H5V8O2G4J8R2X4U5H2Y2Y9H1Q8",
        "L9J8P4C7F7D5Q5Z0K2Q8G9O0U3J5Z8F8Z9M8Q7I2M4I9Z8F3B6B1K7B3I7L5M2P2I1O6C8X5U7G0D0C4",
        "G2P8M1G4L5M6O1G5S3G4U6F3Y3K2L6V1V1C3K5R1B7J4L3G5I1K8M8H7P7C6P1F7B0Y6R2Y6Z2Z0G3V6",
        "Y6G9X8R6V1T1P7H4X1U4K9U2T1I4L8S2N9D7K7P6E9N5N2G5B6E4R8X1J8I2N3J4M3G5K3F5K9N3O7T0",
        "P2S9P5R6H6P3K4S8J3",
    );
    const CRAFTED_SIGNAL_MASK: &str = concat!(
        "...++.-++..++.++.+-+.+---.-+++.+-.--.-..++-..++--+...-..--.+...-++-..-+-.++-...-",
        "+.-.-+...++.++.+..++.+-+++++-.....--+.-.+-.....++++-++-.-++..--.++....-..--.--.-",
        "----.-+-.+--+.++-+.+..-..+-.-+----+-+....--.+-+-",
    );

    // SHA-256 of "shardbox idempotency key\n" and each of "payment", "t", "p-1", "sig-1"
    // after its length (8 bytes, little-endian), its first 16 bytes in hex; computed
    // independently (Python's hashlib). Until issue 37: FNV-1a 128 of
    // "payment\0t\0p-1\0sig-1\0", `sbx-b7d63a65bfae020b86addff8fc32a810`.
    const KNOWN_KEY: &str = "sbx-779fbfe7e6d597518c0423f38ef18d96";
}

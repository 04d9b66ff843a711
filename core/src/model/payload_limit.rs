//! The limit of a payload's size ([`DeliveryConfig::max_payload_bytes`]), checked wherever a
//! payload enters the Inbox or the event store.
//!
//! ```text
//!  send, send_many, send_message ─┐
//!  post, post_many, post_event ───┼─► serialized payload ≤ max_payload_bytes? ──► written
//!  a handler's events and commands┘        └─ no: PayloadTooLarge { payload_type, size, limit }
//!     send / post:  DeliveryError::PayloadTooLarge, nothing written
//!     a handler's:  the handled message fails permanently; its kind's failure policy decides
//! ```
//!
//! Why a limit: a payload is held whole by its sender, the group write, every stage that
//! reads its row and every handler call, and a posted event is copied into the row of each
//! subscriber; one huge payload grows the memory of every node that touches it and the
//! transaction that writes it, without bound. Large data belongs elsewhere (an object store,
//! a table of its own), with a reference to it in the message.
//!
//! Only the payload counts (metadata and ids have their own limits, see
//! [`crate::model::ids`]). Pure checks, no I/O.
//!
//! [`DeliveryConfig::max_payload_bytes`]: crate::DeliveryConfig::max_payload_bytes

use thiserror::Error;

/// The default [`DeliveryConfig::max_payload_bytes`](crate::DeliveryConfig::max_payload_bytes):
/// 1 MiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The smallest limit a configuration may set: 256 bytes.
pub const MIN_PAYLOAD_LIMIT: usize = 256;

/// The largest limit a configuration may set: 256 MiB (PostgreSQL stores at most 1 GB in a
/// field, and a posted event's payload is written once per subscriber in one transaction).
pub const MAX_PAYLOAD_LIMIT: usize = 256 << 20;

/// A payload over the limit.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("payload of type `{payload_type}` is {size} bytes, over the limit of {limit} bytes (max_payload_bytes): send a reference to large data (a key, a URL) instead of the data, or raise max_payload_bytes")]
pub struct PayloadTooLarge {
    /// The payload's type name.
    pub payload_type: String,
    /// Its serialized size in bytes.
    pub size: usize,
    /// The limit, `max_payload_bytes`.
    pub limit: usize,
}

/// Checks a serialized payload of type `payload_type` against `limit`.
///
/// ```
/// use shardbox_core::{check_payload, PayloadTooLarge};
/// assert!(check_payload("order.placed", b"{}", 256).is_ok());
/// let err = check_payload("order.placed", &[b' '; 300], 256).unwrap_err();
/// assert_eq!((err.size, err.limit), (300, 256));
/// assert!(err.to_string().contains("300 bytes, over the limit of 256 bytes"));
/// ```
pub fn check_payload(
    payload_type: &str,
    payload: &[u8],
    limit: usize,
) -> Result<(), PayloadTooLarge> {
    if payload.len() <= limit {
        Ok(())
    } else {
        Err(PayloadTooLarge {
            payload_type: payload_type.to_owned(),
            size: payload.len(),
            limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_at_the_limit_passes_and_one_byte_more_names_size_and_limit() {
        assert_eq!(check_payload("t", &[0; 1024], 1024), Ok(()));
        let err = check_payload("t", &[0; 1025], 1024).unwrap_err();
        assert_eq!(
            err,
            PayloadTooLarge {
                payload_type: "t".into(),
                size: 1025,
                limit: 1024
            }
        );
        let text = err.to_string();
        for words in [
            "`t`",
            "1025 bytes",
            "limit of 1024 bytes",
            "max_payload_bytes",
        ] {
            assert!(text.contains(words), "{text}");
        }
    }
}

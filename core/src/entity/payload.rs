//! Typed reads of stored payloads: a message's, an event's or a dead letter's payload as its
//! [`Message`] type, for operators and tests (a handler's own decoding is the adapters', in
//! `handler`).
//!
//! ```text
//!  stored type name == T::TYPE ?  no ─► PayloadError::WrongType { stored, expected }
//!        yes ─► upcast to T::VERSION (upcast.rs) ─► or PayloadError::Upcast (names the version)
//!            ─► serde_json ─► T   or ─► PayloadError::Undecodable (the serde error kept)
//! ```
//!
//! The type name is checked first, so that a payload of another type that happens to
//! deserialize (two enums with a variant of the same name) is refused rather than misread.

use crate::entity::traits::Message;
use crate::entity::upcast::Upcasters;
use crate::model::error::PayloadError;
use crate::model::event::NewEvent;
use crate::model::message::NewMessage;
use crate::storage::DeadLetter;

/// `payload`, stored with the type name `stored` at `version`, as the values of `T` it stands
/// for at `T::VERSION`: upcast by `upcasters` if it is older (one value, several after a
/// split, none if retired).
fn upcast_as<T: Message>(
    stored: &str,
    version: u32,
    payload: &[u8],
    upcasters: &Upcasters,
) -> Result<Vec<T>, PayloadError> {
    if stored != T::TYPE {
        return Err(PayloadError::WrongType {
            stored: stored.to_owned(),
            expected: T::TYPE,
        });
    }
    upcasters
        .upcast(stored, version, T::VERSION, payload)?
        .iter()
        .map(|part| {
            serde_json::from_slice(part).map_err(|source| PayloadError::Undecodable {
                expected: T::TYPE,
                source,
            })
        })
        .collect()
}

/// `payload`, stored with the type name `stored` at `version`, as a `T`: only at `T::VERSION`
/// (no upcaster is at hand; an older payload is
/// [`UpcastError::Missing`](crate::UpcastError::Missing), naming its version).
fn payload_as<T: Message>(stored: &str, version: u32, payload: &[u8]) -> Result<T, PayloadError> {
    let mut values = upcast_as(stored, version, payload, &Upcasters::new())?;
    // At T::VERSION the payload is passed through: one value.
    Ok(values.remove(0))
}

impl NewMessage {
    /// The payload as a `T`, if it was written as one (its `payload_type` is `T::TYPE`) at
    /// `T::VERSION`.
    pub fn payload_as<T: Message>(&self) -> Result<T, PayloadError> {
        payload_as(&self.payload_type, self.payload_version, &self.payload)
    }
}

impl NewEvent {
    /// The event as a `T`, if it was stored as one (its `event_type` is `T::TYPE`) at
    /// `T::VERSION`; [`NewEvent::upcast_as`] reads older versions too.
    pub fn payload_as<T: Message>(&self) -> Result<T, PayloadError> {
        payload_as(&self.event_type, self.version, &self.payload)
    }

    /// The event as the values of `T` it stands for at `T::VERSION`, upcast by `upcasters`
    /// if it was stored at an older version: one, several after a split (in order), none if
    /// an upcaster retired it.
    pub fn upcast_as<T: Message>(&self, upcasters: &Upcasters) -> Result<Vec<T>, PayloadError> {
        upcast_as(&self.event_type, self.version, &self.payload, upcasters)
    }
}

impl DeadLetter {
    /// The dead message's payload as a `T` (a command or event type), checked against the
    /// stored type name; an error names both names when they differ.
    ///
    /// ```no_run
    /// # fn show(dead: &shardbox_core::storage::StoredDeadLetter) -> Result<(), shardbox_core::PayloadError> {
    /// # #[derive(serde::Serialize, serde::Deserialize, Debug)] struct Charge { amount: i64 }
    /// # impl shardbox_core::Message for Charge { const TYPE: &'static str = "payment.charge"; }
    /// // `dead` from `Shardbox::dead_letters(..)`.
    /// let charge: Charge = dead.letter.payload_as()?;
    /// println!("{charge:?}: {}", dead.letter.reason);
    /// # Ok(()) }
    /// ```
    pub fn payload_as<T: Message>(&self) -> Result<T, PayloadError> {
        self.original.message.payload_as()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::upcast::UpcastError;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Charge {
        Card(i64),
    }
    impl Message for Charge {
        const TYPE: &'static str = "payment.charge";
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Refund {
        Card(i64),
    }
    impl Message for Refund {
        const TYPE: &'static str = "payment.refund";
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Named {
        full_name: String,
    }
    impl Message for Named {
        const TYPE: &'static str = "customer.named";
        const VERSION: u32 = 2;
    }

    #[test]
    fn an_older_payload_is_read_through_the_upcasters_or_refused_naming_its_version() {
        let v1 = br#"{"name":"Ada"}"#;
        let err = payload_as::<Named>("customer.named", 1, v1).unwrap_err();
        assert!(
            matches!(
                err,
                PayloadError::Upcast(UpcastError::Missing { version: 1, .. })
            ),
            "{err:?}"
        );
        let mut upcasters = Upcasters::new();
        upcasters
            .register("customer.named", 1, |v| {
                Ok(vec![serde_json::json!({"full_name": v["name"]})])
            })
            .unwrap();
        assert_eq!(
            upcast_as::<Named>("customer.named", 1, v1, &upcasters).unwrap(),
            [Named {
                full_name: "Ada".into()
            }]
        );
    }

    #[test]
    fn a_payload_is_read_as_its_own_type_only() {
        let bytes = serde_json::to_vec(&Charge::Card(5)).unwrap();
        assert_eq!(
            payload_as::<Charge>("payment.charge", 1, &bytes).unwrap(),
            Charge::Card(5)
        );
        // The same bytes would deserialize as a Refund: the type name refuses it.
        let err = payload_as::<Refund>("payment.charge", 1, &bytes).unwrap_err();
        assert!(
            matches!(&err, PayloadError::WrongType { stored, expected: "payment.refund" } if stored == "payment.charge"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("`payment.charge`") && text.contains("`payment.refund`"),
            "{text}"
        );
        let err = payload_as::<Charge>("payment.charge", 1, b"{\"Cash\":1}").unwrap_err();
        assert!(
            matches!(
                err,
                PayloadError::Undecodable {
                    expected: "payment.charge",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            std::error::Error::source(&err).is_some(),
            "the serde error is kept"
        );
    }
}

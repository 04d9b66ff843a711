//! The events a subscriber follows: an [`EventSet`] (declared in [`crate::entity::traits`]) is
//! one event type or several, each known by its stable type name, decoded from (type name,
//! payload). This file holds the set of one every [`Message`] is, and [`event_set!`](crate::event_set)
//! for enums of several.
//!
//! ```text
//!  one Message type M      ─► EventSet with TYPES = [M::TYPE]   (blanket impl, nothing to write)
//!  event_set! { enum E { A(OrderEvent), B(PaymentEvent) } }
//!                          ─► EventSet with TYPES = [OrderEvent::TYPE, PaymentEvent::TYPE];
//!                             a stored event of type OrderEvent::TYPE decodes as E::A(..)
//! ```
//!
//! The registry subscribes a kind to every type of its set, so `post` fans each of them out to
//! it, and a catch-up replays all of them in `seq` order. This module only names and decodes
//! the set; routing stays with the entity traits.

use crate::entity::handler_error::HandlerError;
use crate::entity::traits::{EventSet, Message};

/// Every [`Message`] type is an event set of one.
impl<M: Message> EventSet for M {
    const TYPES: &'static [&'static str] = &[M::TYPE];

    fn decode(event_type: &str, payload: &[u8]) -> Result<Self, HandlerError> {
        if event_type != M::TYPE {
            return Err(HandlerError::new(format!(
                "payload type `{event_type}` is not accepted here (expected `{}`)",
                M::TYPE
            )));
        }
        serde_json::from_slice(payload).map_err(|e| {
            HandlerError::new(format!(
                "payload of type `{}` does not deserialize: {e}",
                M::TYPE
            ))
        })
    }

    fn version_of(_event_type: &str) -> u32 {
        M::VERSION
    }
}

/// Declares an enum of event types and its [`EventSet`] impl: one variant per [`Message`]
/// type, each decoded from events of that type.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use shardbox_core::{event_set, EventSet, Message};
/// # #[derive(Debug, Serialize, Deserialize)] pub enum OrderEvent { Placed { total: i64 } }
/// # impl Message for OrderEvent { const TYPE: &'static str = "order.event"; }
/// # #[derive(Debug, Serialize, Deserialize)] pub enum PaymentEvent { Captured { amount: i64 } }
/// # impl Message for PaymentEvent { const TYPE: &'static str = "payment.event"; }
/// event_set! {
///     /// What the customer view follows.
///     #[derive(Debug)]
///     pub enum CustomerEvent {
///         Order(OrderEvent),
///         Payment(PaymentEvent),
///     }
/// }
///
/// assert_eq!(CustomerEvent::TYPES, ["order.event", "payment.event"]);
/// let e = CustomerEvent::decode("payment.event", br#"{"Captured":{"amount":5}}"#).unwrap();
/// assert!(matches!(e, CustomerEvent::Payment(PaymentEvent::Captured { amount: 5 })));
/// assert!(CustomerEvent::decode("stock.event", b"{}").is_err());
/// ```
#[macro_export]
macro_rules! event_set {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident($ty:ty) ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant($ty), )+
        }

        impl $crate::EventSet for $name {
            const TYPES: &'static [&'static str] = &[$( <$ty as $crate::Message>::TYPE ),+];

            fn decode(
                event_type: &str,
                payload: &[u8],
            ) -> ::core::result::Result<Self, $crate::HandlerError> {
                $(
                    if event_type == <$ty as $crate::Message>::TYPE {
                        return <$ty as $crate::EventSet>::decode(event_type, payload)
                            .map($name::$variant);
                    }
                )+
                Err($crate::HandlerError::new(format!(
                    "event type `{}` is not in the set `{}` (it takes {})",
                    event_type,
                    stringify!($name),
                    <Self as $crate::EventSet>::TYPES.join(", "),
                )))
            }

            fn version_of(event_type: &str) -> u32 {
                $(
                    if event_type == <$ty as $crate::Message>::TYPE {
                        return <$ty as $crate::Message>::VERSION;
                    }
                )+
                1
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Placed(u32);
    impl Message for Placed {
        const TYPE: &'static str = "test.placed";
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Paid(u32);
    impl Message for Paid {
        const TYPE: &'static str = "test.paid";
    }

    crate::event_set! {
        #[derive(Debug, PartialEq)]
        enum Both {
            Placed(Placed),
            Paid(Paid),
        }
    }

    #[test]
    fn a_message_is_a_set_of_one() {
        assert_eq!(<Placed as EventSet>::TYPES, ["test.placed"]);
        assert_eq!(
            <Placed as EventSet>::decode("test.placed", b"7"),
            Ok(Placed(7))
        );
        let wrong = <Placed as EventSet>::decode("test.paid", b"7").unwrap_err();
        assert!(wrong.reason.contains("test.paid"), "{wrong}");
    }

    #[test]
    fn an_enum_set_decodes_each_type_into_its_variant_and_names_what_it_refuses() {
        assert_eq!(Both::TYPES, ["test.placed", "test.paid"]);
        assert_eq!(
            Both::decode("test.placed", b"1"),
            Ok(Both::Placed(Placed(1)))
        );
        assert_eq!(Both::decode("test.paid", b"2"), Ok(Both::Paid(Paid(2))));
        let foreign = Both::decode("test.shipped", b"3").unwrap_err();
        assert!(
            foreign.reason.contains("test.shipped") && foreign.reason.contains("Both"),
            "{foreign}"
        );
        let broken = Both::decode("test.paid", b"\"x\"").unwrap_err();
        assert!(broken.reason.contains("test.paid"), "{broken}");
    }
}

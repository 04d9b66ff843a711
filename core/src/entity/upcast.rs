//! Schema evolution of stored payloads and states: the [`Upcasters`] of an application, by
//! (payload type, version) and (entity kind, state version), and the functions every read
//! path calls before it decodes one ([`Upcasters::upcast`], [`Upcasters::upcast_state`]).
//!
//! ```text
//!  stored (type, version v, payload)     the code's version c of the type (Message::VERSION)
//!        v == c ─► the payload as it is (no parse: the path of an application that never
//!                  versioned a type costs nothing)
//!        v >  c ─► UpcastError::Newer   (a newer node wrote it: a transient failure, retried
//!                  until a node of the newer code handles it)
//!        v <  c ─► JSON ─► step (type, v) ─► step (type, v+1) ─► … ─► step (type, c-1)
//!                  each step maps one value to zero, one or several values of the next
//!                  version (a rename: one; a split: several, in order; a retired event: none)
//!                  a missing step ─► UpcastError::Missing; a failing one ─► UpcastError::Failed
//! ```
//!
//! A step keeps the payload's type: the stored type name decides who subscribed to the event
//! (fan-out, catch-up reads), so an event split in two becomes two values of the same type
//! (two variants of an enum, say), never an event of another type.
//!
//! A state is upcast the same way, by the steps of its kind, into exactly one state.
//!
//! This module only maps bytes to bytes; it does no I/O and knows nothing of inbox rows or
//! events. Who calls it: the adapters' decoding (`target_batch`, live delivery and catch-up
//! alike), routing (`EntityRegistry::fan_out`, the catch-up's replay), and the typed event
//! reads of the facade.

use crate::model::error::ConfigError;
pub use crate::model::upcast_error::{Shape, UpcastError, FIRST_VERSION};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// One upcasting step: a payload of version `n` (as JSON) to the payloads of version `n + 1`
/// it becomes, or why it cannot be.
pub type UpcastStep = dyn Fn(Value) -> Result<Vec<Value>, String> + Send + Sync;

/// The upcasters of an application, registered per (payload type, version they read).
///
/// ```
/// use serde_json::json;
/// use shardbox_core::Upcasters;
///
/// let mut upcasters = Upcasters::new();
/// // v1 of `order.event` called the total `amount`.
/// upcasters
///     .register("order.event", 1, |mut v| {
///         if let Some(placed) = v.get_mut("Placed").and_then(|p| p.as_object_mut()) {
///             if let Some(amount) = placed.remove("amount") {
///                 placed.insert("total".into(), amount);
///             }
///         }
///         Ok(vec![v])
///     })
///     .unwrap();
/// let parts = upcasters
///     .upcast("order.event", 1, 2, br#"{"Placed":{"amount":5}}"#)
///     .unwrap();
/// assert_eq!(parts, [br#"{"Placed":{"total":5}}"#.to_vec()]);
/// ```
#[derive(Clone, Default)]
pub struct Upcasters {
    steps: HashMap<(Shape, u32), Arc<UpcastStep>>,
}

impl fmt::Debug for Upcasters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<_> = self.steps.keys().collect();
        keys.sort();
        f.debug_struct("Upcasters").field("steps", &keys).finish()
    }
}

impl Upcasters {
    /// No upcasters: every payload must be stored at the version the code reads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the step that turns a payload of type `payload_type` at `from_version` into
    /// the payloads of version `from_version + 1` (one for a rename, several for a split, in
    /// order; none to retire it). One step per (type, version); version 0 does not exist.
    pub fn register<F>(
        &mut self,
        payload_type: &str,
        from_version: u32,
        step: F,
    ) -> Result<(), ConfigError>
    where
        F: Fn(Value) -> Result<Vec<Value>, String> + Send + Sync + 'static,
    {
        self.insert(
            Shape::Payload(payload_type.to_owned()),
            from_version,
            Arc::new(step),
        )
    }

    /// Registers the step that turns a framework-kept state of entity kind `kind` at
    /// `from_version` into its state at `from_version + 1` (exactly one: the step returns
    /// `Ok(vec![state])`). One step per (kind, version); version 0 does not exist.
    pub fn register_state<F>(
        &mut self,
        kind: &str,
        from_version: u32,
        step: F,
    ) -> Result<(), ConfigError>
    where
        F: Fn(Value) -> Result<Vec<Value>, String> + Send + Sync + 'static,
    {
        self.insert(Shape::State(kind.to_owned()), from_version, Arc::new(step))
    }

    fn insert(
        &mut self,
        what: Shape,
        from_version: u32,
        step: Arc<UpcastStep>,
    ) -> Result<(), ConfigError> {
        if from_version < FIRST_VERSION {
            return Err(ConfigError::Invalid {
                field: "upcast",
                value: format!("{what} version {from_version}"),
                reason:
                    "versions start at 1 (what was written before versions existed is version 1)",
            });
        }
        let key = (what, from_version);
        if self.steps.contains_key(&key) {
            return Err(ConfigError::Invalid {
                field: "upcast",
                value: format!("{} version {from_version}", key.0),
                reason:
                    "an upcaster of this version is registered already; register one per version",
            });
        }
        self.steps.insert(key, step);
        Ok(())
    }

    /// Whether no upcaster is registered.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// `payload`, stored as type `payload_type` at version `stored`, as the payloads of
    /// version `current` it becomes, in order: the payload itself if the versions match
    /// (borrowed, not parsed), else the result of the registered steps `stored`,
    /// `stored + 1`, …, `current - 1`.
    pub fn upcast<'p>(
        &self,
        payload_type: &str,
        stored: u32,
        current: u32,
        payload: &'p [u8],
    ) -> Result<Vec<Cow<'p, [u8]>>, UpcastError> {
        self.run(
            Shape::Payload(payload_type.to_owned()),
            stored,
            current,
            payload,
        )
    }

    /// The state of entity kind `kind`, stored at version `stored`, as the one state of
    /// version `current` it becomes (itself, not parsed, if the versions match).
    pub fn upcast_state<'p>(
        &self,
        kind: &str,
        stored: u32,
        current: u32,
        state: &'p [u8],
    ) -> Result<Cow<'p, [u8]>, UpcastError> {
        let what = Shape::State(kind.to_owned());
        let mut states = self.run(what.clone(), stored, current, state)?;
        match states.len() {
            1 => Ok(states.remove(0)),
            n => Err(UpcastError::NotOneState {
                what,
                version: stored,
                states: n,
            }),
        }
    }

    /// The steps of `what` from `stored` to `current`, applied in order.
    fn run<'p>(
        &self,
        what: Shape,
        stored: u32,
        current: u32,
        bytes: &'p [u8],
    ) -> Result<Vec<Cow<'p, [u8]>>, UpcastError> {
        if stored == current {
            return Ok(vec![Cow::Borrowed(bytes)]);
        }
        if stored > current {
            return Err(UpcastError::Newer {
                what,
                stored,
                current,
            });
        }
        let first: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                return Err(UpcastError::NotJson {
                    what,
                    version: stored,
                    reason: e.to_string(),
                })
            }
        };
        let mut values = vec![first];
        let mut key = (what, stored);
        for version in stored..current {
            key.1 = version;
            let Some(step) = self.steps.get(&key) else {
                return Err(UpcastError::Missing {
                    what: key.0,
                    version,
                    next: version + 1,
                    current,
                });
            };
            let mut next = Vec::with_capacity(values.len());
            for value in values {
                match step(value) {
                    Ok(parts) => next.extend(parts),
                    Err(reason) => {
                        return Err(UpcastError::Failed {
                            what: key.0,
                            version,
                            reason,
                        })
                    }
                }
            }
            values = next;
        }
        // A `Value` always serializes (its map keys are strings).
        Ok(values
            .iter()
            .map(|v| Cow::Owned(v.to_string().into_bytes()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// v1 `{"name"}` ─► v2 `{"full_name"}`; v2 `{"full_name","address"}` splits into two
    /// values of v3.
    fn chain() -> Upcasters {
        let mut u = Upcasters::new();
        u.register("customer.event", 1, |mut v| {
            let name = v
                .as_object_mut()
                .and_then(|o| o.remove("name"))
                .ok_or("no `name`")?;
            v["full_name"] = name;
            Ok(vec![v])
        })
        .unwrap();
        u.register("customer.event", 2, |v| {
            Ok(vec![
                json!({"Named": {"full_name": v["full_name"]}}),
                json!({"Moved": {"address": v["address"]}}),
            ])
        })
        .unwrap();
        u
    }

    fn values(parts: Vec<Cow<'_, [u8]>>) -> Vec<Value> {
        parts
            .iter()
            .map(|p| serde_json::from_slice(p).unwrap())
            .collect()
    }

    #[test]
    fn a_payload_at_the_current_version_is_passed_through_unparsed() {
        let parts = Upcasters::new().upcast("t", 3, 3, b"not json").unwrap();
        assert!(matches!(&parts[..], [Cow::Borrowed(b"not json")]));
    }

    #[test]
    fn steps_run_in_version_order_and_a_split_yields_its_parts_in_order() {
        let u = chain();
        let v1 = br#"{"name":"Ada","address":"Main St"}"#;
        assert_eq!(
            values(u.upcast("customer.event", 1, 2, v1).unwrap()),
            [json!({"full_name": "Ada", "address": "Main St"})]
        );
        assert_eq!(
            values(u.upcast("customer.event", 1, 3, v1).unwrap()),
            [
                json!({"Named": {"full_name": "Ada"}}),
                json!({"Moved": {"address": "Main St"}})
            ]
        );
        let v2 = br#"{"full_name":"Ada","address":"Main St"}"#;
        assert_eq!(u.upcast("customer.event", 2, 3, v2).unwrap().len(), 2);
    }

    #[test]
    fn each_failure_names_the_type_and_the_version() {
        let u = chain();
        let newer = u.upcast("customer.event", 4, 3, b"{}").unwrap_err();
        assert!(newer.is_transient());
        assert!(newer
            .to_string()
            .contains("`customer.event` is stored at version 4"));

        let missing = u
            .upcast("customer.event", 1, 4, br#"{"name":"A"}"#)
            .unwrap_err();
        assert_eq!(
            missing,
            UpcastError::Missing {
                what: Shape::Payload("customer.event".into()),
                version: 3,
                next: 4,
                current: 4
            }
        );
        assert!(!missing.is_transient());
        assert!(
            missing.to_string().contains(".upcast::<T>(3, …)"),
            "{missing}"
        );

        let failed = u
            .upcast("customer.event", 1, 2, br#"{"nom":"A"}"#)
            .unwrap_err();
        assert!(
            matches!(&failed, UpcastError::Failed { version: 1, reason, .. } if reason == "no `name`"),
            "{failed:?}"
        );
        let not_json = u.upcast("customer.event", 1, 2, b"\xff").unwrap_err();
        assert!(matches!(not_json, UpcastError::NotJson { version: 1, .. }));
        let other_type = u.upcast("order.event", 1, 2, b"{}").unwrap_err();
        assert!(other_type.to_string().contains("`order.event`"));
    }

    #[test]
    fn a_step_is_registered_once_per_type_and_version_from_version_one() {
        let mut u = chain();
        let twice = u
            .register("customer.event", 1, |v| Ok(vec![v]))
            .unwrap_err();
        assert!(
            twice
                .to_string()
                .contains("payload of type `customer.event` version 1"),
            "{twice}"
        );
        let zero = u
            .register("customer.event", 0, |v| Ok(vec![v]))
            .unwrap_err();
        assert!(zero.to_string().contains("versions start at 1"), "{zero}");
        assert!(u.register("order.event", 1, |_| Ok(vec![])).is_ok());
        assert!(u.upcast("order.event", 1, 2, b"{}").unwrap().is_empty());
    }

    #[test]
    fn a_state_upcasts_into_exactly_one_state_and_errors_name_its_kind() {
        let mut u = Upcasters::new();
        u.register_state("order", 1, |v| Ok(vec![json!({ "count": v["n"] })]))
            .unwrap();
        u.register_state("order", 2, |v| Ok(vec![v.clone(), v]))
            .unwrap();
        let v2 = u.upcast_state("order", 1, 2, br#"{"n":3}"#).unwrap();
        assert_eq!(&*v2, br#"{"count":3}"#);
        let two = u.upcast_state("order", 1, 3, br#"{"n":3}"#).unwrap_err();
        assert!(
            matches!(two, UpcastError::NotOneState { states: 2, .. }),
            "{two:?}"
        );
        let missing = u.upcast_state("cart", 1, 2, b"{}").unwrap_err();
        let text = missing.to_string();
        assert!(
            text.contains("state of `cart` is stored at version 1")
                && text.contains(".upcast_state::<E, _>(1, …)"),
            "{text}"
        );
        // A payload type and a kind of the same name are upcast apart.
        assert!(u.upcast("order", 1, 2, b"{}").is_err());
    }
}

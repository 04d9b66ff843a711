//! The registered entity kinds and how messages find their shard: the routing table of a
//! delivery.
//!
//! `send` addresses one target; `post` fans an event out to every kind that subscribes to its
//! type (each kind gets its own copy, like a consumer group), the kind's `route` picking the
//! ids within it. A kind subscribes to every type of its event set.

use crate::entity::addressing::Addressing;
use crate::entity::handler::EntityHandler;
use crate::entity::services::Services;
use crate::entity::upcast::Upcasters;
use crate::model::error::{ConfigError, StorageError};
use crate::model::event::NewEvent;
use crate::model::ids::{validate, IdField, ShardIndex};
use crate::model::kind_role::RegisteredKind;
use crate::model::message::{InboxWrite, MessageKind, NewMessage};
use crate::model::strategy::ShardStrategy;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;

/// The entity kinds of a delivery, their subscriptions and the shard strategy.
pub struct EntityRegistry {
    handlers: HashMap<&'static str, Arc<dyn EntityHandler>>,
    subscribers: HashMap<&'static str, Vec<Arc<dyn EntityHandler>>>,
    /// The strategy and the shard count as this process last learned it.
    addressing: Addressing,
    services: Services,
    /// Carries traces across messages, if the application asked for it.
    trace: Option<Arc<dyn crate::entity::trace::TracePropagator>>,
    upcasters: Upcasters,
}

impl std::fmt::Debug for EntityRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kinds: Vec<_> = self.handlers.keys().collect();
        kinds.sort();
        f.debug_struct("EntityRegistry")
            .field("kinds", &kinds)
            .field("shard_count", &self.shard_count())
            .finish()
    }
}

impl EntityRegistry {
    /// An empty registry over `shard_count` shards.
    pub fn new(strategy: Arc<dyn ShardStrategy>, shard_count: u32) -> Self {
        EntityRegistry {
            handlers: HashMap::new(),
            subscribers: HashMap::new(),
            addressing: Addressing::new(strategy, shard_count),
            services: Services::new(),
            trace: None,
            upcasters: Upcasters::new(),
        }
    }

    /// Carries traces across messages with `propagator` (see [`crate::entity::trace`]).
    pub fn set_trace_propagator(
        &mut self,
        propagator: Arc<dyn crate::entity::trace::TracePropagator>,
    ) {
        self.trace = Some(propagator);
    }

    /// The trace propagator, if any.
    pub fn trace_propagator(&self) -> Option<&dyn crate::entity::trace::TracePropagator> {
        self.trace.as_deref()
    }

    /// Gives the handlers of every kind the application's `services` (see
    /// [`Context::service`](crate::entity::context::Context::service)).
    pub fn set_services(&mut self, services: Services) {
        self.services = services;
    }

    /// The application's services, for the handlers.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Gives every read of a stored payload the application's `upcasters` (see
    /// [`Upcasters`]): delivery, catch-up and routing.
    pub fn set_upcasters(&mut self, upcasters: Upcasters) {
        self.upcasters = upcasters;
    }

    /// The application's upcasters, for every read of a stored payload.
    pub fn upcasters(&self) -> &Upcasters {
        &self.upcasters
    }

    /// Registers an entity kind; a kind may be registered once, and must keep the id limits
    /// of a target kind (not empty, at most [`MAX_ID_BYTES`](crate::MAX_ID_BYTES) bytes, no
    /// NUL byte) and not start with Shardbox's own prefix
    /// ([`INTERNAL_KIND_PREFIX`](crate::INTERNAL_KIND_PREFIX): the operator views would hide
    /// it and the kind actions refuse it).
    pub fn register(&mut self, handler: Arc<dyn EntityHandler>) -> Result<(), ConfigError> {
        let kind = handler.kind();
        // A kind is the target kind of every message to it: one the send path would refuse
        // is refused here, once, instead of at every send.
        validate(IdField::TargetKind, kind)
            .map_err(|e| ConfigError::invalid_id(e, "KIND", kind))?;
        if crate::is_internal_kind(kind) {
            return Err(ConfigError::Invalid {
                field: "KIND",
                value: format!("{kind:?}"),
                reason: "must not start with `shardbox.`: Shardbox's own kinds (the catch-ups' ticks) use that prefix",
            });
        }
        if self.handlers.contains_key(kind) {
            return Err(ConfigError::DuplicateKind { kind: kind.into() });
        }
        let mut types: Vec<&'static str> = handler.event_types().to_vec();
        types.sort_unstable();
        types.dedup();
        for event_type in types {
            // Once per type even if the set names it twice: one copy per event and target.
            self.subscribers
                .entry(event_type)
                .or_default()
                .push(handler.clone());
        }
        self.handlers.insert(kind, handler);
        Ok(())
    }

    /// The handler of `kind`.
    pub fn handler(&self, kind: &str) -> Option<&Arc<dyn EntityHandler>> {
        self.handlers.get(kind)
    }

    /// [`DeliveryError::UnknownKind`](crate::DeliveryError::UnknownKind) for `kind`, unless it
    /// is registered.
    pub fn check_registered(&self, kind: &str) -> Result<(), crate::DeliveryError> {
        if self.handlers.contains_key(kind) {
            return Ok(());
        }
        Err(crate::DeliveryError::UnknownKind {
            kind: kind.to_owned(),
            registered: self.kinds().into_iter().map(str::to_owned).collect(),
        })
    }

    /// All registered kinds, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut kinds: Vec<_> = self.handlers.keys().copied().collect();
        kinds.sort_unstable();
        kinds
    }

    /// Every registered kind with its role (see [`EntityHandler::role`]), sorted: what this node
    /// records in the membership.
    pub fn registered_kinds(&self) -> Vec<RegisteredKind> {
        let mut kinds: Vec<RegisteredKind> = self
            .handlers
            .values()
            .map(|h| RegisteredKind {
                kind: h.kind().to_owned(),
                role: h.role(),
            })
            .collect();
        kinds.sort();
        kinds
    }

    /// How this registry addresses messages: its strategy and shard count.
    pub fn addressing(&self) -> &Addressing {
        &self.addressing
    }

    /// Number of shards.
    pub fn shard_count(&self) -> u32 {
        self.addressing.shard_count()
    }

    /// Learns that the Inbox has `shard_count` shards now (see
    /// [`Addressing::set_shard_count`]).
    pub fn set_shard_count(&self, shard_count: u32) -> bool {
        self.addressing.set_shard_count(shard_count)
    }

    /// The shard strategy.
    pub fn strategy(&self) -> &Arc<dyn ShardStrategy> {
        self.addressing.strategy()
    }

    /// The shard of a target.
    pub fn shard_of(&self, target_kind: &str, target_id: &str) -> ShardIndex {
        self.addressing.shard_of(target_kind, target_id)
    }

    /// Runs a write addressed by this registry's shard count (see [`Addressing::addressed`]).
    pub async fn addressed<T, F, Fut>(&self, attempt: F) -> Result<T, StorageError>
    where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, StorageError>>,
    {
        self.addressing.addressed(attempt).await
    }

    /// Addresses `rows` by `shard_count` shards (see [`Addressing::address_by`]).
    pub fn address_by(&self, rows: &mut [InboxWrite], shard_count: u32) {
        self.addressing.address_by(rows, shard_count)
    }

    /// Addresses a message to its shard.
    pub fn address(&self, message: NewMessage) -> InboxWrite {
        self.addressing.address(message)
    }

    /// Appends to `out` the inbox rows `event` fans out to: one per subscribed kind and routed
    /// id, each with the event's id as signal id. `deliver_after`/`expires_at` apply to every
    /// copy. A subscriber whose `route` fails, or routes to an id outside the id limits (see
    /// [`crate::model::ids`]), gets no copy (of that id) and is returned (kind, reason); the other
    /// subscribers get theirs.
    pub fn fan_out(
        &self,
        event: &NewEvent,
        now: DateTime<Utc>,
        deliver_after: Option<DateTime<Utc>>,
        expires_at: Option<DateTime<Utc>>,
        out: &mut Vec<InboxWrite>,
    ) -> Vec<(&'static str, String)> {
        let mut failures = Vec::new();
        let Some(subscribers) = self.subscribers.get(event.event_type.as_str()) else {
            return failures;
        };
        for handler in subscribers {
            let ids = match handler.route(event, &self.upcasters) {
                Ok(ids) => ids,
                Err(e) => {
                    failures.push((handler.kind(), e.reason));
                    continue;
                }
            };
            for target_id in ids {
                if let Err(e) = validate(IdField::TargetId, &target_id) {
                    failures.push((handler.kind(), format!("routed to an invalid target: {e}")));
                    continue;
                }
                out.push(self.address(NewMessage {
                    signal_id: event.id.clone(),
                    kind: MessageKind::Event,
                    target_kind: handler.kind().to_owned(),
                    target_id,
                    tenant: event.tenant.clone(),
                    payload: event.payload.clone(),
                    payload_type: event.event_type.clone(),
                    payload_version: event.version,
                    metadata: event.metadata.clone(),
                    received_at: now,
                    deliver_after,
                    expires_at,
                }));
            }
        }
        failures
    }

    /// Whether any kind subscribes to `event_type`.
    pub fn has_subscribers(&self, event_type: &str) -> bool {
        self.subscribers.contains_key(event_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::handler::{BatchResult, BatchRun};
    use crate::model::message::InboxMessage;
    use crate::model::strategy::StableHashStrategy;
    use crate::HandlerError;

    /// A handler of only a kind.
    struct Kind(&'static str);

    #[async_trait::async_trait]
    impl EntityHandler for Kind {
        fn kind(&self) -> &'static str {
            self.0
        }
        fn is_stateful(&self) -> bool {
            false
        }
        fn command_type(&self) -> Option<&'static str> {
            None
        }
        fn event_types(&self) -> &'static [&'static str] {
            &[]
        }
        fn route(&self, _event: &NewEvent, _: &Upcasters) -> Result<Vec<String>, HandlerError> {
            Ok(Vec::new())
        }
        async fn handle_batch(
            &self,
            _state: Option<crate::entity::handler::StoredState<'_>>,
            _batch: &[&InboxMessage],
            _run: BatchRun<'_>,
        ) -> BatchResult {
            BatchResult::default()
        }
    }

    fn registered(kind: &'static str) -> Result<(), ConfigError> {
        EntityRegistry::new(Arc::new(StableHashStrategy::new()), 4).register(Arc::new(Kind(kind)))
    }

    #[test]
    fn a_kind_outside_the_id_limits_is_refused_at_registration_naming_it() {
        let longest: &'static str = "k".repeat(crate::MAX_ID_BYTES).leak();
        assert_eq!(registered(longest), Ok(()));
        let too_long: &'static str = "k".repeat(crate::MAX_ID_BYTES + 1).leak();
        for (kind, words) in [
            (too_long, "at most 512 bytes"),
            ("acc\0ount", "NUL"),
            ("", "not be empty"),
            ("shardbox.mailer", "must not start with `shardbox.`"),
        ] {
            let err = registered(kind).expect_err(kind);
            let text = err.to_string();
            assert!(
                matches!(err, ConfigError::Invalid { field: "KIND", .. }),
                "{err:?}"
            );
            assert!(
                text.contains(&format!("{kind:?}")) && text.contains(words),
                "names the kind and says {words}: {text}"
            );
        }
    }
}

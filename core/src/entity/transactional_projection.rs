//! A projection that writes the application's own tables inside the stage's transaction
//! ([`TransactionalProjection`]), and its adapter.
//!
//! ```text
//!  batch of one target ─► per message, in order: decode (upcast) ─► kept
//!      a message that does not decode ─► Failed, the rest wait behind it (as any adapter)
//!  ─► BatchResult: the decoded messages Handled, and an InTransactionApply that writes them
//!  ─► the live station puts it on the Conveyor; the backend's commit runs it after the
//!     fence, the target's writes in a savepoint: a failed write rolls back that target's
//!     writes only, and its rows follow the failure policy (`storage::InTransaction`)
//! ```
//!
//! The framework keeps no state for such a projection: its state is the application's
//! tables. Its `apply` is synchronous (it runs on the commit's connection, inside the
//! transaction), so it is not under the kind's `handler_timeout` or its limits, and must not
//! wait on anything but the database. The SQL backends give it their diesel connection (see
//! `shardbox::storage::SqlProjection`, which is written on top of this trait).

use crate::entity::context::Context;
use crate::entity::handler::{BatchResult, BatchRun, EntityHandler, StoredState};
use crate::entity::handler_error::HandlerError;
use crate::entity::in_transaction::{InTransactionApply, RebuildScope, TransactionalApply};
use crate::entity::services::Services;
use crate::entity::target_batch::{decode_all, routed, settle, subscriber_face};
use crate::entity::traits::EventSet;
use crate::entity::upcast::Upcasters;
use crate::model::event::{EventSource, NewEvent};
use crate::model::ids::SignalId;
use crate::model::kind_role::KindRole;
use crate::model::message::{InboxMessage, Metadata};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::any::Any;
use std::sync::Arc;

/// A read model written through the stage's own transaction: its writes commit with the
/// Inbox rows they handle, fenced by the shard's lease, or not at all.
///
/// `apply` gets the backend's connection as `&mut dyn Any`; an application uses the typed
/// face of its backend instead (`shardbox::storage::SqlProjection`).
pub trait TransactionalProjection: Send + Sync + 'static {
    /// Stable name of this projection kind.
    const KIND: &'static str;
    /// The events it follows: one [`Message`](crate::Message) type, or several as an
    /// [`event_set!`](crate::event_set) enum.
    type Event: EventSet;

    /// Which instances (ids) of this projection receive `event`. By default the one with the
    /// producer's id.
    fn route(event: &Self::Event, source: &EventSource) -> Vec<String> {
        let _ = event;
        vec![source.id.clone()]
    }

    /// Writes `event` through `conn`, the backend's connection inside the stage's
    /// transaction. An error rolls back this target's writes of the stage; the message
    /// follows the kind's failure policy.
    fn apply_in(
        &self,
        conn: &mut dyn Any,
        event: &Self::Event,
        cx: &Context<'_>,
    ) -> Result<(), HandlerError>;

    /// Deletes, through `conn`, what a rebuild of `scope` writes again: run inside the
    /// transaction of the catch-up's first step, with its first page of replayed events. An
    /// error fails that step's commit (retried at the next pass; cancelling the catch-up stops
    /// it).
    fn reset_in(&self, conn: &mut dyn Any, scope: &RebuildScope) -> Result<(), HandlerError>;
}

/// A rebuild's reset, run inside the catch-up step's transaction.
struct Reset<P> {
    projection: Arc<P>,
    scope: RebuildScope,
}

impl<P: TransactionalProjection> TransactionalApply for Reset<P> {
    fn len(&self) -> usize {
        1
    }

    fn apply(&self, conn: &mut dyn Any, _index: usize) -> Result<(), HandlerError> {
        self.projection.reset_in(conn, &self.scope)
    }
}

/// Adapts a [`TransactionalProjection`].
pub struct TransactionalProjectionHandler<P> {
    projection: Arc<P>,
}

impl<P: TransactionalProjection> TransactionalProjectionHandler<P> {
    /// The adapter of `projection`.
    pub fn new(projection: P) -> Self {
        TransactionalProjectionHandler {
            projection: Arc::new(projection),
        }
    }
}

/// What a write of one message sees of it (a [`Context`] is made of it at commit time).
struct Owned {
    target_id: String,
    tenant: String,
    signal_id: SignalId,
    metadata: Metadata,
    received_at: DateTime<Utc>,
    attempts: u32,
}

/// A target's decoded messages and what their writes need, kept until the commit.
struct Pending<P: TransactionalProjection> {
    projection: Arc<P>,
    services: Services,
    now: DateTime<Utc>,
    messages: Vec<(Owned, Vec<P::Event>)>,
}

impl<P: TransactionalProjection> TransactionalApply for Pending<P> {
    fn len(&self) -> usize {
        self.messages.len()
    }

    fn apply(&self, conn: &mut dyn Any, index: usize) -> Result<(), HandlerError> {
        let Some((m, events)) = self.messages.get(index) else {
            return Ok(());
        };
        let cx = Context {
            kind: P::KIND,
            target_id: &m.target_id,
            tenant: &m.tenant,
            signal_id: &m.signal_id,
            metadata: &m.metadata,
            received_at: m.received_at,
            now: self.now,
            attempts: m.attempts,
            services: &self.services,
        };
        for event in events {
            self.projection.apply_in(conn, event, &cx)?;
        }
        Ok(())
    }
}

#[async_trait]
impl<P: TransactionalProjection> EntityHandler for TransactionalProjectionHandler<P> {
    subscriber_face!(P, false);

    fn role(&self) -> KindRole {
        KindRole::Projection
    }

    fn in_transaction(&self) -> bool {
        true
    }

    fn rebuild_reset(&self, scope: RebuildScope) -> Option<InTransactionApply> {
        Some(InTransactionApply(Arc::new(Reset {
            projection: self.projection.clone(),
            scope,
        })))
    }

    async fn handle_batch(
        &self,
        _state: Option<StoredState<'_>>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut result = BatchResult::default();
        let mut messages = Vec::with_capacity(batch.len());
        for m in batch {
            let step = decode_all::<P::Event>(m, &run).map(|events| {
                let owned = Owned {
                    target_id: m.message.target_id.clone(),
                    tenant: m.message.tenant.clone(),
                    signal_id: m.message.signal_id.clone(),
                    metadata: m.message.metadata.clone(),
                    received_at: m.message.received_at,
                    attempts: m.attempts,
                };
                messages.push((owned, events));
            });
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        if !messages.is_empty() {
            result.in_transaction = Some(InTransactionApply(Arc::new(Pending {
                projection: self.projection.clone(),
                services: run.services.clone(),
                now: run.now,
                messages,
            })));
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::handler::MessageOutcome;
    use crate::model::ids::ShardIndex;
    use crate::model::message::{test_command, MessageKind};
    use serde::{Deserialize, Serialize};
    use std::time::Duration;

    #[derive(Serialize, Deserialize)]
    struct Added(i64);
    impl crate::Message for Added {
        const TYPE: &'static str = "added";
    }

    /// Writes into a `Vec<(String, i64)>` standing for a connection.
    struct Sums;
    impl TransactionalProjection for Sums {
        const KIND: &'static str = "sums";
        type Event = Added;
        fn apply_in(
            &self,
            conn: &mut dyn Any,
            event: &Added,
            cx: &Context<'_>,
        ) -> Result<(), HandlerError> {
            let rows = conn
                .downcast_mut::<Vec<(String, i64)>>()
                .ok_or_else(|| HandlerError::new("not my connection"))?;
            rows.push((cx.target_id.to_owned(), event.0));
            Ok(())
        }

        fn reset_in(&self, conn: &mut dyn Any, _: &RebuildScope) -> Result<(), HandlerError> {
            let rows = conn
                .downcast_mut::<Vec<(String, i64)>>()
                .ok_or_else(|| HandlerError::new("not my connection"))?;
            rows.clear();
            Ok(())
        }
    }

    fn event(seq: i64, payload: &[u8]) -> InboxMessage {
        let mut m = test_command(&format!("s-{seq}"), "sums", "t-1", chrono::Utc::now());
        m.kind = MessageKind::Event;
        m.payload_type = "added".into();
        m.payload = payload.to_vec();
        InboxMessage::fresh(seq, ShardIndex(0), m)
    }

    #[tokio::test]
    async fn decoded_messages_are_handled_and_written_only_by_the_commit() {
        let handler = TransactionalProjectionHandler::new(Sums);
        let services = Services::default();
        let upcasters = Upcasters::default();
        let run = BatchRun {
            now: chrono::Utc::now(),
            services: &services,
            timeout: Duration::from_secs(1),
            max_payload_bytes: 1 << 20,
            gate: None,
            trace: None,
            upcasters: &upcasters,
        };
        let rows = [
            event(1, b"5"),
            event(2, b"7"),
            event(3, b"\"x\""),
            event(4, b"1"),
        ];
        let batch: Vec<&InboxMessage> = rows.iter().collect();
        let result = handler.handle_batch(None, &batch, run).await;
        assert!(matches!(
            result.outcomes.as_slice(),
            [
                MessageOutcome::Handled,
                MessageOutcome::Handled,
                MessageOutcome::Failed(_),
                MessageOutcome::NotAttempted
            ]
        ));
        assert_eq!(result.state, None);
        let work = result.in_transaction.expect("writes left for the commit").0;
        assert_eq!(work.len(), 2);
        let mut conn = Vec::<(String, i64)>::new();
        for i in 0..work.len() {
            work.apply(&mut conn, i).unwrap();
        }
        assert_eq!(conn, vec![("t-1".to_owned(), 5), ("t-1".to_owned(), 7)]);
        assert!(
            work.apply(&mut 0_u8, 0).is_err(),
            "another connection type is refused"
        );
    }
}

//! The adapter of an [`Aggregate`]: a target's commands, in `seq` order, on its state loaded
//! once; a command's events are applied to the state and kept with ids derived from the
//! command, and a failed command leaves no trace in the state.
//!
//! ```text
//!  batch of one aggregate ─► load state ─► per command, in order:
//!      decode ─► handle(&state) (guarded) ─► its events serialized, ids derived
//!      ─► each applied to the state (a panicking apply: rebuilt from the events before it)
//!  ─► state saved if anything was handled
//! ```

use crate::entity::guard::{guarded, panicked};
use crate::entity::handler::{BatchResult, BatchRun, EntityHandler, StoredState};
use crate::entity::handler_error::HandlerError;
use crate::entity::target_batch::{
    all_failed, context, decode, emitted_payload, finish_state, load_state, settle,
};
use crate::entity::trace::{call_span, emitted_metadata};
use crate::entity::traits::{Aggregate, Message};
use crate::entity::upcast::Upcasters;
use crate::model::event::{EventSource, NewEvent};
use crate::model::message::InboxMessage;
use async_trait::async_trait;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Adapts an [`Aggregate`] type.
pub struct AggregateHandler<A>(PhantomData<fn() -> A>);

impl<A> Default for AggregateHandler<A> {
    fn default() -> Self {
        AggregateHandler(PhantomData)
    }
}

impl<A: Aggregate> AggregateHandler<A> {
    async fn handle_one(
        state: &A,
        m: &InboxMessage,
        run: &BatchRun<'_>,
    ) -> Result<(Vec<A::Event>, Vec<NewEvent>), HandlerError> {
        let command: A::Command = decode(m, run)?;
        let cx = context(A::KIND, m, run);
        let span = call_span(run.trace, A::KIND, m);
        let handled = state.handle(&command, &cx);
        let events = guarded(A::KIND, run.timeout, run.gate, &span, handled).await?;
        let metadata = emitted_metadata(run.trace, &span, m);
        let mut stored = Vec::with_capacity(events.len());
        for (n, event) in events.iter().enumerate() {
            let payload = serde_json::to_vec(event).map_err(|e| {
                HandlerError::new(format!(
                    "event of type `{}` does not serialize: {e}",
                    <A::Event as Message>::TYPE
                ))
            })?;
            emitted_payload(
                m,
                <A::Event as Message>::TYPE,
                &payload,
                run.max_payload_bytes,
            )?;
            stored.push(NewEvent {
                id: m.message.emitted_id("event", n),
                event_type: <A::Event as Message>::TYPE.to_owned(),
                version: <A::Event as Message>::VERSION,
                source: EventSource {
                    kind: A::KIND.to_owned(),
                    id: m.message.target_id.clone(),
                },
                tenant: m.message.tenant.clone(),
                occurred_at: run.now,
                payload,
                metadata: metadata.clone(),
            });
        }
        Ok((events, stored))
    }
}

#[async_trait]
impl<A: Aggregate> EntityHandler for AggregateHandler<A> {
    fn kind(&self) -> &'static str {
        A::KIND
    }
    fn is_stateful(&self) -> bool {
        true
    }
    fn state_version(&self) -> u32 {
        A::STATE_VERSION
    }
    fn command_type(&self) -> Option<&'static str> {
        Some(<A::Command as Message>::TYPE)
    }
    fn event_types(&self) -> &'static [&'static str] {
        &[]
    }
    fn route(&self, _event: &NewEvent, _: &Upcasters) -> Result<Vec<String>, HandlerError> {
        Ok(Vec::new())
    }

    async fn handle_batch(
        &self,
        state: Option<StoredState<'_>>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut entity: A = match load_state(A::KIND, A::STATE_VERSION, state, batch, &run) {
            Ok(s) => s,
            Err(e) => return all_failed(batch.len(), e),
        };
        let mut result = BatchResult::default();
        // The events applied so far, to rebuild the state after a panicking `apply`.
        let mut applied: Vec<A::Event> = Vec::new();
        for m in batch {
            // `handle` takes `&self`, so a failed command leaves the state untouched.
            let step = match Self::handle_one(&entity, m, &run).await {
                Ok((events, stored)) => {
                    let applying = catch_unwind(AssertUnwindSafe(|| {
                        for e in &events {
                            entity.apply(e);
                        }
                    }));
                    match applying {
                        Ok(()) => {
                            applied.extend(events);
                            result.events.extend(stored);
                            Ok(())
                        }
                        Err(panic) => {
                            // The state may be half-changed: rebuild it without this message.
                            match load_state::<A>(A::KIND, A::STATE_VERSION, state, batch, &run) {
                                Ok(mut rebuilt) => {
                                    for e in &applied {
                                        rebuilt.apply(e);
                                    }
                                    entity = rebuilt;
                                    Err(panicked(A::KIND, panic.as_ref()))
                                }
                                Err(e) => Err(e),
                            }
                        }
                    }
                }
                Err(e) => Err(e),
            };
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        finish_state(A::KIND, &entity, &mut result);
        result
    }
}

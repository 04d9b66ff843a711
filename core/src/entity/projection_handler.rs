//! The adapter of a [`Projection`]: a target's events, in `seq` order, applied to its view
//! loaded once. `apply` changes the view in place, so a failed one is undone by rebuilding the
//! view from the loaded state and the events before it (apply is deterministic by contract).
//!
//! ```text
//!  batch of one view ─► load state ─► per event, in order: decode (upcast) ─► apply (guarded)
//!      an event an upcaster split: each part applied in order, as one message
//!      err ─► view rebuilt without it, the rest of the batch waits
//!  ─► state saved if anything was handled
//! ```

use crate::entity::guard::guarded;
use crate::entity::handler::{BatchResult, BatchRun, EntityHandler, StoredState};
use crate::entity::handler_error::HandlerError;
use crate::entity::target_batch::{
    all_failed, context, decode_all, finish_state, load_state, routed, settle, subscriber_face,
};
use crate::entity::trace::call_span;
use crate::entity::traits::{EventSet, Projection};
use crate::entity::upcast::Upcasters;
use crate::model::event::NewEvent;
use crate::model::message::InboxMessage;
use async_trait::async_trait;
use std::marker::PhantomData;

/// Adapts a [`Projection`] type.
pub struct ProjectionHandler<P>(PhantomData<fn() -> P>);

impl<P> Default for ProjectionHandler<P> {
    fn default() -> Self {
        ProjectionHandler(PhantomData)
    }
}

impl<P: Projection> ProjectionHandler<P> {
    /// Applies message `m` to `view`: each value its event stands for, in order (several
    /// after a split); the first failure stops it.
    /// `span`: the call's span (`Span::none()` for a replay of applies already traced).
    async fn apply_message(
        view: &mut P,
        m: &InboxMessage,
        run: &BatchRun<'_>,
        span: &tracing::Span,
    ) -> Result<(), HandlerError> {
        for event in decode_all::<P::Event>(m, run)? {
            let cx = context(P::KIND, m, run);
            let applied = view.apply(&event, &cx);
            guarded(P::KIND, run.timeout, run.gate, span, applied).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl<P: Projection> EntityHandler for ProjectionHandler<P> {
    subscriber_face!(P, true);

    fn state_version(&self) -> u32 {
        P::STATE_VERSION
    }

    async fn handle_batch(
        &self,
        state: Option<StoredState<'_>>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut view: P = match load_state(P::KIND, P::STATE_VERSION, state, batch, &run) {
            Ok(s) => s,
            Err(e) => return all_failed(batch.len(), e),
        };
        let mut result = BatchResult::default();
        for (i, m) in batch.iter().enumerate() {
            let span = call_span(run.trace, P::KIND, m);
            let mut step = Self::apply_message(&mut view, m, &run, &span).await;
            if step.is_err() {
                // `apply` may have half-changed the view: rebuild it from the loaded state
                // and the messages before this one (apply is deterministic by contract).
                match load_state::<P>(P::KIND, P::STATE_VERSION, state, batch, &run) {
                    Ok(rebuilt) => {
                        view = rebuilt;
                        for earlier in &batch[..i] {
                            let none = tracing::Span::none();
                            let _ = Self::apply_message(&mut view, earlier, &run, &none).await;
                        }
                    }
                    Err(e) => step = Err(e),
                }
            }
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        finish_state(P::KIND, &view, &mut result);
        result
    }
}

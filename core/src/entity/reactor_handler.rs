//! The adapter of a [`Reactor`]: a target's events, in `seq` order, each turned into the
//! commands it sends (addressed, ids derived from the event's message). A reactor keeps no
//! state, so a failed event only stops the batch. An event an upcaster split is reacted to
//! part by part, in order; the commands of all parts are the message's (their ids numbered
//! across the parts), sent only if every part succeeded.

use crate::entity::guard::guarded;
use crate::entity::handler::{BatchResult, BatchRun, EntityHandler, StoredState};
use crate::entity::handler_error::HandlerError;
use crate::entity::target_batch::{
    context, decode_all, emitted_commands, routed, settle, subscriber_face,
};
use crate::entity::trace::call_span;
use crate::entity::traits::{EventSet, Outgoing, Reactor};
use crate::entity::upcast::Upcasters;
use crate::model::event::NewEvent;
use crate::model::message::InboxMessage;
use async_trait::async_trait;

/// Adapts a [`Reactor`] value.
pub struct ReactorHandler<R>(pub R);

impl<R: Reactor> ReactorHandler<R> {
    /// What the reactor sends for message `m`: its reactions to each value the event stands
    /// for, in order (several after a split), sent as one message's commands.
    async fn react_all(
        reactor: &R,
        m: &InboxMessage,
        run: &BatchRun<'_>,
        span: &tracing::Span,
    ) -> Result<Vec<Outgoing>, HandlerError> {
        let mut outgoing = Vec::new();
        for event in decode_all::<R::Event>(m, run)? {
            let cx = context(R::KIND, m, run);
            let reacted = reactor.react(&event, &cx);
            outgoing.extend(guarded(R::KIND, run.timeout, run.gate, span, reacted).await?);
        }
        Ok(outgoing)
    }
}

#[async_trait]
impl<R: Reactor> EntityHandler for ReactorHandler<R> {
    subscriber_face!(R, false);

    async fn handle_batch(
        &self,
        _state: Option<StoredState<'_>>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut result = BatchResult::default();
        for m in batch {
            let span = call_span(run.trace, R::KIND, m);
            let step = match Self::react_all(&self.0, m, &run, &span).await {
                Ok(outgoing) => emitted_commands(m, outgoing, &run, &span).map(|commands| {
                    result.commands.extend(commands);
                }),
                Err(e) => Err(e),
            };
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        result
    }
}

//! The adapter of a [`Reactor`]: a target's events, in `seq` order, each turned into the
//! commands it sends (addressed, ids derived from the event's message). A reactor keeps no
//! state, so a failed event only stops the batch.

use crate::entity::guard::guarded;
use crate::entity::handler::{BatchResult, BatchRun, EntityHandler};
use crate::entity::handler_error::HandlerError;
use crate::entity::target_batch::{
    context, decode, decode_event, emitted_commands, settle, subscriber_face,
};
use crate::entity::trace::call_span;
use crate::entity::traits::{EventSet, Reactor};
use crate::model::event::NewEvent;
use crate::model::message::InboxMessage;
use async_trait::async_trait;

/// Adapts a [`Reactor`] value.
pub struct ReactorHandler<R>(pub R);

#[async_trait]
impl<R: Reactor> EntityHandler for ReactorHandler<R> {
    subscriber_face!(R, false);

    async fn handle_batch(
        &self,
        _state: Option<&[u8]>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut result = BatchResult::default();
        for m in batch {
            let step = match decode::<R::Event>(m) {
                Ok(event) => {
                    let cx = context(R::KIND, m, &run);
                    let span = call_span(&run, R::KIND, m);
                    let reacted = self.0.react(&event, &cx);
                    guarded(R::KIND, run.timeout, run.gate, &span, reacted)
                        .await
                        .and_then(|outgoing| {
                            let commands = emitted_commands(m, outgoing, &run, &span)?;
                            result.commands.extend(commands);
                            Ok(())
                        })
                }
                Err(e) => Err(e),
            };
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        result
    }
}

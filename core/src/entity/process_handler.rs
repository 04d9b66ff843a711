//! The adapter of a [`ProcessManager`]: the per-target batch of [`crate::entity::target_batch`]
//! (state loaded once, messages in `seq` order, the first failure stops the batch, emitted
//! commands with derived ids) for an entity that takes both events and commands and can
//! finish.
//!
//! ```text
//!  batch of one instance ─► load state ─► per message, in order:
//!      command row ─► on_command   event row ─► on_event     (on a clone kept for a failure)
//!      ok  ─► its commands addressed (ids derived from the message), finish? state reset
//!      err ─► state back to the clone, nothing sent, the rest of the batch waits
//!  ─► state saved, or removed if the last handled message finished the flow
//! ```
//!
//! An event an upcaster split is handled part by part, in order, as one message: the
//! commands of all parts are its commands, and a part that finishes the flow leaves the next
//! part a fresh one.

use crate::entity::guard::guarded;
use crate::entity::handler::{BatchResult, BatchRun, EntityHandler, StoredState};
use crate::entity::handler_error::HandlerError;
use crate::entity::process::ProcessManager;
use crate::entity::target_batch::{
    all_failed, context, decode, decode_all, emitted_commands, finish_state, load_state, routed,
    settle, subscriber_face,
};
use crate::entity::trace::call_span;
use crate::entity::traits::{EventSet, Message};
use crate::entity::upcast::Upcasters;
use crate::model::event::{EventSource, NewEvent};
use crate::model::message::{InboxMessage, MessageKind, NewMessage};
use async_trait::async_trait;
use std::marker::PhantomData;

/// Adapts a [`ProcessManager`] type.
pub struct ProcessManagerHandler<P>(PhantomData<fn() -> P>);

impl<P> Default for ProcessManagerHandler<P> {
    fn default() -> Self {
        ProcessManagerHandler(PhantomData)
    }
}

/// The route of a process manager: the one instance its correlation id names, if any.
fn correlated<P: ProcessManager>(event: &P::Event, source: &EventSource) -> Vec<String> {
    P::correlation_id(event, source).into_iter().collect()
}

impl<P: ProcessManager> ProcessManagerHandler<P> {
    /// Handles one message on `flow`: the commands it sends (addressed, ids derived) and
    /// whether it finished the flow. `flow` may be half-changed after an error.
    async fn handle_one(
        flow: &mut P,
        m: &InboxMessage,
        run: &BatchRun<'_>,
    ) -> Result<(Vec<NewMessage>, bool), HandlerError> {
        let cx = context(P::KIND, m, run);
        let span = call_span(run.trace, P::KIND, m);
        if m.message.kind == MessageKind::Command {
            let command: P::Command = decode(m, run)?;
            let handled = flow.on_command(&command, &cx);
            let actions = guarded(P::KIND, run.timeout, run.gate, &span, handled).await?;
            let (outgoing, finished) = actions.into_parts();
            return Ok((emitted_commands(m, outgoing, run, &span)?, finished));
        }
        // Each value the event stands for, in order (several after a split); a part that
        // finishes the flow leaves the next part a fresh one.
        let mut outgoing = Vec::new();
        let mut finished = false;
        for event in decode_all::<P::Event>(m, run)? {
            if finished {
                *flow = P::default();
            }
            let handled = flow.on_event(&event, &cx);
            let actions = guarded(P::KIND, run.timeout, run.gate, &span, handled).await?;
            let (sent, done) = actions.into_parts();
            outgoing.extend(sent);
            finished = done;
        }
        Ok((emitted_commands(m, outgoing, run, &span)?, finished))
    }
}

#[async_trait]
impl<P: ProcessManager> EntityHandler for ProcessManagerHandler<P> {
    subscriber_face!(
        P,
        true,
        Some(<P::Command as Message>::TYPE),
        correlated::<P>
    );

    fn state_version(&self) -> u32 {
        P::STATE_VERSION
    }

    async fn handle_batch(
        &self,
        state: Option<StoredState<'_>>,
        batch: &[&InboxMessage],
        run: BatchRun<'_>,
    ) -> BatchResult {
        let mut flow: P = match load_state(P::KIND, P::STATE_VERSION, state, batch, &run) {
            Ok(s) => s,
            Err(e) => return all_failed(batch.len(), e),
        };
        let mut result = BatchResult::default();
        // Whether the last handled message finished the flow (a later one starts it afresh).
        let mut finished = false;
        for m in batch {
            let before = flow.clone();
            let step = match Self::handle_one(&mut flow, m, &run).await {
                Ok((commands, done)) => {
                    result.commands.extend(commands);
                    finished = done;
                    if done {
                        flow = P::default();
                    }
                    Ok(())
                }
                Err(e) => {
                    flow = before;
                    Err(e)
                }
            };
            if !settle(&mut result, batch.len(), step) {
                break;
            }
        }
        if finished {
            result.finished = true;
        } else {
            finish_state(P::KIND, &flow, &mut result);
        }
        result
    }
}

//! One call of application code (a handler, an `apply`, a fold), run so that it can only fail
//! its own message: a call that exceeds its kind's `handler_timeout` or panics becomes a
//! [`HandlerError`] whose reason says so, and nothing else of the stage is affected.
//!
//! This module decides nothing about a batch (that is `target_batch`'s); it only turns a
//! timeout or a panic into an error. [`CatchUnwind`] also guards a worker's turn in the runner.

use crate::entity::handler_error::HandlerError;
use crate::entity::kind_gate::KindGate;
use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

/// Runs one call of application code: a call that takes longer than `timeout` or panics is
/// a failure of its message, with a reason that says so; nothing else of the stage is
/// affected.
///
/// Most calls (a fold, a decision on the state) finish at their first poll: they are polled
/// once before the timer is set, and never pay for one (a timer entry is a lock on the
/// runtime's timer wheel to add it and another to remove it, per call). A call that waits
/// gets its timeout from that first poll on.
///
/// Under a [`KindGate`] (the kind's limits) the call first waits for its turn; the wait is
/// not part of its timeout.
///
/// The call runs in `span` (its handler-call span, `Span::none()` without tracing).
pub(crate) async fn guarded<T>(
    kind: &str,
    timeout: Duration,
    gate: Option<&KindGate>,
    span: &tracing::Span,
    call: impl Future<Output = Result<T, HandlerError>>,
) -> Result<T, HandlerError> {
    let _pass = match gate {
        Some(gate) => Some(gate.enter().await),
        None => None,
    };
    let mut call = CatchUnwind(Box::pin(tracing::Instrument::instrument(
        call,
        span.clone(),
    )));
    let first = std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut call).poll(cx) {
            Poll::Ready(done) => Some(done),
            Poll::Pending => None,
        })
    })
    .await;
    let done = match first {
        Some(done) => done,
        None => match tokio::time::timeout(timeout, call).await {
            Ok(done) => done,
            Err(_) => {
                return Err(HandlerError::new(format!(
                    "handler of `{kind}` exceeded handler_timeout of {timeout:?}"
                )))
            }
        },
    };
    done.unwrap_or_else(|panic| Err(panicked(kind, panic.as_ref())))
}

/// The failure of a handler that panicked, with the panic's message.
pub(crate) fn panicked(kind: &str, panic: &(dyn Any + Send)) -> HandlerError {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    HandlerError::new(format!("handler of `{kind}` panicked: {message}"))
}

/// A future that turns a panic while it is polled into an error (what `catch_unwind` is for
/// a closure). Boxed so that it needs no pin projection (and no `unsafe`). Also the runner's
/// guard around a worker's turn.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        // Unwind safety: after a panic the future is dropped, never polled again, and the
        // adapters rebuild any state it may have half-changed.
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

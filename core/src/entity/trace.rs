//! Traces across messages: a [`TracePropagator`] carries the sender's trace context in a
//! message's metadata, parents each handler call's span on it, and writes the call's own
//! context into what the handler emits — so one trace follows a request through every
//! message it causes.
//!
//! ```text
//!  send/post   (caller's span)   ─► inject ─► metadata["traceparent"]
//!  handler call: span "shardbox.handle" {kind, target_id, shard, attempt, signal}
//!                 parent ◄─ the message's metadata
//!  emitted events and commands   ─► inject (the call's span) ─► their metadata ─► …
//! ```
//!
//! Core knows no tracing backend: the facade's `otel` feature provides the OpenTelemetry
//! propagator (W3C trace context). Without a propagator nothing of this runs: no span is
//! made and no metadata is touched.

use crate::model::message::{InboxMessage, Metadata};

/// Carries trace context in message metadata (see the module docs).
pub trait TracePropagator: Send + Sync + 'static {
    /// Writes `span`'s trace context into `metadata` (nothing if `span` belongs to no trace).
    fn inject(&self, span: &tracing::Span, metadata: &mut Metadata);

    /// Makes the context `metadata` carries, if any, `span`'s parent.
    fn set_parent(&self, span: &tracing::Span, metadata: &Metadata);
}

/// The span of one handler call of `kind` on `m`, parented on the context `m` carries; a
/// disabled span when the delivery has no propagator (`trace`, the batch's `BatchRun::trace`).
pub(crate) fn call_span(
    trace: Option<&dyn TracePropagator>,
    kind: &'static str,
    m: &InboxMessage,
) -> tracing::Span {
    let Some(trace) = trace else {
        return tracing::Span::none();
    };
    let span = tracing::info_span!(
        "shardbox.handle",
        kind,
        target_id = %m.message.target_id,
        tenant = %m.message.tenant,
        shard = m.shard.0,
        attempt = m.attempts + 1,
        signal = %m.message.signal_id,
    );
    trace.set_parent(&span, &m.message.metadata);
    span
}

/// The metadata of what a handler call emits while handling `m`: `m`'s, with the call's
/// `span` as the trace context when the delivery has a propagator.
pub(crate) fn emitted_metadata(
    trace: Option<&dyn TracePropagator>,
    span: &tracing::Span,
    m: &InboxMessage,
) -> Metadata {
    let mut metadata = m.message.metadata.clone();
    if let Some(trace) = trace {
        trace.inject(span, &mut metadata);
    }
    metadata
}

//! Traces across messages with OpenTelemetry (feature `otel`): [`TraceContext`] carries the
//! W3C trace context (`traceparent`, `tracestate`) in message metadata, so that one trace
//! follows a request from its `send` through every handler call and what each emits.
//!
//! ```text
//!  send (inside the caller's span) ─► metadata traceparent = caller's span
//!  handler call ─► span "shardbox.handle" {kind, target_id, tenant, shard, attempt, signal},
//!                  child of the message's traceparent
//!  its events and commands ─► traceparent = that call's span ─► the next call …
//! ```
//!
//! Spans are `tracing` spans; the application installs `tracing_opentelemetry`'s layer with
//! its tracer (and exporter) in its subscriber, and turns this on with
//! [`ShardboxBuilder::trace_context`](crate::ShardboxBuilder::trace_context). Without the
//! layer the spans carry no OpenTelemetry context and nothing is written to the metadata.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use shardbox_core::{Metadata, TracePropagator};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The metadata key of the W3C trace context's parent.
pub const TRACEPARENT: &str = "traceparent";
/// The metadata key of the W3C trace state.
pub const TRACESTATE: &str = "tracestate";

/// Carries the W3C trace context of `tracing` spans bridged to OpenTelemetry by
/// `tracing_opentelemetry` (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceContext;

impl TracePropagator for TraceContext {
    fn inject(&self, span: &tracing::Span, metadata: &mut Metadata) {
        let context = span.context();
        let span_ref = context.span();
        let sc = span_ref.span_context();
        if !sc.is_valid() {
            return;
        }
        metadata.insert(TRACEPARENT.to_owned(), traceparent(sc));
        let state = sc.trace_state().header();
        if state.is_empty() {
            metadata.remove(TRACESTATE);
        } else {
            metadata.insert(TRACESTATE.to_owned(), state);
        }
    }

    fn set_parent(&self, span: &tracing::Span, metadata: &Metadata) {
        let Some(parent) = metadata.get(TRACEPARENT).and_then(|v| parse(v, metadata)) else {
            return;
        };
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
}

/// `00-<trace id>-<span id>-<flags>`.
fn traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The remote parent a `traceparent` value names (with the message's `tracestate`), if it is
/// a valid version-00 value; anything else is ignored (a trace is never made up).
fn parse(value: &str, metadata: &Metadata) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = metadata
        .get(TRACESTATE)
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let sc = SpanContext::new(trace_id, span_id, TraceFlags::new(flags), true, state);
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_garbage_is_ignored() {
        let md = Metadata::new();
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse(value, &md).expect("valid");
        assert_eq!(traceparent(&sc), value);
        assert!(sc.is_remote());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parse(bad, &md).is_none(), "{bad:?}");
        }
    }
}

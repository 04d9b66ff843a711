//! Traces across messages (feature `otel`): one trace from a web-style request through an
//! aggregate, a reactor, a process manager and the aggregates they send to, each handler call
//! a span (`shardbox.handle`, with its kind, target, shard and attempt) whose parent is the
//! span of the call — or the request — that caused its message. Read back from an
//! OpenTelemetry tracer provider with an in-memory exporter.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use std::collections::HashMap;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Debug, Serialize, Deserialize)]
struct PlaceOrder;
impl Message for PlaceOrder {
    const TYPE: &'static str = "traces.place-order";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct OrderPlaced {
    order: String,
}
impl Message for OrderPlaced {
    const TYPE: &'static str = "traces.order-placed";
}

#[derive(Debug, Serialize, Deserialize)]
struct Ship;
impl Message for Ship {
    const TYPE: &'static str = "traces.ship";
}

#[derive(Debug, Serialize, Deserialize)]
struct Shipped;
impl Message for Shipped {
    const TYPE: &'static str = "traces.shipped";
}

#[derive(Debug, Serialize, Deserialize)]
struct Notify;
impl Message for Notify {
    const TYPE: &'static str = "traces.notify";
}

#[derive(Debug, Serialize, Deserialize)]
struct Notified;
impl Message for Notified {
    const TYPE: &'static str = "traces.notified";
}

/// Whether each order's command carried a trace context.
static CARRIED: std::sync::Mutex<Vec<(String, bool)>> = std::sync::Mutex::new(Vec::new());

/// The order: placing it emits `OrderPlaced`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Orders;
impl Aggregate for Orders {
    const KIND: &'static str = "traces-orders";
    type Command = PlaceOrder;
    type Event = OrderPlaced;
    async fn handle(
        &self,
        _: &PlaceOrder,
        cx: &Context<'_>,
    ) -> Result<Vec<OrderPlaced>, HandlerError> {
        CARRIED.lock().unwrap().push((
            cx.target_id.to_owned(),
            cx.metadata.contains_key("traceparent"),
        ));
        Ok(vec![OrderPlaced {
            order: cx.target_id.to_owned(),
        }])
    }
    fn apply(&mut self, _: &OrderPlaced) {}
}

/// Tells the customer: a reactor sending `Notify` to the outbox.
struct Mailer;
impl Reactor for Mailer {
    const KIND: &'static str = "traces-mailer";
    type Event = OrderPlaced;
    async fn react(&self, e: &OrderPlaced, _: &Context<'_>) -> Result<Vec<Outgoing>, HandlerError> {
        Ok(vec![Outgoing::command::<Outbox>(e.order.clone(), &Notify)?])
    }
}

/// Ships the order: a process manager sending `Ship` to shipping.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Fulfilment;
impl ProcessManager for Fulfilment {
    const KIND: &'static str = "traces-fulfilment";
    type Event = OrderPlaced;
    type Command = Ship;
    fn correlation_id(e: &OrderPlaced, _: &EventSource) -> Option<String> {
        Some(e.order.clone())
    }
    async fn on_event(
        &mut self,
        e: &OrderPlaced,
        _: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        Ok(ProcessActions::new()
            .send(Outgoing::command::<Shipping>(e.order.clone(), &Ship)?)
            .finish())
    }
    async fn on_command(
        &mut self,
        _: &Ship,
        _: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        Ok(ProcessActions::new())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Shipping;
impl Aggregate for Shipping {
    const KIND: &'static str = "traces-shipping";
    type Command = Ship;
    type Event = Shipped;
    async fn handle(&self, _: &Ship, _: &Context<'_>) -> Result<Vec<Shipped>, HandlerError> {
        Ok(vec![Shipped])
    }
    fn apply(&mut self, _: &Shipped) {}
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Outbox;
impl Aggregate for Outbox {
    const KIND: &'static str = "traces-outbox";
    type Command = Notify;
    type Event = Notified;
    async fn handle(&self, _: &Notify, _: &Context<'_>) -> Result<Vec<Notified>, HandlerError> {
        Ok(vec![Notified])
    }
    fn apply(&mut self, _: &Notified) {}
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

/// The spans by their `kind` attribute (the request by its name).
fn by_kind(spans: &[SpanData]) -> HashMap<String, &SpanData> {
    spans
        .iter()
        .map(|s| {
            let kind = attribute(s, "kind").map_or_else(|| s.name.to_string(), |v| v.to_string());
            (kind, s)
        })
        .collect()
}

// One runtime thread: the subscriber is the test's own (`set_default`), and every handler
// call must run where it is installed.
#[tokio::test(flavor = "current_thread")]
async fn one_trace_follows_a_request_through_every_message_it_causes() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("traces-test")));
    let _installed = tracing::subscriber::set_default(subscriber);

    let sb = Shardbox::builder()
        .memory()
        .shards(4)
        .trace_context()
        .aggregate::<Orders>()
        .reactor(Mailer)
        .process_manager::<Fulfilment>()
        .aggregate::<Shipping>()
        .aggregate::<Outbox>()
        .build()
        .await
        .expect("build");
    {
        // The web handler: its own span, inside which it sends.
        let request = tracing::info_span!("http.request", route = "/orders");
        let _entered = request.enter();
        sb.send::<Orders>("o-1", &PlaceOrder).await.expect("send");
    }
    sb.deliver_all().await.expect("deliver");
    sb.deliver_all().await.expect("deliver");
    let _ = provider.force_flush();

    let spans = exporter.get_finished_spans().expect("spans");
    let kinds = by_kind(&spans);
    let request = kinds.get("http.request").expect("the request's span");
    let trace = request.span_context.trace_id();
    let parent_of = |kind: &str| {
        let span = kinds
            .get(kind)
            .unwrap_or_else(|| panic!("a span for {kind}: {:?}", kinds.keys()));
        assert_eq!(span.name, "shardbox.handle");
        assert_eq!(
            span.span_context.trace_id(),
            trace,
            "{kind} is in the request's trace"
        );
        span.parent_span_id
    };
    let id_of = |kind: &str| kinds[kind].span_context.span_id();
    assert_eq!(parent_of(Orders::KIND), request.span_context.span_id());
    assert_eq!(
        parent_of(Mailer::KIND),
        id_of(Orders::KIND),
        "the event's call"
    );
    assert_eq!(
        parent_of(Fulfilment::KIND),
        id_of(Orders::KIND),
        "the event's call"
    );
    assert_eq!(
        parent_of(Outbox::KIND),
        id_of(Mailer::KIND),
        "the reactor's call"
    );
    assert_eq!(
        parent_of(Shipping::KIND),
        id_of(Fulfilment::KIND),
        "the flow's call"
    );
    let carried = CARRIED.lock().unwrap().clone();
    assert!(carried.contains(&("o-1".to_string(), true)), "{carried:?}");
    let orders = kinds[Orders::KIND];
    assert_eq!(
        attribute(orders, "target_id").map(|v| v.to_string()),
        Some("o-1".into())
    );
    assert_eq!(
        attribute(orders, "attempt").map(|v| v.to_string()),
        Some("1".into())
    );
    assert!(attribute(orders, "shard").is_some());
    assert_eq!(
        spans.iter().filter(|s| s.name == "shardbox.handle").count(),
        5,
        "one span per handler call"
    );
}

/// Without a propagator no span is made and no metadata is written.
#[tokio::test(flavor = "current_thread")]
async fn without_a_propagator_nothing_is_traced() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("traces-test")));
    let _installed = tracing::subscriber::set_default(subscriber);
    let sb = Shardbox::builder()
        .memory()
        .aggregate::<Orders>()
        .build()
        .await
        .expect("build");
    {
        let request = tracing::info_span!("http.request");
        let _entered = request.enter();
        sb.send::<Orders>("o-2", &PlaceOrder).await.expect("send");
    }
    sb.deliver_all().await.expect("deliver");
    let _ = provider.force_flush();
    let spans = exporter.get_finished_spans().expect("spans");
    assert!(
        spans.iter().all(|s| s.name != "shardbox.handle"),
        "{spans:?}"
    );
    let carried = CARRIED.lock().unwrap().clone();
    assert!(carried.contains(&("o-2".to_string(), false)), "{carried:?}");
}

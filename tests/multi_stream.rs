//! A multi-stream projection: a customer view that follows the events of two aggregates
//! (orders and payments) through one event set, on memory, SQLite and PostgreSQL. The view
//! must see every event of both types, in the event store's `seq` order across the types,
//! live and after a catch-up that replays both types. A reactor on the same set gets both.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::CatchUpStatus;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// An order aggregate: placing an order emits `OrderEvent::Placed` for its customer.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    placed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Place {
    customer: String,
    amount: i64,
}

impl Message for Place {
    const TYPE: &'static str = "multi-stream.place";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum OrderEvent {
    Placed {
        customer: String,
        order: String,
        amount: i64,
    },
}

impl Message for OrderEvent {
    const TYPE: &'static str = "multi-stream.order-event";
}

impl Aggregate for Order {
    const KIND: &'static str = "ms-order";
    type Command = Place;
    type Event = OrderEvent;

    async fn handle(&self, c: &Place, cx: &Context<'_>) -> Result<Vec<OrderEvent>, HandlerError> {
        Ok(vec![OrderEvent::Placed {
            customer: c.customer.clone(),
            order: cx.target_id.to_owned(),
            amount: c.amount,
        }])
    }

    fn apply(&mut self, _: &OrderEvent) {
        self.placed = true;
    }
}

/// A payment aggregate (one per order): paying emits `PaymentEvent::Paid`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Payment {
    paid: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pay {
    customer: String,
    order: String,
    amount: i64,
}

impl Message for Pay {
    const TYPE: &'static str = "multi-stream.pay";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum PaymentEvent {
    Paid {
        customer: String,
        order: String,
        amount: i64,
    },
}

impl Message for PaymentEvent {
    const TYPE: &'static str = "multi-stream.payment-event";
}

impl Aggregate for Payment {
    const KIND: &'static str = "ms-payment";
    type Command = Pay;
    type Event = PaymentEvent;

    async fn handle(&self, c: &Pay, _: &Context<'_>) -> Result<Vec<PaymentEvent>, HandlerError> {
        Ok(vec![PaymentEvent::Paid {
            customer: c.customer.clone(),
            order: c.order.clone(),
            amount: c.amount,
        }])
    }

    fn apply(&mut self, e: &PaymentEvent) {
        let PaymentEvent::Paid { amount, .. } = e;
        self.paid += amount;
    }
}

event_set! {
    /// Everything the customer view follows.
    enum CustomerEvent {
        Order(OrderEvent),
        Payment(PaymentEvent),
    }
}

/// The customer view: every event of the customer in arrival order, what was ordered and what
/// was paid.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct CustomerView {
    log: Vec<String>,
    ordered: i64,
    paid: i64,
}

impl CustomerView {
    fn fold(&mut self, e: &CustomerEvent) {
        match e {
            CustomerEvent::Order(OrderEvent::Placed { order, amount, .. }) => {
                self.log.push(format!("placed {order}"));
                self.ordered += amount;
            }
            CustomerEvent::Payment(PaymentEvent::Paid { order, amount, .. }) => {
                self.log.push(format!("paid {order}"));
                self.paid += amount;
            }
        }
    }
}

impl Projection for CustomerView {
    const KIND: &'static str = "customer-view";
    type Event = CustomerEvent;

    fn route(event: &CustomerEvent, _: &EventSource) -> Vec<String> {
        match event {
            CustomerEvent::Order(OrderEvent::Placed { customer, .. })
            | CustomerEvent::Payment(PaymentEvent::Paid { customer, .. }) => {
                vec![customer.clone()]
            }
        }
    }

    async fn apply(&mut self, e: &CustomerEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        self.fold(e);
        Ok(())
    }
}

/// A reactor on the same event set: notes every order and payment event of a customer in the
/// customer's audit log (an aggregate).
struct Auditor;

impl Reactor for Auditor {
    const KIND: &'static str = "ms-auditor";
    type Event = CustomerEvent;

    fn route(event: &CustomerEvent, source: &EventSource) -> Vec<String> {
        CustomerView::route(event, source)
    }

    async fn react(
        &self,
        e: &CustomerEvent,
        cx: &Context<'_>,
    ) -> Result<Vec<Outgoing>, HandlerError> {
        let note = match e {
            CustomerEvent::Order(_) => Note::Order,
            CustomerEvent::Payment(_) => Note::Payment,
        };
        Ok(vec![Outgoing::command::<AuditLog>(cx.target_id, &note)?])
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct AuditLog {
    orders: usize,
    payments: usize,
}

#[derive(Debug, Serialize, Deserialize)]
enum Note {
    Order,
    Payment,
}

impl Message for Note {
    const TYPE: &'static str = "multi-stream.note";
}

impl Aggregate for AuditLog {
    const KIND: &'static str = "ms-audit-log";
    type Command = Note;
    type Event = Note;

    async fn handle(&self, c: &Note, _: &Context<'_>) -> Result<Vec<Note>, HandlerError> {
        Ok(vec![match c {
            Note::Order => Note::Order,
            Note::Payment => Note::Payment,
        }])
    }

    fn apply(&mut self, e: &Note) {
        match e {
            Note::Order => self.orders += 1,
            Note::Payment => self.payments += 1,
        }
    }
}

/// Every customer's audit log holds one note per order and payment event of theirs.
async fn check_audit(sb: &Shardbox) {
    let (want, _) = expected(sb).await;
    for (id, view) in &want {
        let log = sb
            .aggregate_state::<AuditLog>(id)
            .await
            .unwrap()
            .unwrap_or_default();
        let payments = view.log.iter().filter(|e| e.starts_with("paid")).count();
        assert_eq!(
            (log.orders, log.payments),
            (view.log.len() - payments, payments),
            "{id}: the reactor got both types"
        );
    }
}

const CUSTOMERS: usize = 12;

fn customer(i: usize) -> String {
    format!("cust-{i:02}")
}

async fn build(storage: Arc<dyn Storage>) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(8)
        .catch_up_page_size(7)
        .poll_interval(Duration::from_millis(50))
        .aggregate::<Order>()
        .aggregate::<Payment>()
        .projection::<CustomerView>()
        .reactor(Auditor)
        .aggregate::<AuditLog>()
        .build()
        .await
        .expect("build")
}

/// Places orders `from..to` and pays every other round of them (so every customer has paid
/// and unpaid orders); returns the events this makes. The commands of all orders sent at
/// once from several tasks, so that the two types' events interleave in the event store.
async fn trade(sb: &Shardbox, from: usize, to: usize) -> usize {
    let mut tasks = Vec::new();
    for n in from..to {
        let sb = sb.clone();
        tasks.push(tokio::spawn(async move {
            let (cust, order) = (customer(n % CUSTOMERS), format!("o-{n:04}"));
            let amount = 10 + n as i64;
            let place = Place {
                customer: cust.clone(),
                amount,
            };
            sb.send::<Order>(&order, &place).await.expect("place");
            if paid(n) {
                // Paid once placed: the payment's event follows the order's in both orders
                // (the view's arrival order and the event store's `seq`).
                while sb.aggregate_state::<Order>(&order).await.unwrap().is_none() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let pay = Pay {
                    customer: cust,
                    order: order.clone(),
                    amount,
                };
                sb.send::<Payment>(&format!("pay-{order}"), &pay)
                    .await
                    .expect("pay");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (from..to).map(|n| 1 + usize::from(paid(n))).sum()
}

fn paid(n: usize) -> bool {
    (n / CUSTOMERS) % 2 == 0
}

/// The views a fold over the event store gives, per customer: both types, in `seq` order.
async fn expected(sb: &Shardbox) -> (BTreeMap<String, CustomerView>, usize) {
    let types: Vec<String> = CustomerEvent::TYPES.iter().map(|t| t.to_string()).collect();
    let events = sb
        .storage()
        .read_events(0, &types, None, 100_000)
        .await
        .unwrap();
    let mut views: BTreeMap<String, CustomerView> = BTreeMap::new();
    for stored in &events {
        let e = CustomerEvent::decode(&stored.event.event_type, &stored.event.payload).unwrap();
        let id = CustomerView::route(&e, &stored.event.source).remove(0);
        views.entry(id).or_default().fold(&e);
    }
    (views, events.len())
}

async fn wait_settled(sb: &Shardbox) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while sb.storage().counts(None).await.unwrap().pending() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "all delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks every customer's view against the fold over the event store and returns the
/// number of events. `exact`: in the store's `seq` order across both types (a catch-up with no
/// live traffic). Otherwise the same events, each order paid after it was placed: live rows are
/// delivered in their Inbox order, and on PostgreSQL concurrent writers may commit events of
/// different producers in another order than their event `seq` (see docs/entities.md).
async fn check_views(sb: &Shardbox, when: &str, exact: bool) -> usize {
    let (want, events) = expected(sb).await;
    assert_eq!(want.len(), CUSTOMERS);
    for (id, view) in &want {
        let got = sb
            .projection_state::<CustomerView>(id)
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(
            got.paid > 0 && got.ordered > got.paid,
            "{when}: {id} {got:?}"
        );
        if exact {
            assert_eq!(&got, view, "{when}: {id} saw both types, in seq order");
            continue;
        }
        assert_eq!(
            (got.ordered, got.paid),
            (view.ordered, view.paid),
            "{when}: {id}"
        );
        let (mut a, mut b) = (got.log.clone(), view.log.clone());
        a.sort();
        b.sort();
        assert_eq!(a, b, "{when}: {id} saw every event of both types once");
        for (i, entry) in got.log.iter().enumerate() {
            if let Some(order) = entry.strip_prefix("paid ") {
                let placed = got.log.iter().position(|e| *e == format!("placed {order}"));
                assert!(
                    placed.is_some_and(|p| p < i),
                    "{when}: {id} {order} paid after placed: {:?}",
                    got.log
                );
            }
        }
    }
    events
}

async fn customer_view_joins_two_aggregates(storage: Arc<dyn Storage>) {
    let sb = build(storage).await;
    let node = sb.start();
    let live_events = trade(&sb, 0, 120).await;
    wait_settled(&sb).await;
    assert_eq!(check_views(&sb, "live", false).await, live_events);
    check_audit(&sb).await;

    // Rebuild every view from the event store while more trade flows in.
    let job = sb
        .catch_up::<CustomerView>(CatchUp::all())
        .await
        .expect("catch-up");
    let progress = job.progress().await.unwrap();
    assert_eq!(
        progress.total_estimate, live_events as i64,
        "the catch-up counts both types"
    );
    let more = trade(&sb, 120, 180).await;
    let done = job.wait(Duration::from_secs(60)).await.unwrap();
    assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    wait_settled(&sb).await;
    let all = check_views(&sb, "catch-up under traffic", false).await;
    assert_eq!(all, live_events + more);

    // Once more with no traffic: the replay alone, exactly in seq order across the types.
    let job = sb.catch_up::<CustomerView>(CatchUp::all()).await.unwrap();
    let done = job.wait(Duration::from_secs(60)).await.unwrap();
    assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    assert_eq!(done.replayed, all as i64, "{done:?}");
    wait_settled(&sb).await;
    check_views(&sb, "quiet catch-up", true).await;
    check_audit(&sb).await;
    node.shutdown().await.unwrap();
}

common::on_every_backend!(file = "multi_stream", threads = 4, connections = 8;customer_view_joins_two_aggregates);

//! Process managers (sagas) on memory, SQLite and PostgreSQL: an order-fulfilment flow over
//! three aggregates, driven stage by stage on a manual clock. The happy path confirms and
//! finishes (state removed); the timeout path cancels and releases once the saga's own delayed
//! command comes due; a handler that fails after changing the state leaves it changed exactly
//! once; an out-of-range timeout is a handler error.

mod common;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{DeadLetterFilter, ManualClock};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SKU: &str = "sku-1";
/// A charge of this amount gets no answer from the payment gateway.
const SILENT: i64 = 1000;
/// The saga's handling of this order's charge fails twice, after changing its state.
const FLAKY: i64 = 777;
/// The saga schedules an out-of-range timeout for this order.
const FOREVER: i64 = 13;
const TIMEOUT: Duration = Duration::from_secs(30);

// --- the aggregates -----------------------------------------------------------------------

#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    status: String,
    confirms: u32,
    cancels: u32,
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderCommand {
    Place { amount: i64 },
    Confirm,
    Cancel,
}

impl Message for OrderCommand {
    const TYPE: &'static str = "pm-test.order.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderEvent {
    Placed { order: String, amount: i64 },
    Confirmed { order: String },
    Cancelled { order: String },
}

impl Message for OrderEvent {
    const TYPE: &'static str = "pm-test.order.event";
}

impl Aggregate for Order {
    const KIND: &'static str = "pm-order";
    type Command = OrderCommand;
    type Event = OrderEvent;

    async fn handle(
        &self,
        c: &OrderCommand,
        cx: &Context<'_>,
    ) -> Result<Vec<OrderEvent>, HandlerError> {
        let order = cx.target_id.to_owned();
        Ok(vec![match c {
            OrderCommand::Place { amount } => OrderEvent::Placed {
                order,
                amount: *amount,
            },
            OrderCommand::Confirm => OrderEvent::Confirmed { order },
            OrderCommand::Cancel => OrderEvent::Cancelled { order },
        }])
    }

    fn apply(&mut self, e: &OrderEvent) {
        match e {
            OrderEvent::Placed { .. } => self.status = "placed".into(),
            OrderEvent::Confirmed { .. } => {
                self.status = "confirmed".into();
                self.confirms += 1;
            }
            OrderEvent::Cancelled { .. } => {
                self.status = "cancelled".into();
                self.cancels += 1;
            }
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stock {
    reserved: BTreeSet<String>,
    releases: u32,
}

#[derive(Debug, Serialize, Deserialize)]
enum StockCommand {
    Reserve { order: String },
    Release { order: String },
}

impl Message for StockCommand {
    const TYPE: &'static str = "pm-test.stock.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum StockEvent {
    Reserved { order: String },
    Released { order: String },
}

impl Message for StockEvent {
    const TYPE: &'static str = "pm-test.stock.event";
}

impl Aggregate for Stock {
    const KIND: &'static str = "pm-stock";
    type Command = StockCommand;
    type Event = StockEvent;

    async fn handle(
        &self,
        c: &StockCommand,
        _: &Context<'_>,
    ) -> Result<Vec<StockEvent>, HandlerError> {
        Ok(vec![match c {
            StockCommand::Reserve { order } => StockEvent::Reserved {
                order: order.clone(),
            },
            StockCommand::Release { order } => StockEvent::Released {
                order: order.clone(),
            },
        }])
    }

    fn apply(&mut self, e: &StockEvent) {
        match e {
            StockEvent::Reserved { order } => {
                self.reserved.insert(order.clone());
            }
            StockEvent::Released { order } => {
                self.reserved.remove(order);
                self.releases += 1;
            }
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Payment;

#[derive(Debug, Serialize, Deserialize)]
struct Charge {
    order: String,
    amount: i64,
}

impl Message for Charge {
    const TYPE: &'static str = "pm-test.payment.charge";
}

#[derive(Debug, Serialize, Deserialize)]
enum PaymentEvent {
    Charged { order: String },
}

impl Message for PaymentEvent {
    const TYPE: &'static str = "pm-test.payment.event";
}

impl Aggregate for Payment {
    const KIND: &'static str = "pm-payment";
    type Command = Charge;
    type Event = PaymentEvent;

    async fn handle(&self, c: &Charge, _: &Context<'_>) -> Result<Vec<PaymentEvent>, HandlerError> {
        if c.amount == SILENT {
            return Ok(Vec::new()); // the gateway never answers
        }
        Ok(vec![PaymentEvent::Charged {
            order: c.order.clone(),
        }])
    }

    fn apply(&mut self, _: &PaymentEvent) {}
}

// --- the saga -----------------------------------------------------------------------------

event_set! {
    enum FulfilmentEvent {
        Order(OrderEvent),
        Stock(StockEvent),
        Payment(PaymentEvent),
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum FulfilmentCommand {
    Expire,
}

impl Message for FulfilmentCommand {
    const TYPE: &'static str = "pm-test.fulfilment.command";
}

/// The final logs of finished flows (a test's window on state that is removed at the end).
#[derive(Default)]
struct Archive(Mutex<BTreeMap<String, Vec<String>>>);

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Fulfilment {
    phase: String,
    amount: i64,
    /// Every step handled, in order.
    log: Vec<String>,
}

impl Fulfilment {
    fn step(&mut self, phase: &str, what: &str) {
        self.phase = phase.into();
        self.log.push(what.into());
    }

    fn finish(&mut self, what: &str, cx: &Context<'_>) -> Result<ProcessActions, HandlerError> {
        self.log.push(what.into());
        let archive = cx.service::<Archive>()?;
        archive
            .0
            .lock()
            .unwrap()
            .insert(cx.target_id.to_owned(), self.log.clone());
        Ok(ProcessActions::new().finish())
    }
}

impl ProcessManager for Fulfilment {
    const KIND: &'static str = "pm-fulfilment";
    type Event = FulfilmentEvent;
    type Command = FulfilmentCommand;

    fn correlation_id(event: &FulfilmentEvent, _: &EventSource) -> Option<String> {
        Some(match event {
            FulfilmentEvent::Order(
                OrderEvent::Placed { order, .. }
                | OrderEvent::Confirmed { order }
                | OrderEvent::Cancelled { order },
            )
            | FulfilmentEvent::Stock(
                StockEvent::Reserved { order } | StockEvent::Released { order },
            )
            | FulfilmentEvent::Payment(PaymentEvent::Charged { order }) => order.clone(),
        })
    }

    async fn on_event(
        &mut self,
        e: &FulfilmentEvent,
        cx: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        let order = cx.target_id;
        match (self.phase.as_str(), e) {
            ("", FulfilmentEvent::Order(OrderEvent::Placed { amount, .. })) => {
                self.amount = *amount;
                self.step("reserving", "placed");
                let after = if *amount == FOREVER {
                    Duration::MAX
                } else {
                    TIMEOUT
                };
                ProcessActions::new()
                    .send(Outgoing::command::<Stock>(
                        SKU,
                        &StockCommand::Reserve {
                            order: order.into(),
                        },
                    )?)
                    .schedule::<Fulfilment>(cx, &FulfilmentCommand::Expire, after)
            }
            // A fresh instance for anything else: a late event of a finished flow.
            ("", _) => Ok(ProcessActions::new().finish()),
            ("reserving", FulfilmentEvent::Stock(StockEvent::Reserved { .. })) => {
                self.step("charging", "reserved");
                let charge = Charge {
                    order: order.into(),
                    amount: self.amount,
                };
                Ok(ProcessActions::new().send(Outgoing::command::<Payment>(order, &charge)?))
            }
            ("charging", FulfilmentEvent::Payment(PaymentEvent::Charged { .. })) => {
                self.step("confirming", "charged");
                if self.amount == FLAKY && cx.attempts < 2 {
                    return Err(HandlerError::new("confirmation service busy"));
                }
                Ok(ProcessActions::new()
                    .send(Outgoing::command::<Order>(order, &OrderCommand::Confirm)?))
            }
            ("confirming", FulfilmentEvent::Order(OrderEvent::Confirmed { .. })) => {
                self.finish("confirmed", cx)
            }
            ("cancelling", FulfilmentEvent::Stock(StockEvent::Released { .. })) => {
                self.log.push("released".into());
                Ok(ProcessActions::new())
            }
            ("cancelling", FulfilmentEvent::Order(OrderEvent::Cancelled { .. })) => {
                self.finish("cancelled", cx)
            }
            (phase, e) => Err(HandlerError::new(format!(
                "unexpected {e:?} in phase {phase}"
            ))),
        }
    }

    async fn on_command(
        &mut self,
        c: &FulfilmentCommand,
        cx: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        let FulfilmentCommand::Expire = c;
        let order = cx.target_id;
        match self.phase.as_str() {
            "reserving" | "charging" => {
                self.step("cancelling", "expired");
                Ok(ProcessActions::new()
                    .send(Outgoing::command::<Order>(order, &OrderCommand::Cancel)?)
                    .send(Outgoing::command::<Stock>(
                        SKU,
                        &StockCommand::Release {
                            order: order.into(),
                        },
                    )?))
            }
            // The flow finished before its timeout: nothing to keep.
            "" => Ok(ProcessActions::new().finish()),
            _ => Ok(ProcessActions::new()),
        }
    }
}

impl std::fmt::Debug for FulfilmentEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FulfilmentEvent::Order(e) => write!(f, "{e:?}"),
            FulfilmentEvent::Stock(e) => write!(f, "{e:?}"),
            FulfilmentEvent::Payment(e) => write!(f, "{e:?}"),
        }
    }
}

// --- the harness --------------------------------------------------------------------------

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

struct Shop {
    sb: Shardbox,
    clock: Arc<ManualClock>,
    archive: Arc<Archive>,
}

impl Shop {
    async fn new(storage: Arc<dyn Storage>) -> Shop {
        let clock = Arc::new(ManualClock::new(t0()));
        let archive = Arc::new(Archive::default());
        let sb = Shardbox::builder()
            .shared_storage(storage)
            .clock(clock.clone())
            .shards(4)
            .failure_policy(FailurePolicy::new(
                3,
                Backoff::Fixed(Duration::from_secs(1)),
                ExhaustedOutcome::DeadLetter,
            ))
            .service(archive.clone())
            .aggregate::<Order>()
            .aggregate::<Stock>()
            .aggregate::<Payment>()
            .process_manager::<Fulfilment>()
            .build()
            .await
            .expect("build");
        Shop { sb, clock, archive }
    }

    /// Serves every shard until nothing due is left (commands and events hop shards).
    async fn settle(&self) {
        for _ in 0..30 {
            if self.sb.deliver_all().await.unwrap().totals.page_len == 0 {
                return;
            }
        }
        panic!("still delivering after 30 rounds");
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(chrono::Duration::from_std(by).unwrap());
        self.settle().await;
    }

    async fn place(&self, order: &str, amount: i64) {
        self.sb
            .send::<Order>(order, &OrderCommand::Place { amount })
            .await
            .unwrap();
        self.settle().await;
    }

    async fn order(&self, id: &str) -> Order {
        self.sb.aggregate_state::<Order>(id).await.unwrap().unwrap()
    }

    async fn stock(&self) -> Stock {
        self.sb
            .aggregate_state::<Stock>(SKU)
            .await
            .unwrap()
            .unwrap()
    }

    async fn flow(&self, id: &str) -> Option<Fulfilment> {
        self.sb.process_state::<Fulfilment>(id).await.unwrap()
    }

    fn archived(&self, id: &str) -> Option<Vec<String>> {
        self.archive.0.lock().unwrap().get(id).cloned()
    }
}

// --- the cases ----------------------------------------------------------------------------

async fn happy_path_confirms_and_finishes(storage: Arc<dyn Storage>) {
    let shop = Shop::new(storage).await;
    shop.place("o-1", 50).await;
    let order = shop.order("o-1").await;
    assert_eq!((order.status.as_str(), order.confirms), ("confirmed", 1));
    assert!(shop.stock().await.reserved.contains("o-1"));
    assert_eq!(
        shop.flow("o-1").await,
        None,
        "a finished flow's state is removed"
    );
    assert_eq!(
        shop.archived("o-1").unwrap(),
        ["placed", "reserved", "charged", "confirmed"]
    );

    // Its timeout still comes due: it finds no flow, keeps none, and cancels nothing.
    shop.advance(TIMEOUT + Duration::from_secs(1)).await;
    assert_eq!(shop.flow("o-1").await, None);
    let order = shop.order("o-1").await;
    assert_eq!((order.status.as_str(), order.cancels), ("confirmed", 0));
}

async fn timeout_cancels_and_releases(storage: Arc<dyn Storage>) {
    let shop = Shop::new(storage).await;
    shop.place("o-2", SILENT).await;
    let flow = shop.flow("o-2").await.expect("flow waits for the payment");
    assert_eq!(flow.phase, "charging");
    assert!(shop.stock().await.reserved.contains("o-2"));

    shop.advance(TIMEOUT - Duration::from_secs(1)).await;
    assert_eq!(
        shop.flow("o-2").await.unwrap().phase,
        "charging",
        "not yet due"
    );
    assert_eq!(shop.order("o-2").await.status, "placed");

    shop.advance(Duration::from_secs(2)).await;
    let order = shop.order("o-2").await;
    assert_eq!((order.status.as_str(), order.cancels), ("cancelled", 1));
    let stock = shop.stock().await;
    assert!(!stock.reserved.contains("o-2"));
    assert_eq!(stock.releases, 1);
    // Cancelled finished the flow; a Released after it found a fresh instance and finished it.
    assert_eq!(shop.flow("o-2").await, None);
    let log = shop.archived("o-2").unwrap();
    assert_eq!(log[..3], ["placed", "reserved", "expired"]);
    assert_eq!(log.last().unwrap(), "cancelled");
}

async fn failed_handling_changes_state_once(storage: Arc<dyn Storage>) {
    let shop = Shop::new(storage).await;
    shop.place("o-3", FLAKY).await;
    // The charge's handling failed (after changing the state): restored, nothing sent.
    let flow = shop.flow("o-3").await.unwrap();
    assert_eq!(
        flow.log,
        ["placed", "reserved"],
        "the failed step left no trace"
    );
    assert_eq!(shop.order("o-3").await.status, "placed");

    shop.advance(Duration::from_secs(2)).await; // the second attempt fails too
    assert_eq!(shop.flow("o-3").await.unwrap().log, ["placed", "reserved"]);
    shop.advance(Duration::from_secs(2)).await; // the third succeeds
    assert_eq!(
        shop.archived("o-3").unwrap(),
        ["placed", "reserved", "charged", "confirmed"],
        "each step applied once"
    );
    assert_eq!(shop.order("o-3").await.confirms, 1, "one Confirm sent");
    assert_eq!(shop.flow("o-3").await, None);
}

async fn out_of_range_timeout_is_a_handler_error(storage: Arc<dyn Storage>) {
    let shop = Shop::new(storage).await;
    shop.place("o-4", FOREVER).await;
    shop.advance(Duration::from_secs(2)).await;
    shop.advance(Duration::from_secs(2)).await;
    let dead = shop
        .sb
        .dead_letters(DeadLetterFilter::all().target(Fulfilment::KIND, "o-4"))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].letter.reason.contains("out of range"),
        "{}",
        dead[0].letter.reason
    );
    assert_eq!(
        shop.flow("o-4").await,
        None,
        "nothing of the failed handling kept"
    );
    let stock = shop.sb.aggregate_state::<Stock>(SKU).await.unwrap();
    assert!(stock.is_none(), "no Reserve sent: {stock:?}");
}

common::on_every_backend!("process_manager";
    happy_path_confirms_and_finishes,
    timeout_cancels_and_releases,
    failed_handling_changes_state_once,
    out_of_range_timeout_is_a_handler_error,
);

//! Order fulfilment with a saga: order placed → reserve stock → charge payment → confirm; if
//! the stock is short the order is cancelled at once, and if the payment does not answer in
//! time the saga's own timeout cancels the order and releases the stock.
//!
//! Three aggregates (`Order`, `Inventory`, `Payment`), one process manager
//! (`OrderFulfilment`, routed by the order id) and one multi-stream projection
//! (`CustomerOrders`, following the order and payment events, routed by the customer).
//!
//! Run with `cargo run --example order_saga`. It uses a fresh SQLite file in a temporary
//! directory; pass a path as the first argument to keep the database (a second run on the
//! same file sends the same signals again, which deduplicate).

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::Node;
use std::time::Duration;

/// How long the saga waits for the payment before it gives up.
const PAYMENT_TIMEOUT: Duration = Duration::from_secs(1);
/// The payment gateway never answers charges above this amount (a simulated outage).
const GATEWAY_LIMIT: i64 = 500;
const SKU: &str = "sku-teapot";

// --- Order ---------------------------------------------------------------------------------

#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    status: String,
    customer: String,
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderCommand {
    Place {
        customer: String,
        qty: u32,
        amount: i64,
    },
    Confirm,
    Cancel {
        reason: String,
    },
}

impl Message for OrderCommand {
    const TYPE: &'static str = "saga-example.order.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderEvent {
    Placed {
        order: String,
        customer: String,
        qty: u32,
        amount: i64,
    },
    Confirmed {
        order: String,
        customer: String,
    },
    Cancelled {
        order: String,
        customer: String,
        reason: String,
    },
}

impl Message for OrderEvent {
    const TYPE: &'static str = "saga-example.order.event";
}

impl Aggregate for Order {
    const KIND: &'static str = "order";
    type Command = OrderCommand;
    type Event = OrderEvent;

    async fn handle(
        &self,
        c: &OrderCommand,
        cx: &Context<'_>,
    ) -> Result<Vec<OrderEvent>, HandlerError> {
        let order = cx.target_id.to_owned();
        let customer = self.customer.clone();
        Ok(match c {
            OrderCommand::Place {
                customer,
                qty,
                amount,
            } => vec![OrderEvent::Placed {
                order,
                customer: customer.clone(),
                qty: *qty,
                amount: *amount,
            }],
            // Only a pending order moves on; a late confirm or cancel changes nothing.
            _ if self.status != "pending" => Vec::new(),
            OrderCommand::Confirm => vec![OrderEvent::Confirmed { order, customer }],
            OrderCommand::Cancel { reason } => vec![OrderEvent::Cancelled {
                order,
                customer,
                reason: reason.clone(),
            }],
        })
    }

    fn apply(&mut self, e: &OrderEvent) {
        self.status = match e {
            OrderEvent::Placed { customer, .. } => {
                self.customer = customer.clone();
                "pending".into()
            }
            OrderEvent::Confirmed { .. } => "confirmed".into(),
            OrderEvent::Cancelled { reason, .. } => format!("cancelled ({reason})"),
        };
    }
}

// --- Inventory -----------------------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize)]
struct Inventory {
    available: u32,
    reserved: u32,
}

impl Default for Inventory {
    fn default() -> Self {
        Inventory {
            available: 5,
            reserved: 0,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum InventoryCommand {
    Reserve { order: String, qty: u32 },
    Release { order: String, qty: u32 },
}

impl Message for InventoryCommand {
    const TYPE: &'static str = "saga-example.inventory.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum InventoryEvent {
    Reserved { order: String, qty: u32 },
    OutOfStock { order: String },
    Released { order: String, qty: u32 },
}

impl Message for InventoryEvent {
    const TYPE: &'static str = "saga-example.inventory.event";
}

impl Aggregate for Inventory {
    const KIND: &'static str = "inventory";
    type Command = InventoryCommand;
    type Event = InventoryEvent;

    async fn handle(
        &self,
        c: &InventoryCommand,
        _: &Context<'_>,
    ) -> Result<Vec<InventoryEvent>, HandlerError> {
        Ok(vec![match c {
            InventoryCommand::Reserve { order, qty } if *qty <= self.available => {
                InventoryEvent::Reserved {
                    order: order.clone(),
                    qty: *qty,
                }
            }
            InventoryCommand::Reserve { order, .. } => InventoryEvent::OutOfStock {
                order: order.clone(),
            },
            InventoryCommand::Release { order, qty } => InventoryEvent::Released {
                order: order.clone(),
                qty: *qty,
            },
        }])
    }

    fn apply(&mut self, e: &InventoryEvent) {
        match e {
            InventoryEvent::Reserved { qty, .. } => {
                self.available -= qty;
                self.reserved += qty;
            }
            InventoryEvent::Released { qty, .. } => {
                self.available += qty;
                self.reserved -= qty;
            }
            InventoryEvent::OutOfStock { .. } => {}
        }
    }
}

// --- Payment -------------------------------------------------------------------------------

#[derive(Debug, Default, Serialize, Deserialize)]
struct Payment {
    charged: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Charge {
    order: String,
    customer: String,
    amount: i64,
}

impl Message for Charge {
    const TYPE: &'static str = "saga-example.payment.charge";
}

#[derive(Debug, Serialize, Deserialize)]
enum PaymentEvent {
    Charged {
        order: String,
        customer: String,
        amount: i64,
    },
}

impl Message for PaymentEvent {
    const TYPE: &'static str = "saga-example.payment.event";
}

impl Aggregate for Payment {
    const KIND: &'static str = "payment";
    type Command = Charge;
    type Event = PaymentEvent;

    async fn handle(&self, c: &Charge, _: &Context<'_>) -> Result<Vec<PaymentEvent>, HandlerError> {
        if c.amount > GATEWAY_LIMIT {
            return Ok(Vec::new()); // the gateway is silent: the saga's timeout decides
        }
        Ok(vec![PaymentEvent::Charged {
            order: c.order.clone(),
            customer: c.customer.clone(),
            amount: c.amount,
        }])
    }

    fn apply(&mut self, e: &PaymentEvent) {
        let PaymentEvent::Charged { amount, .. } = e;
        self.charged += amount;
    }
}

// --- The saga ------------------------------------------------------------------------------

event_set! {
    /// Everything the fulfilment saga follows, from three aggregates.
    enum FulfilmentEvent {
        Order(OrderEvent),
        Inventory(InventoryEvent),
        Payment(PaymentEvent),
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum FulfilmentCommand {
    PaymentTimedOut,
}

impl Message for FulfilmentCommand {
    const TYPE: &'static str = "saga-example.fulfilment.command";
}

/// One order's flow. `step` is empty for a flow that has not started (or has finished).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct OrderFulfilment {
    step: String,
    customer: String,
    qty: u32,
    amount: i64,
}

impl ProcessManager for OrderFulfilment {
    const KIND: &'static str = "order-fulfilment";
    type Event = FulfilmentEvent;
    type Command = FulfilmentCommand;

    fn correlation_id(event: &FulfilmentEvent, _: &EventSource) -> Option<String> {
        Some(match event {
            FulfilmentEvent::Order(
                OrderEvent::Placed { order, .. }
                | OrderEvent::Confirmed { order, .. }
                | OrderEvent::Cancelled { order, .. },
            )
            | FulfilmentEvent::Inventory(
                InventoryEvent::Reserved { order, .. }
                | InventoryEvent::OutOfStock { order }
                | InventoryEvent::Released { order, .. },
            )
            | FulfilmentEvent::Payment(PaymentEvent::Charged { order, .. }) => order.clone(),
        })
    }

    async fn on_event(
        &mut self,
        e: &FulfilmentEvent,
        cx: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        let order = cx.target_id;
        let next = ProcessActions::new();
        Ok(match (self.step.as_str(), e) {
            (
                "",
                FulfilmentEvent::Order(OrderEvent::Placed {
                    customer,
                    qty,
                    amount,
                    ..
                }),
            ) => {
                println!("  saga {order}: placed by {customer} ({qty} x {SKU}, {amount}) → reserve stock");
                (self.step, self.customer, self.qty, self.amount) =
                    ("reserving".into(), customer.clone(), *qty, *amount);
                let reserve = InventoryCommand::Reserve {
                    order: order.into(),
                    qty: *qty,
                };
                next.send(Outgoing::command::<Inventory>(SKU, &reserve)?)
            }
            ("reserving", FulfilmentEvent::Inventory(InventoryEvent::Reserved { .. })) => {
                println!(
                    "  saga {order}: stock reserved → charge {} (timeout {PAYMENT_TIMEOUT:?})",
                    self.amount
                );
                self.step = "charging".into();
                let charge = Charge {
                    order: order.into(),
                    customer: self.customer.clone(),
                    amount: self.amount,
                };
                next.send(Outgoing::command::<Payment>(order, &charge)?)
                    .schedule::<OrderFulfilment>(
                        cx,
                        &FulfilmentCommand::PaymentTimedOut,
                        PAYMENT_TIMEOUT,
                    )?
            }
            ("reserving", FulfilmentEvent::Inventory(InventoryEvent::OutOfStock { .. })) => {
                println!("  saga {order}: out of stock → cancel");
                self.step = "cancelling".into();
                next.send(Outgoing::command::<Order>(
                    order,
                    &OrderCommand::Cancel {
                        reason: "out of stock".into(),
                    },
                )?)
            }
            ("charging", FulfilmentEvent::Payment(PaymentEvent::Charged { .. })) => {
                println!("  saga {order}: payment charged → confirm");
                self.step = "confirming".into();
                next.send(Outgoing::command::<Order>(order, &OrderCommand::Confirm)?)
            }
            ("confirming", FulfilmentEvent::Order(OrderEvent::Confirmed { .. }))
            | ("cancelling", FulfilmentEvent::Order(OrderEvent::Cancelled { .. })) => {
                println!(
                    "  saga {order}: done ({})",
                    if self.step == "confirming" {
                        "confirmed"
                    } else {
                        "cancelled"
                    }
                );
                next.finish()
            }
            // A flow that has not started (a late event of a finished one): keep nothing.
            ("", _) => next.finish(),
            // Anything else (a release confirmation) changes nothing.
            _ => next,
        })
    }

    async fn on_command(
        &mut self,
        c: &FulfilmentCommand,
        cx: &Context<'_>,
    ) -> Result<ProcessActions, HandlerError> {
        let FulfilmentCommand::PaymentTimedOut = c;
        let order = cx.target_id;
        let next = ProcessActions::new();
        Ok(match self.step.as_str() {
            "charging" => {
                println!("  saga {order}: payment timed out → cancel and release stock");
                self.step = "cancelling".into();
                let cancel = OrderCommand::Cancel {
                    reason: "payment timed out".into(),
                };
                let release = InventoryCommand::Release {
                    order: order.into(),
                    qty: self.qty,
                };
                next.send(Outgoing::command::<Order>(order, &cancel)?)
                    .send(Outgoing::command::<Inventory>(SKU, &release)?)
            }
            // The flow went on (or finished) before the timeout: ignore it.
            "" => next.finish(),
            _ => next,
        })
    }
}

// --- The multi-stream projection -----------------------------------------------------------

event_set! {
    /// What the customer view follows: orders and payments.
    enum CustomerEvent {
        Order(OrderEvent),
        Payment(PaymentEvent),
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CustomerOrders {
    placed: u32,
    confirmed: u32,
    cancelled: u32,
    paid: i64,
}

impl Projection for CustomerOrders {
    const KIND: &'static str = "customer-orders";
    type Event = CustomerEvent;

    fn route(event: &CustomerEvent, _: &EventSource) -> Vec<String> {
        let customer = match event {
            CustomerEvent::Order(
                OrderEvent::Placed { customer, .. }
                | OrderEvent::Confirmed { customer, .. }
                | OrderEvent::Cancelled { customer, .. },
            )
            | CustomerEvent::Payment(PaymentEvent::Charged { customer, .. }) => customer,
        };
        vec![customer.clone()]
    }

    async fn apply(&mut self, e: &CustomerEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        match e {
            CustomerEvent::Order(OrderEvent::Placed { .. }) => self.placed += 1,
            CustomerEvent::Order(OrderEvent::Confirmed { .. }) => self.confirmed += 1,
            CustomerEvent::Order(OrderEvent::Cancelled { .. }) => self.cancelled += 1,
            CustomerEvent::Payment(PaymentEvent::Charged { amount, .. }) => self.paid += amount,
        }
        Ok(())
    }
}

// --- The run -------------------------------------------------------------------------------

/// An order the run places: (order, customer, qty, amount, what should become of it).
type PlannedOrder = (&'static str, &'static str, u32, i64, &'static str);

const ORDERS: [PlannedOrder; 4] = [
    ("o-1", "alice", 2, 120, "confirmed"),
    ("o-2", "bob", 1, 60, "confirmed"),
    ("o-3", "alice", 1, 900, "cancelled (payment timed out)"),
    ("o-4", "bob", 4, 80, "cancelled (out of stock)"),
];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let scratch = tempfile::tempdir()?;
    let path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| scratch.path().join("order-saga.db"));
    println!("storage: SQLite file {}", path.display());

    let shardbox = Shardbox::builder()
        .storage(SqliteStorage::open(&path).await?)
        .shards(4)
        .poll_interval(Duration::from_millis(100))
        .aggregate::<Order>()
        .aggregate::<Inventory>()
        .aggregate::<Payment>()
        .process_manager::<OrderFulfilment>()
        .projection::<CustomerOrders>()
        .build()
        .await?;
    let node = shardbox.start();
    place_orders(&shardbox).await?;
    until_settled(&shardbox, &node).await?;
    node.shutdown().await?;

    let wrong = check_results(&shardbox).await?;
    if !wrong.is_empty() {
        return Err(wrong.join("; ").into());
    }
    Ok(())
}

/// Places every order of `ORDERS`, once each (a signal id per order).
async fn place_orders(shardbox: &Shardbox) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "placing {} orders ({} teapots in stock)…",
        ORDERS.len(),
        Inventory::default().available
    );
    for (i, (order, customer, qty, amount, _)) in ORDERS.iter().enumerate() {
        let place = OrderCommand::Place {
            customer: (*customer).into(),
            qty: *qty,
            amount: *amount,
        };
        let once = SendOptions::default().signal_id(format!("place-{order}"));
        shardbox.send_with::<Order>(order, &place, once).await?;
        if i == 2 {
            // o-4 is placed after o-3 has reserved its teapot, so the stock is short for it.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    Ok(())
}

/// Waits until every order is settled (the timeout path takes PAYMENT_TIMEOUT) and the node
/// has nothing left to deliver.
async fn until_settled(shardbox: &Shardbox, node: &Node) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut open = 0;
        for (order, ..) in &ORDERS {
            let state = shardbox
                .aggregate_state::<Order>(order)
                .await?
                .unwrap_or_default();
            open += usize::from(state.status.is_empty() || state.status == "pending");
        }
        if open == 0 && node.drain(Duration::from_secs(5)).await? {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err("orders still open after 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints what became of the orders, the stock and the customers' views; returns what is not
/// as expected.
async fn check_results(shardbox: &Shardbox) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    println!("\norders:");
    let mut wrong = Vec::new();
    for (order, customer, _, _, expected) in &ORDERS {
        let status = shardbox
            .aggregate_state::<Order>(order)
            .await?
            .unwrap_or_default()
            .status;
        let flow = shardbox.process_state::<OrderFulfilment>(order).await?;
        println!(
            "  {order} ({customer:<5}) {status:<30} saga state left: {}",
            if flow.is_some() { "yes" } else { "none" }
        );
        if status != *expected || flow.is_some() {
            wrong.push(format!("{order}: {status}, expected {expected}"));
        }
    }
    let stock = shardbox
        .aggregate_state::<Inventory>(SKU)
        .await?
        .unwrap_or_default();
    println!(
        "stock of {SKU}: {} available, {} reserved",
        stock.available, stock.reserved
    );
    if stock.reserved != 3 {
        wrong.push(format!(
            "{} teapots reserved, expected 3 (o-1, o-2)",
            stock.reserved
        ));
    }
    println!("customers (one view over order and payment events):");
    for customer in ["alice", "bob"] {
        let view = shardbox
            .projection_state::<CustomerOrders>(customer)
            .await?
            .unwrap_or_default();
        println!(
            "  {customer:<5} placed {}, confirmed {}, cancelled {}, paid {}",
            view.placed, view.confirmed, view.cancelled, view.paid
        );
        if (view.placed, view.confirmed, view.cancelled) != (2, 1, 1) {
            wrong.push(format!("{customer}'s view: {view:?}"));
        }
    }
    Ok(wrong)
}

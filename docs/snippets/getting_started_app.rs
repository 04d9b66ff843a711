use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::ShardboxBuilder;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// 1. Messages: commands an order takes, events it emits.
#[derive(Debug, Serialize, Deserialize)]
pub enum OrderCommand {
    Place { customer: String, amount: i64 },
    Pay,
    Cancel,
}
impl Message for OrderCommand {
    const TYPE: &'static str = "shop.order.command";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OrderEvent {
    Placed { order: String, customer: String, amount: i64 },
    Paid { order: String, customer: String, amount: i64 },
    Cancelled { order: String },
}
impl Message for OrderEvent {
    const TYPE: &'static str = "shop.order.event";
}

// 2. An aggregate: decides, from its state, what a command does.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Order {
    pub customer: String,
    pub amount: i64,
    pub status: String, // "", "placed", "paid", "cancelled"
}

impl Aggregate for Order {
    const KIND: &'static str = "order";
    type Command = OrderCommand;
    type Event = OrderEvent;

    async fn handle(&self, c: &OrderCommand, cx: &Context<'_>) -> Result<Vec<OrderEvent>, HandlerError> {
        let order = cx.target_id.to_owned();
        Ok(match (c, self.status.as_str()) {
            (OrderCommand::Place { customer, amount }, "") => vec![OrderEvent::Placed {
                order,
                customer: customer.clone(),
                amount: *amount,
            }],
            (OrderCommand::Pay, "placed") => vec![OrderEvent::Paid {
                order,
                customer: self.customer.clone(),
                amount: self.amount,
            }],
            (OrderCommand::Cancel, "placed") => vec![OrderEvent::Cancelled { order }],
            // Paid or cancelled already: nothing happens.
            (OrderCommand::Pay | OrderCommand::Cancel, _) => vec![],
            (OrderCommand::Place { .. }, _) => {
                return Err(HandlerError::permanent("this order was placed already"))
            }
        })
    }

    fn apply(&mut self, e: &OrderEvent) {
        match e {
            OrderEvent::Placed { customer, amount, .. } => {
                (self.customer, self.amount, self.status) =
                    (customer.clone(), *amount, "placed".into())
            }
            OrderEvent::Paid { .. } => self.status = "paid".into(),
            OrderEvent::Cancelled { .. } => self.status = "cancelled".into(),
        }
    }
}

// 3. A projection: a read model per customer, kept from the order events.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CustomerTotals {
    pub orders: u32,
    pub paid: i64,
}

impl Projection for CustomerTotals {
    const KIND: &'static str = "customer-totals";
    type Event = OrderEvent;

    fn route(e: &OrderEvent, _: &EventSource) -> Vec<String> {
        match e {
            OrderEvent::Placed { customer, .. } | OrderEvent::Paid { customer, .. } => {
                vec![customer.clone()]
            }
            OrderEvent::Cancelled { .. } => vec![], // nothing to count
        }
    }

    async fn apply(&mut self, e: &OrderEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        match e {
            OrderEvent::Placed { .. } => self.orders += 1,
            OrderEvent::Paid { amount, .. } => self.paid += amount,
            OrderEvent::Cancelled { .. } => {}
        }
        Ok(())
    }
}

// 4. A reactor with a service: mails a receipt when an order is paid.
pub struct Mailer {
    pub sent: Mutex<Vec<String>>,
}

pub struct Receipts;

impl Reactor for Receipts {
    const KIND: &'static str = "receipts";
    type Event = OrderEvent;

    async fn react(&self, e: &OrderEvent, cx: &Context<'_>) -> Result<Vec<Outgoing>, HandlerError> {
        if let OrderEvent::Paid { order, customer, amount } = e {
            let mailer = cx.service::<Mailer>()?;
            // A redelivery has the same key: a real mail service drops the duplicate.
            let key = cx.idempotency_key();
            mailer.sent.lock().unwrap().push(format!("{key}: {customer} paid {amount} for {order}"));
        }
        Ok(vec![])
    }
}

// 5. A process manager: cancels an order that is not paid within 30 minutes.
pub const PAYMENT_DEADLINE: Duration = Duration::from_secs(30 * 60);

#[derive(Debug, Serialize, Deserialize)]
pub struct DeadlinePassed;
impl Message for DeadlinePassed {
    const TYPE: &'static str = "shop.payment-deadline.passed";
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct PaymentDeadline {
    pub waiting: bool,
}

impl ProcessManager for PaymentDeadline {
    const KIND: &'static str = "payment-deadline";
    type Event = OrderEvent;
    type Command = DeadlinePassed;

    fn correlation_id(e: &OrderEvent, _: &EventSource) -> Option<String> {
        match e {
            OrderEvent::Placed { order, .. }
            | OrderEvent::Paid { order, .. }
            | OrderEvent::Cancelled { order } => Some(order.clone()),
        }
    }

    async fn on_event(&mut self, e: &OrderEvent, cx: &Context<'_>) -> Result<ProcessActions, HandlerError> {
        Ok(match e {
            OrderEvent::Placed { .. } => {
                self.waiting = true;
                ProcessActions::new().schedule::<PaymentDeadline>(cx, &DeadlinePassed, PAYMENT_DEADLINE)?
            }
            OrderEvent::Paid { .. } | OrderEvent::Cancelled { .. } => ProcessActions::new().finish(),
        })
    }

    async fn on_command(&mut self, _: &DeadlinePassed, cx: &Context<'_>) -> Result<ProcessActions, HandlerError> {
        if !self.waiting {
            // Paid in time (this instance finished and started anew): keep nothing.
            return Ok(ProcessActions::new().finish());
        }
        let cancel = Outgoing::command::<Order>(cx.target_id, &OrderCommand::Cancel)?;
        Ok(ProcessActions::new().send(cancel).finish())
    }
}

// 6. The application: every kind registered, the service given.
pub fn shop(builder: ShardboxBuilder, mailer: Arc<Mailer>) -> ShardboxBuilder {
    builder
        .aggregate::<Order>()
        .projection::<CustomerTotals>()
        .reactor(Receipts)
        .process_manager::<PaymentDeadline>()
        .service(mailer)
}

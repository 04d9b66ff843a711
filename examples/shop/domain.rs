//! The shop's write side: an `Order` is placed once (customer, total in cents, when), a
//! `Payment` pays one order once. Their events are what the order list follows.
//!
//! ```text
//!  OrderCommand::Place ─► Order "o-…"        ─► OrderEvent::Placed { customer, total, placed_at }
//!  Pay { order, amount } ─► Payment "pay-o-…" ─► PaymentEvent::Paid { order, amount }
//! ```
//!
//! `OrderEvent` is at version 2: version 1 called the total `amount` (see legacy.rs, the code
//! that wrote it). [`order_event_v1`] is the upcaster the builder registers, so every read of
//! a stored v1 event — live delivery, a rebuild's replay — sees the v2 shape. Nothing here
//! reads or writes the order list: that is order_list.rs.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use shardbox::prelude::*;

// --- Order ---------------------------------------------------------------------------------

/// An order's state: what was placed. The v1 code kept the same shape (legacy.rs wraps it).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Order {
    pub placed: bool,
    pub customer: String,
    pub total: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum OrderCommand {
    Place {
        customer: String,
        /// In cents.
        total: i64,
        placed_at: DateTime<Utc>,
    },
}

impl Message for OrderCommand {
    const TYPE: &'static str = "shop-example.order.command";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum OrderEvent {
    Placed {
        customer: String,
        /// In cents; `amount` in version 1.
        total: i64,
        placed_at: DateTime<Utc>,
    },
}

impl Message for OrderEvent {
    // Unchanged since version 1: the type names the stream, the version its shape.
    const TYPE: &'static str = "shop-example.order.event";
    const VERSION: u32 = 2;
}

/// Version 1 ─► 2 of [`OrderEvent`]: `Placed.amount` is `total` now.
pub fn order_event_v1(v1: Value) -> Result<Vec<Value>, String> {
    let placed = v1
        .get("Placed")
        .ok_or_else(|| format!("not a version 1 order event: {v1}"))?;
    Ok(vec![json!({ "Placed": {
        "customer": placed["customer"],
        "total": placed["amount"],
        "placed_at": placed["placed_at"],
    }})])
}

impl Aggregate for Order {
    const KIND: &'static str = "shop-order";
    type Command = OrderCommand;
    type Event = OrderEvent;

    async fn handle(
        &self,
        c: &OrderCommand,
        _: &Context<'_>,
    ) -> Result<Vec<OrderEvent>, HandlerError> {
        let OrderCommand::Place {
            customer,
            total,
            placed_at,
        } = c;
        if self.placed {
            // An order is placed once: a repeated request (a client's retry) changes nothing.
            return Ok(Vec::new());
        }
        if *total <= 0 {
            return Err(HandlerError::permanent("an order's total must be positive"));
        }
        Ok(vec![OrderEvent::Placed {
            customer: customer.clone(),
            total: *total,
            placed_at: *placed_at,
        }])
    }

    fn apply(&mut self, e: &OrderEvent) {
        let OrderEvent::Placed {
            customer, total, ..
        } = e;
        self.placed = true;
        self.customer = customer.clone();
        self.total = *total;
    }
}

// --- Payment -------------------------------------------------------------------------------

/// A payment's state: the order it paid, once it did.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Payment {
    pub paid_order: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pay {
    pub order: String,
    /// In cents.
    pub amount: i64,
}

impl Message for Pay {
    const TYPE: &'static str = "shop-example.payment.pay";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PaymentEvent {
    Paid { order: String, amount: i64 },
}

impl Message for PaymentEvent {
    const TYPE: &'static str = "shop-example.payment.event";
}

/// The payment of `order`: one per order.
pub fn payment_id(order: &str) -> String {
    format!("pay-{order}")
}

impl Aggregate for Payment {
    const KIND: &'static str = "shop-payment";
    type Command = Pay;
    type Event = PaymentEvent;

    async fn handle(&self, c: &Pay, _: &Context<'_>) -> Result<Vec<PaymentEvent>, HandlerError> {
        if self.paid_order.is_some() {
            return Ok(Vec::new()); // paid already: a retry changes nothing
        }
        Ok(vec![PaymentEvent::Paid {
            order: c.order.clone(),
            amount: c.amount,
        }])
    }

    fn apply(&mut self, e: &PaymentEvent) {
        let PaymentEvent::Paid { order, .. } = e;
        self.paid_order = Some(order.clone());
    }
}

// The three aggregates of the shop: an `Order` moves from pending to confirmed or cancelled,
// the `Inventory` reserves and releases stock, and the `Payment` gateway charges (or stays
// silent above its limit, a simulated outage the saga's timeout handles).

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;

/// The payment gateway never answers charges above this amount (a simulated outage).
const GATEWAY_LIMIT: i64 = 500;
/// The one stock-keeping unit the shop sells.
pub const SKU: &str = "sku-teapot";

// --- Order ---------------------------------------------------------------------------------

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Order {
    pub status: String,
    pub customer: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum OrderCommand {
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
pub enum OrderEvent {
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
pub struct Inventory {
    pub available: u32,
    pub reserved: u32,
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
pub enum InventoryCommand {
    Reserve { order: String, qty: u32 },
    Release { order: String, qty: u32 },
}

impl Message for InventoryCommand {
    const TYPE: &'static str = "saga-example.inventory.command";
}

#[derive(Debug, Serialize, Deserialize)]
pub enum InventoryEvent {
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
pub struct Payment {
    pub charged: i64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Charge {
    pub order: String,
    pub customer: String,
    pub amount: i64,
}

impl Message for Charge {
    const TYPE: &'static str = "saga-example.payment.charge";
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PaymentEvent {
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

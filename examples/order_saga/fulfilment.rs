// The fulfilment saga, a process manager routed by the order id: placed → reserve stock →
// charge payment (with a timeout of its own) → confirm; out of stock or no payment in time
// → cancel (and release the stock).

use crate::shop::{
    Charge, Inventory, InventoryCommand, InventoryEvent, Order, OrderCommand, OrderEvent, Payment,
    PaymentEvent, SKU,
};
use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use std::time::Duration;

/// How long the saga waits for the payment before it gives up.
const PAYMENT_TIMEOUT: Duration = Duration::from_secs(1);

event_set! {
    /// Everything the fulfilment saga follows, from three aggregates.
    pub enum FulfilmentEvent {
        Order(OrderEvent),
        Inventory(InventoryEvent),
        Payment(PaymentEvent),
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub enum FulfilmentCommand {
    PaymentTimedOut,
}

impl Message for FulfilmentCommand {
    const TYPE: &'static str = "saga-example.fulfilment.command";
}

/// One order's flow. `step` is empty for a flow that has not started (or has finished).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct OrderFulfilment {
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

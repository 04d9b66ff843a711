// The multi-stream projection: per customer, the orders placed, confirmed and cancelled and
// the amount paid, from the order and payment events (routed by the customer).

use crate::shop::{OrderEvent, PaymentEvent};
use serde::{Deserialize, Serialize};
use shardbox::prelude::*;

event_set! {
    /// What the customer view follows: orders and payments.
    pub enum CustomerEvent {
        Order(OrderEvent),
        Payment(PaymentEvent),
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct CustomerOrders {
    pub placed: u32,
    pub confirmed: u32,
    pub cancelled: u32,
    pub paid: i64,
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

//! A web handler's view of a command: send it, await its outcome, answer with a status.
//!
//! Run with `cargo run --example web_outcomes`. It uses the in-memory backend and prints the
//! "HTTP" answer of a few requests; no server is started — `place_order` is the function a
//! web framework's route would call.
//!
//! ```text
//!  request ─► send(command) ─► outcome(receipt, 2 s) ─┬─ Handled { events }  ─► 201 + event ids
//!                                                     ├─ DeadLettered/Dropped/Blocked ─► 422 + reason
//!                                                     ├─ Expired             ─► 410
//!                                                     ├─ Unknown             ─► 404
//!                                                     └─ OutcomeTimeout      ─► 202 (accepted, still
//!                                                                                running)
//! ```

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::{Backoff, CommandOutcome};
use std::time::Duration;

/// An order: refuses more than ten items.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    items: u32,
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderCommand {
    Add { items: u32 },
}

impl Message for OrderCommand {
    const TYPE: &'static str = "web-outcomes.order.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum OrderEvent {
    Added { items: u32 },
}

impl Message for OrderEvent {
    const TYPE: &'static str = "web-outcomes.order.event";
}

impl Aggregate for Order {
    const KIND: &'static str = "order";
    type Command = OrderCommand;
    type Event = OrderEvent;

    async fn handle(
        &self,
        c: &OrderCommand,
        _: &Context<'_>,
    ) -> Result<Vec<OrderEvent>, HandlerError> {
        let OrderCommand::Add { items } = c;
        if self.items + items > 10 {
            return Err(HandlerError::new(format!(
                "an order holds at most 10 items; it has {}",
                self.items
            )));
        }
        Ok(vec![OrderEvent::Added { items: *items }])
    }

    fn apply(&mut self, e: &OrderEvent) {
        let OrderEvent::Added { items } = e;
        self.items += items;
    }
}

/// An HTTP-like answer: a status and a body.
#[derive(Debug)]
struct Response {
    status: u16,
    body: String,
}

/// What a route handler does: send the command, wait a little for its outcome, map it.
async fn place_order(sb: &Shardbox, order_id: &str, items: u32) -> Response {
    let receipt = match sb
        .send::<Order>(order_id, &OrderCommand::Add { items })
        .await
    {
        Ok(receipt) => receipt,
        Err(DeliveryError::InvalidInput(e)) => return answer(400, e.to_string()),
        Err(e) => return answer(503, e.to_string()),
    };
    match sb.outcome(&receipt, Duration::from_secs(2)).await {
        Ok(CommandOutcome::Handled { events }) => {
            let ids: Vec<&str> = events.iter().map(|id| id.0.as_str()).collect();
            answer(201, format!("events {}", ids.join(", ")))
        }
        Ok(CommandOutcome::Expired) => answer(410, "expired before it was handled".into()),
        Ok(CommandOutcome::Unknown) => answer(404, "outcome no longer known".into()),
        Ok(refused) => answer(
            422,
            format!("{}: {}", refused.name(), refused.reason().unwrap_or("")),
        ),
        Err(DeliveryError::OutcomeTimeout { .. }) => answer(
            202,
            format!("accepted as {}; still running", receipt.signal_id),
        ),
        Err(e) => answer(503, e.to_string()),
    }
}

fn answer(status: u16, body: String) -> Response {
    Response { status, body }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sb = Shardbox::builder()
        .memory()
        .shards(4)
        // A refusal is final: dead-lettered at the first failure, with its reason.
        .kind_policy(
            Order::KIND,
            FailurePolicy::new(
                1,
                Backoff::Fixed(Duration::from_millis(10)),
                ExhaustedOutcome::DeadLetter,
            ),
        )
        .aggregate::<Order>()
        .build()
        .await?;
    let node = sb.start();
    for (order, items) in [("o-1", 4), ("o-1", 5), ("o-1", 3)] {
        let r = place_order(&sb, order, items).await;
        println!(
            "POST /orders/{order}/items {items:>2} ─► {} {}",
            r.status, r.body
        );
    }
    node.shutdown().await?;
    Ok(())
}

//! A web handler with read-your-writes: place an order, then answer with the customer's order
//! page — which shows the new order, because the handler waits until the order list applied
//! it before it queries.
//!
//! ```text
//!  request ─► send(Place) ─► projected(receipt, order list, 5 s) ─┬─ applied ─► query ─► 201 + page
//!                                                                 ├─ ProjectionTimeout ─► 202 (placed,
//!                                                                 │    the list shows it soon)
//!                                                                 └─ NotProjected ─► 422 + reason
//! ```
//!
//! No server is started: `place_order` is what a web framework's route would call. It knows
//! nothing of how the list is written (order_list.rs) or of the run (main.rs).
//!
//! The handler waits on the kind whose table it then reads: `OrderList`, the version that
//! serves the list when the run calls it (step 6, before version 2 is built). An application
//! that builds versions waits on and reads the kind `served_kind` names: a wait on the old
//! kind says nothing of the new table, which at a switch may lag the old one by the events
//! in flight. A blue/green build leaves the served kind alone, so a request during it waits
//! as usual. During a reset-then-replay rebuild of the kind itself (a plain catch-up), a
//! request waits until the replay has passed its order's event; and today it may answer 422
//! although the order is listed: when the replay applies the event first, the live copy
//! `projected` waits on is dropped as covered by the replay, and reads as not applied.

use crate::db::AppDb;
use crate::domain::{Order, OrderCommand};
use crate::order_list::{self, OrderList};
use chrono::{DateTime, Duration as Span, Utc};
use shardbox::prelude::*;
use std::time::Duration;

/// How long a request waits for the order list.
const READ_YOUR_WRITES: Duration = Duration::from_secs(5);
/// How far back the page lists a customer's orders, and how many at most.
const PAGE_SPAN_DAYS: i64 = 30;
const PAGE_ROWS: i64 = 5;

/// An HTTP-like answer: a status and a body.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub body: String,
}

impl Page {
    fn new(status: u16, body: impl Into<String>) -> Page {
        Page {
            status,
            body: body.into(),
        }
    }
}

/// Places order `order_id` (the client's id: a retried request places it once) for
/// `customer`, and answers with the customer's latest orders (of the last 30 days, at most
/// five), newest first.
pub async fn place_order(
    shardbox: &Shardbox,
    db: &AppDb,
    order_id: &str,
    customer: &str,
    total: i64,
    placed_at: DateTime<Utc>,
) -> Page {
    let place = OrderCommand::Place {
        customer: customer.into(),
        total,
        placed_at,
    };
    let receipt = match shardbox.send::<Order>(order_id, &place).await {
        Ok(receipt) => receipt,
        Err(e) => return Page::new(503, format!("could not take the order: {e}")),
    };
    match shardbox
        .projected(&receipt, OrderList::KIND, READ_YOUR_WRITES)
        .await
    {
        Ok(_) => {}
        Err(DeliveryError::ProjectionTimeout { .. }) => {
            return Page::new(
                202,
                format!("order {order_id} placed; your list shows it soon"),
            )
        }
        Err(e) => return Page::new(422, format!("order {order_id} not placed: {e}")),
    }
    let (customer, from) = (customer.to_owned(), placed_at - Span::days(PAGE_SPAN_DAYS));
    let rows = db
        .run(move |c| order_list::orders_of(c, &customer, from, placed_at, PAGE_ROWS))
        .await;
    match rows {
        Ok(rows) => Page::new(
            201,
            format!(
                "order {order_id} placed. Your latest orders:\n{}",
                order_list::render(&rows, "  ")
            ),
        ),
        Err(e) => Page::new(
            500,
            format!("order {order_id} placed; the list failed: {e}"),
        ),
    }
}

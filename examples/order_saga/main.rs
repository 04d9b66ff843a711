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

//!
//! ```text
//!  main.rs             the run: place the orders, wait until settled, check what became of them
//!  shop.rs             the aggregates: Order, Inventory, Payment
//!  fulfilment.rs       the saga (process manager)
//!  customer_orders.rs  the multi-stream projection
//! ```

mod customer_orders;
mod fulfilment;
mod shop;

use customer_orders::CustomerOrders;
use fulfilment::OrderFulfilment;
use shardbox::prelude::*;
use shardbox::Node;
use shop::{Inventory, Order, OrderCommand, Payment, SKU};
use std::time::Duration;

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

//! The orders the run places, and how: a planned order is a pure function of its number
//! (customer, total, date, paid or not), sent as a place command and, for a paid one, a pay
//! command. Bulk in one write per kind (the seed), or one by one from a task while a rebuild
//! runs ([`LiveTraffic`]).
//!
//! What was sent is what the order list must show: every sender records its orders in the
//! [`Ledger`](crate::expected::Ledger) once the send is accepted. This file does not wait for
//! delivery; main.rs does.

use crate::domain::{payment_id, Order, OrderCommand, Pay, Payment};
use chrono::{DateTime, Duration as Span, TimeZone, Utc};
use shardbox::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The customers of the shop.
pub const CUSTOMERS: [&str; 5] = ["alice", "bob", "chen", "dana", "emeka"];

/// An order as the run places it, and as the order list must show it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedOrder {
    pub id: String,
    pub customer: String,
    /// In cents.
    pub total: i64,
    pub placed_at: DateTime<Utc>,
    pub paid: bool,
}

/// When the seeded orders start: one every 2 h 13 min from here.
pub fn seed_start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0)
        .single()
        .unwrap_or(DateTime::UNIX_EPOCH) // a fixed, valid date: never the fallback
}

/// Order number `n` with `prefix` in its id: customers in turn, totals and dates spread,
/// two of three paid.
pub fn planned(prefix: &str, n: u32) -> PlannedOrder {
    PlannedOrder {
        id: format!("{prefix}-{n:05}"),
        customer: CUSTOMERS[n as usize % CUSTOMERS.len()].to_owned(),
        total: 500 + i64::from(n * 7919 % 20_000),
        placed_at: seed_start() + Span::minutes(133 * i64::from(n)),
        paid: n % 3 != 0,
    }
}

/// The command that places `order`.
pub fn place(order: &PlannedOrder) -> OrderCommand {
    OrderCommand::Place {
        customer: order.customer.clone(),
        total: order.total,
        placed_at: order.placed_at,
    }
}

/// The command that pays `order`.
fn pay(order: &PlannedOrder) -> Pay {
    Pay {
        order: order.id.clone(),
        amount: order.total,
    }
}

/// Sends `orders` in two writes: every place command, then the payments of the paid ones.
pub async fn send_bulk(shardbox: &Shardbox, orders: &[PlannedOrder]) -> Result<(), DeliveryError> {
    let places: Vec<(&str, OrderCommand)> = orders.iter().map(|o| (&*o.id, place(o))).collect();
    shardbox.send_many::<Order>(&places).await?;
    let payment_ids: Vec<String> = orders.iter().map(|o| payment_id(&o.id)).collect();
    let pays: Vec<(&str, Pay)> = orders
        .iter()
        .zip(&payment_ids)
        .filter(|(o, _)| o.paid)
        .map(|(o, id)| (&**id, pay(o)))
        .collect();
    shardbox.send_many::<Payment>(&pays).await?;
    Ok(())
}

/// Sends `order` alone: its place command, then its payment if it is paid.
pub async fn send_one(shardbox: &Shardbox, order: &PlannedOrder) -> Result<(), DeliveryError> {
    shardbox.send::<Order>(&order.id, &place(order)).await?;
    if order.paid {
        shardbox
            .send::<Payment>(&payment_id(&order.id), &pay(order))
            .await?;
    }
    Ok(())
}

/// A task that places orders one by one, every `every`, until stopped.
pub struct LiveTraffic {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<Vec<PlannedOrder>, DeliveryError>>,
}

impl LiveTraffic {
    /// Starts placing orders `prefix-00000`, `prefix-00001`, … through `shardbox`.
    pub fn start(shardbox: Shardbox, prefix: &'static str, every: Duration) -> LiveTraffic {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut sent = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let order = planned(prefix, sent.len() as u32);
                    send_one(&shardbox, &order).await?;
                    sent.push(order);
                    tokio::time::sleep(every).await;
                }
                Ok(sent)
            }
        });
        LiveTraffic { stop, task }
    }

    /// Stops the task; returns the orders it placed (each send accepted).
    pub async fn stop(self) -> Result<Vec<PlannedOrder>, crate::BoxError> {
        self.stop.store(true, Ordering::SeqCst);
        Ok(self.task.await??)
    }
}

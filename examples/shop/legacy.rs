//! The shop as it was: version 1 of the order event, whose total was called `amount`, and the
//! run that wrote some history with it — the way a previous deployment did, before the order
//! list existed.
//!
//! ```text
//!  v1 app (v1 Order, Payment) ─► events stored at version 1 ─► dropped
//!  v2 app (main.rs) ─► reads them through domain::order_event_v1 (`amount` ─► `total`)
//! ```
//!
//! Only the run's start uses this file; the current code (domain.rs) never sees a v1 value.

use crate::domain::{self, payment_id, OrderCommand, Pay, Payment};
use crate::traffic::{self, PlannedOrder};
use crate::BoxError;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use std::sync::Arc;

/// Version 1 of the order event.
#[derive(Debug, Serialize, Deserialize)]
pub enum OrderEvent {
    Placed {
        customer: String,
        amount: i64,
        placed_at: DateTime<Utc>,
    },
}

impl Message for OrderEvent {
    const TYPE: &'static str = domain::OrderEvent::TYPE;
    // VERSION: 1, the default.
}

/// The v1 order aggregate: the same kind, commands and state, the v1 event.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Order(domain::Order);

impl Aggregate for Order {
    const KIND: &'static str = domain::Order::KIND;
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
        if self.0.placed {
            return Ok(Vec::new());
        }
        Ok(vec![OrderEvent::Placed {
            customer: customer.clone(),
            amount: *total,
            placed_at: *placed_at,
        }])
    }

    fn apply(&mut self, e: &OrderEvent) {
        let OrderEvent::Placed {
            customer, amount, ..
        } = e;
        self.0.placed = true;
        self.0.customer = customer.clone();
        self.0.total = *amount;
    }
}

/// The orders the v1 code placed, in 2025.
pub fn history() -> Vec<PlannedOrder> {
    let at = |month, day| {
        Utc.with_ymd_and_hms(2025, month, day, 15, 30, 0)
            .single()
            .unwrap_or(DateTime::UNIX_EPOCH) // fixed, valid dates: never the fallback
    };
    let order = |id: &str, customer: &str, total, placed_at, paid| PlannedOrder {
        id: id.into(),
        customer: customer.into(),
        total,
        placed_at,
        paid,
    };
    vec![
        order("o-v1-00001", "alice", 4_250, at(11, 3), true),
        order("o-v1-00002", "bob", 999, at(11, 17), false),
        order("o-v1-00003", "alice", 12_000, at(12, 24), true),
    ]
}

/// Writes [`history`] with the v1 code into `storage`: an application of its own, built,
/// used until everything is delivered, and dropped. Returns how many events it stored at
/// version 1.
pub async fn write_history(storage: &Arc<dyn Storage>) -> Result<usize, BoxError> {
    let v1 = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .aggregate::<Order>()
        .aggregate::<Payment>()
        .build()
        .await?;
    for o in history() {
        v1.send::<Order>(&o.id, &traffic::place(&o)).await?;
        if o.paid {
            let pay = Pay {
                order: o.id.clone(),
                amount: o.total,
            };
            v1.send::<Payment>(&payment_id(&o.id), &pay).await?;
        }
    }
    while v1.storage().counts(None).await?.pending() > 0 {
        v1.deliver_all().await?;
    }
    let stored = v1
        .storage()
        .read_events(0, &[OrderEvent::TYPE.to_owned()], None, 100)
        .await?;
    if let Some(e) = stored.iter().find(|e| e.event.version != 1) {
        return Err(format!(
            "v1 code stored an order event at version {}",
            e.event.version
        )
        .into());
    }
    Ok(stored.len())
}

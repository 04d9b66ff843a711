//! The entities the workloads drive: a counter aggregate and a ledger projection.

use chrono::Utc;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use shardbox::core::sync::lock;
use shardbox::prelude::*;
use std::sync::Mutex;

/// Send → handler-start latencies (µs), recorded by the counter's handler when armed.
pub static LATENCY: Mutex<Option<Histogram<u64>>> = Mutex::new(None);

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Counter {
    pub count: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Bump;

impl Message for Bump {
    const TYPE: &'static str = "bench.bump";
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Bumped;

impl Message for Bumped {
    const TYPE: &'static str = "bench.bumped";
}

impl Aggregate for Counter {
    const KIND: &'static str = "counter";
    type Command = Bump;
    type Event = Bumped;

    async fn handle(&self, _: &Bump, cx: &Context<'_>) -> Result<Vec<Bumped>, HandlerError> {
        crate::timeline::mark("handler", cx.received_at.timestamp_micros());
        let mut h = lock(&LATENCY);
        if let Some(h) = h.as_mut() {
            let us = (Utc::now() - cx.received_at)
                .num_microseconds()
                .unwrap_or(0)
                .max(0);
            let _ = h.record(us as u64);
        }
        Ok(vec![Bumped])
    }

    fn apply(&mut self, _: &Bumped) {
        self.count += 1;
    }
}

/// An event the ledger projection folds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Booked {
    pub amount: i64,
}

impl Message for Booked {
    const TYPE: &'static str = "bench.booked";
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    pub events: u64,
    pub balance: i64,
}

impl Projection for Ledger {
    const KIND: &'static str = "bench-ledger";
    type Event = Booked;

    async fn apply(&mut self, e: &Booked, _: &Context<'_>) -> Result<(), HandlerError> {
        self.events += 1;
        self.balance += e.amount;
        Ok(())
    }
}

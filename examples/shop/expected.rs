//! What the order list must hold: the fold of every order the run sent, kept beside the
//! database, and the comparison of the table against it.
//!
//! ```text
//!  senders ─► Ledger::record(order)          (once the send was accepted)
//!  table rows + ledger ─► Ledger::differences ─► [] when every order is in the table once,
//!                                              with its customer, date, total and status
//! ```
//!
//! Pure: no I/O, so the checks say exactly what differs. Reading the table is main.rs's.

use crate::order_list::{cents, OrderRow, PAID, UNPAID};
use crate::traffic::PlannedOrder;
use std::collections::BTreeMap;

/// Every order sent, by id.
#[derive(Debug, Default)]
pub struct Ledger {
    orders: BTreeMap<String, PlannedOrder>,
}

/// Totals of a set of orders: how many, their sum, how many paid.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Totals {
    pub orders: usize,
    pub cents: i64,
    pub paid: usize,
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} orders, {} in all, {} paid",
            self.orders,
            cents(self.cents),
            self.paid
        )
    }
}

impl Ledger {
    /// Records `orders` as sent.
    pub fn record(&mut self, orders: impl IntoIterator<Item = PlannedOrder>) {
        for o in orders {
            self.orders.insert(o.id.clone(), o);
        }
    }

    /// The totals the table must show.
    pub fn totals(&self) -> Totals {
        Totals {
            orders: self.orders.len(),
            cents: self.orders.values().map(|o| o.total).sum(),
            paid: self.orders.values().filter(|o| o.paid).count(),
        }
    }

    /// How `rows` (the whole table) differ from the ledger; empty if they do not. At most
    /// `limit` differences are named, then how many more there are.
    pub fn differences(&self, rows: &[OrderRow], limit: usize) -> Vec<String> {
        let mut wrong = Vec::new();
        let mut seen = BTreeMap::new();
        for row in rows {
            *seen.entry(&row.order_id).or_insert(0) += 1;
            match self.orders.get(&row.order_id) {
                None => wrong.push(format!("{}: in the table, never placed", row.order_id)),
                Some(o) => {
                    let status = if o.paid { PAID } else { UNPAID };
                    let expected = (&*o.customer, o.placed_at.timestamp(), o.total, status);
                    let found = (&*row.customer, row.placed_at, row.total, &*row.status);
                    if expected != found {
                        wrong.push(format!("{}: {found:?}, expected {expected:?}", o.id));
                    }
                }
            }
        }
        for (id, n) in &seen {
            if *n > 1 {
                wrong.push(format!("{id}: {n} rows"));
            }
        }
        for id in self.orders.keys() {
            if !seen.contains_key(id) {
                wrong.push(format!("{id}: placed, missing from the table"));
            }
        }
        if wrong.len() > limit {
            let more = wrong.len() - limit;
            wrong.truncate(limit);
            wrong.push(format!("… and {more} more"));
        }
        wrong
    }
}

/// The totals of `rows`.
pub fn totals_of(rows: &[OrderRow]) -> Totals {
    Totals {
        orders: rows.len(),
        cents: rows.iter().map(|r| r.total).sum(),
        paid: rows.iter().filter(|r| r.status == PAID).count(),
    }
}

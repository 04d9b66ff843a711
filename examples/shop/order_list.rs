//! The order list: a SQL read model in the application's own table `shop_order_list`, one
//! row per order, written by Shardbox inside the commit that delivers the events, and queried
//! by the application with its own typed diesel queries.
//!
//! ```text
//!  OrderEvent::Placed   (stream shop-order/o-…)  ─┐  routed by order id   upsert: customer,
//!                                                  ├─► OrderList "o-…" ─► placed_at, total
//!  PaymentEvent::Paid   (stream shop-payment/…)  ─┘                      upsert: status paid
//!  the application: orders_of(customer, from, to) ─► newest first, by the (customer,
//!                   placed_at) index
//! ```
//!
//! The table is the application's: [`MIGRATION`] creates it (db.rs runs it at start), and a
//! rebuild runs [`OrderList`]'s `reset` and replays (rebuild.rs). Shardbox never reads it.

use crate::db::AppConnection;
use crate::domain::{OrderEvent, PaymentEvent};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use shardbox::prelude::*;
use shardbox::storage::on_connection;

diesel::table! {
    /// One row per order. `placed_at` is in seconds since the epoch: one column type both
    /// backends read alike.
    shop_order_list (order_id) {
        order_id -> Text,
        customer -> Text,
        placed_at -> BigInt,
        total -> BigInt,
        status -> Text,
    }
}

/// The application's migration, the same for SQLite and PostgreSQL; run at every start.
pub const MIGRATION: &str = "
CREATE TABLE IF NOT EXISTS shop_order_list (
    order_id TEXT PRIMARY KEY,
    customer TEXT NOT NULL,
    placed_at BIGINT NOT NULL,
    total BIGINT NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS shop_order_list_customer_placed_at
    ON shop_order_list (customer, placed_at);
";

/// `status` of an order with a payment.
pub const PAID: &str = "paid";
/// `status` of an order without one.
pub const UNPAID: &str = "unpaid";

event_set! {
    /// What the order list follows: orders and their payments.
    pub enum OrderListEvent {
        Order(OrderEvent),
        Payment(PaymentEvent),
    }
}

/// The order list's projection: one instance per order id.
pub struct OrderList;

impl SqlProjection for OrderList {
    const KIND: &'static str = "shop-order-list";
    type Event = OrderListEvent;

    fn route(event: &OrderListEvent, source: &EventSource) -> Vec<String> {
        match event {
            OrderListEvent::Order(_) => vec![source.id.clone()], // the order's own stream
            OrderListEvent::Payment(PaymentEvent::Paid { order, .. }) => vec![order.clone()],
        }
    }

    // An order's placement and its payment come from two streams, with no order between them
    // (the payment may be handled first, on another shard), so each event upserts its own
    // columns and leaves the other's alone.
    fn apply(&self, conn: SqlConnection<'_>, e: &OrderListEvent, cx: &Context<'_>) -> SqlResult {
        use shop_order_list::dsl as o;
        match e {
            OrderListEvent::Order(OrderEvent::Placed {
                customer,
                total,
                placed_at,
            }) => on_connection!(conn, |c| diesel::insert_into(o::shop_order_list)
                .values((
                    o::order_id.eq(cx.target_id),
                    o::customer.eq(customer),
                    o::placed_at.eq(placed_at.timestamp()),
                    o::total.eq(total),
                    o::status.eq(UNPAID),
                ))
                .on_conflict(o::order_id)
                .do_update()
                .set((
                    o::customer.eq(customer),
                    o::placed_at.eq(placed_at.timestamp()),
                    o::total.eq(total),
                ))
                .execute(c))?,
            // Paid before placed: a row with the status alone, which the placement fills in.
            OrderListEvent::Payment(PaymentEvent::Paid { .. }) => {
                on_connection!(conn, |c| diesel::insert_into(o::shop_order_list)
                    .values((
                        o::order_id.eq(cx.target_id),
                        o::customer.eq(""),
                        o::placed_at.eq(0),
                        o::total.eq(0),
                        o::status.eq(PAID),
                    ))
                    .on_conflict(o::order_id)
                    .do_update()
                    .set(o::status.eq(PAID))
                    .execute(c))?
            }
        };
        Ok(())
    }

    fn reset(&self, conn: SqlConnection<'_>, scope: &RebuildScope) -> SqlResult {
        use shop_order_list::dsl as o;
        // The table has no tenant column, and a row folds events of any age (a payment long
        // after its order): only a whole-history rebuild of the one tenant can be reset. A
        // refusal leaves the rows as they are; the operator cancels the job.
        if scope.since.is_some() || !scope.tenant.is_empty() {
            let asked = format!("since {:?}, tenant {:?}", scope.since, scope.tenant);
            return Err(HandlerError::permanent(format!(
                "the order list is rebuilt from all of history only (asked: {asked})"
            ))
            .into());
        }
        match &scope.ids {
            None => on_connection!(conn, |c| diesel::delete(o::shop_order_list).execute(c))?,
            Some(ids) => on_connection!(conn, |c| diesel::delete(
                o::shop_order_list.filter(o::order_id.eq_any(ids))
            )
            .execute(c))?,
        };
        Ok(())
    }
}

/// A row of the order list, as the application reads it.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable)]
#[diesel(table_name = shop_order_list)]
pub struct OrderRow {
    pub order_id: String,
    pub customer: String,
    pub placed_at: i64,
    pub total: i64,
    pub status: String,
}

/// The orders of `customer` placed between `from` and `to` (both included), newest first, at
/// most `limit` of them. The (customer, placed_at) index serves the filter and the order.
pub fn orders_of(
    conn: &mut AppConnection,
    customer: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
) -> QueryResult<Vec<OrderRow>> {
    use shop_order_list::dsl as o;
    o::shop_order_list
        .filter(o::customer.eq(customer))
        .filter(o::placed_at.between(from.timestamp(), to.timestamp()))
        .order((o::placed_at.desc(), o::order_id.desc()))
        .limit(limit)
        .select(OrderRow::as_select())
        .load(conn)
}

/// Every order of the list, by id.
pub fn all_orders(conn: &mut AppConnection) -> QueryResult<Vec<OrderRow>> {
    use shop_order_list::dsl as o;
    o::shop_order_list
        .order(o::order_id)
        .select(OrderRow::as_select())
        .load(conn)
}

/// How many orders the list holds.
pub fn count(conn: &mut AppConnection) -> QueryResult<i64> {
    shop_order_list::table.count().get_result(conn)
}

/// `rows` as a small text table, a line each (the last without a newline), indented by
/// `indent`.
pub fn render(rows: &[OrderRow], indent: &str) -> String {
    let mut out = format!(
        "{indent}{:<12} {:<8} {:<17} {:>9}  {}",
        "order", "customer", "placed at (UTC)", "total", "status"
    );
    for r in rows {
        let placed_at = DateTime::<Utc>::from_timestamp(r.placed_at, 0)
            .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_else(|| r.placed_at.to_string());
        out += &format!(
            "\n{indent}{:<12} {:<8} {:<17} {:>9}  {}",
            r.order_id,
            r.customer,
            placed_at,
            cents(r.total),
            r.status
        );
    }
    out
}

/// `12345` as `123.45`.
pub fn cents(amount: i64) -> String {
    format!("{}.{:02}", amount / 100, amount % 100)
}

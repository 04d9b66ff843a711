//! Version 2 of the order list: the same rows and the amount paid, in a table of its own
//! (`shop_order_list_v2`), written by a projection kind of its own ([`OrderListV2`]). It is
//! built from the history beside version 1 while version 1 keeps serving (rebuild.rs), then
//! the read model switches to it.
//!
//! ```text
//!  OrderEvent::Placed  ─┐                     upsert: customer, placed_at, total
//!                       ├─► OrderListV2 "o-…" ─►
//!  PaymentEvent::Paid  ─┘                     upsert: status paid, paid (the amount: new)
//! ```
//!
//! One table per version (a suffix) is the simplest mapping: each version's `reset` empties
//! its own table, and a reader picks the table of the kind `served_kind` names. The read model
//! keeps version 1's name (`shop-order-list`), the kind that served it first.

use crate::db::AppConnection;
use crate::domain::{OrderEvent, PaymentEvent};
use crate::order_list::{OrderListEvent, OrderRow, PAID, UNPAID};
use diesel::prelude::*;
use shardbox::prelude::*;
use shardbox::storage::on_connection;

diesel::table! {
    /// One row per order, as in version 1, and the amount its payment paid.
    shop_order_list_v2 (order_id) {
        order_id -> Text,
        customer -> Text,
        placed_at -> BigInt,
        total -> BigInt,
        status -> Text,
        paid -> BigInt,
    }
}

/// Version 2's migration, run with version 1's at every start.
pub const MIGRATION: &str = "
CREATE TABLE IF NOT EXISTS shop_order_list_v2 (
    order_id TEXT PRIMARY KEY,
    customer TEXT NOT NULL,
    placed_at BIGINT NOT NULL,
    total BIGINT NOT NULL,
    status TEXT NOT NULL,
    paid BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS shop_order_list_v2_customer_placed_at
    ON shop_order_list_v2 (customer, placed_at);
";

/// Version 2 of the order list's projection: one instance per order id, routed as version 1.
pub struct OrderListV2;

impl SqlProjection for OrderListV2 {
    const KIND: &'static str = "shop-order-list-v2";
    type Event = OrderListEvent;

    fn route(event: &OrderListEvent, source: &EventSource) -> Vec<String> {
        crate::order_list::OrderList::route(event, source)
    }

    // As version 1: each event upserts its own columns (placement and payment come from two
    // streams, in no order between them).
    fn apply(&self, conn: SqlConnection<'_>, e: &OrderListEvent, cx: &Context<'_>) -> SqlResult {
        use shop_order_list_v2::dsl as o;
        match e {
            OrderListEvent::Order(OrderEvent::Placed {
                customer,
                total,
                placed_at,
            }) => on_connection!(conn, |c| diesel::insert_into(o::shop_order_list_v2)
                .values((
                    o::order_id.eq(cx.target_id),
                    o::customer.eq(customer),
                    o::placed_at.eq(placed_at.timestamp()),
                    o::total.eq(total),
                    o::status.eq(UNPAID),
                    o::paid.eq(0),
                ))
                .on_conflict(o::order_id)
                .do_update()
                .set((
                    o::customer.eq(customer),
                    o::placed_at.eq(placed_at.timestamp()),
                    o::total.eq(total),
                ))
                .execute(c))?,
            OrderListEvent::Payment(PaymentEvent::Paid { amount, .. }) => {
                on_connection!(conn, |c| diesel::insert_into(o::shop_order_list_v2)
                    .values((
                        o::order_id.eq(cx.target_id),
                        o::customer.eq(""),
                        o::placed_at.eq(0),
                        o::total.eq(0),
                        o::status.eq(PAID),
                        o::paid.eq(amount),
                    ))
                    .on_conflict(o::order_id)
                    .do_update()
                    .set((o::status.eq(PAID), o::paid.eq(amount)))
                    .execute(c))?
            }
        };
        Ok(())
    }

    // Empties version 2's table only: version 1's keeps serving while this one is built.
    fn reset(&self, conn: SqlConnection<'_>, scope: &RebuildScope) -> SqlResult {
        use shop_order_list_v2::dsl as o;
        // As version 1's: no tenant column, rows fold events of any age.
        if scope.since.is_some() || !scope.tenant.is_empty() {
            let asked = format!("since {:?}, tenant {:?}", scope.since, scope.tenant);
            return Err(HandlerError::permanent(format!(
                "the order list is rebuilt from all of history only (asked: {asked})"
            ))
            .into());
        }
        match &scope.ids {
            None => on_connection!(conn, |c| diesel::delete(o::shop_order_list_v2).execute(c))?,
            Some(ids) => on_connection!(conn, |c| diesel::delete(
                o::shop_order_list_v2.filter(o::order_id.eq_any(ids))
            )
            .execute(c))?,
        };
        Ok(())
    }
}

/// The columns version 1 has too, as an [`OrderRow`].
type RowColumns = (
    shop_order_list_v2::order_id,
    shop_order_list_v2::customer,
    shop_order_list_v2::placed_at,
    shop_order_list_v2::total,
    shop_order_list_v2::status,
);

const ROW_COLUMNS: RowColumns = (
    shop_order_list_v2::order_id,
    shop_order_list_v2::customer,
    shop_order_list_v2::placed_at,
    shop_order_list_v2::total,
    shop_order_list_v2::status,
);

/// Every order of version 2, by id.
pub fn all_orders(conn: &mut AppConnection) -> QueryResult<Vec<OrderRow>> {
    use shop_order_list_v2::dsl as o;
    o::shop_order_list_v2
        .order(o::order_id)
        .select(ROW_COLUMNS)
        .load(conn)
}

/// How many orders version 2 holds.
pub fn count(conn: &mut AppConnection) -> QueryResult<i64> {
    shop_order_list_v2::table.count().get_result(conn)
}

/// The orders whose new column is wrong: a paid one that does not show its total as paid,
/// an unpaid one that shows a payment.
pub fn wrong_paid_amounts(conn: &mut AppConnection) -> QueryResult<Vec<String>> {
    use shop_order_list_v2::dsl as o;
    let paid_wrong = o::status.eq(PAID).and(o::paid.ne(o::total));
    let unpaid_wrong = o::status.eq(UNPAID).and(o::paid.ne(0));
    o::shop_order_list_v2
        .filter(paid_wrong.or(unpaid_wrong))
        .order(o::order_id)
        .select(o::order_id)
        .load(conn)
}

//! Rebuilding the order list blue/green while orders keep coming: version 2 (a projection
//! kind and a table of its own) is built from the history beside version 1, which keeps
//! serving; the job's completion switches the read model to version 2. Its progress is
//! printed until then, with how many orders a reader of the served table sees.
//!
//! ```text
//!  build_version(shop-order-list, shop-order-list-v2) ─► first step: OrderListV2::reset
//!      (empties shop_order_list_v2, in the transaction of the first replayed page) ─► history
//!      replayed through the Inbox into version 2 ─► the completion's commit switches the model
//!  meanwhile: LiveTraffic places orders; version 1 applies them as they come; version 2's
//!      wait until the replay has passed them, then are applied (or dropped, when the replay
//!      applied them already)
//!  readers: served_kind(shop-order-list) names the table to query: version 1's until the
//!      switch, version 2's after
//! ```
//!
//! A reader never sees a partial list: version 1 is never reset, and version 2 is served only
//! once it holds the whole history. At the switch version 2 may lag version 1 by the live
//! events still in flight (released by the completion, applied by the next stages), so the
//! count a reader sees may step back by those for a moment — never below the list as it was
//! when the build started. Whether the result is right is checked by main.rs against the
//! ledger.

use crate::db::AppDb;
use crate::order_list::{self, OrderList};
use crate::order_list_v2::{self, OrderListV2};
use crate::traffic::{LiveTraffic, PlannedOrder};
use crate::BoxError;
use shardbox::prelude::*;
use shardbox::CatchUpProgress;
use std::time::{Duration, Instant};

/// How often the live task places an order.
const LIVE_EVERY: Duration = Duration::from_millis(5);
/// How often the progress is printed.
const PRINT_EVERY: Duration = Duration::from_millis(250);
/// How long the rebuild may take.
const REBUILD_LIMIT: Duration = Duration::from_secs(60);

/// What the rebuild did.
pub struct Rebuilt {
    pub progress: CatchUpProgress,
    pub took: Duration,
    /// The orders placed while it ran.
    pub live_orders: Vec<PlannedOrder>,
}

/// Builds version 2 of the order list from history while a task places orders `o-live-…`;
/// prints its progress, and how many orders a reader of the served table sees, until it
/// completes. Fails if a reader ever sees fewer orders than the list held when the build
/// started, or fewer than the read of the same table before. The live orders are still being
/// delivered when it returns.
pub async fn rebuild_under_traffic(shardbox: &Shardbox, app: &AppDb) -> Result<Rebuilt, BoxError> {
    let traffic = LiveTraffic::start(shardbox.clone(), "o-live", LIVE_EVERY);
    // Let the traffic run before and during the rebuild.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let at_start = served_count(shardbox, app).await?.1;
    let job = shardbox
        .build_version(OrderList::KIND, OrderListV2::KIND)
        .await?;
    let (mut last_kind, mut least) = (String::new(), at_start);
    let watched: Result<CatchUpProgress, BoxError> = loop {
        let progress = job.progress().await?;
        let (served, rows) = served_count(shardbox, app).await?;
        println!(
            "   {}; a reader of {served} sees {rows} orders",
            describe(&progress)
        );
        if served != last_kind {
            if !last_kind.is_empty() {
                println!("   switched: {served} may lag {last_kind} by the orders in flight");
            }
            // A new table: it may lag the old one by the events in flight at the switch.
            (last_kind, least) = (served.clone(), at_start);
        }
        if rows < least {
            break Err(format!("a reader of {served} saw {rows} orders after {least}").into());
        }
        least = rows;
        if progress.status.is_finished() {
            break Ok(progress);
        }
        if started.elapsed() > REBUILD_LIMIT {
            break Err(format!("the rebuild is not done after {REBUILD_LIMIT:?}").into());
        }
        tokio::time::sleep(PRINT_EVERY).await;
    };
    let took = started.elapsed();
    let live_orders = traffic.stop().await?;
    Ok(Rebuilt {
        progress: watched?,
        took,
        live_orders,
    })
}

/// The kind serving the order list, and how many orders its table holds: what a reader of
/// the list sees.
async fn served_count(shardbox: &Shardbox, app: &AppDb) -> Result<(String, i64), BoxError> {
    let served = shardbox.served_kind(OrderList::KIND).await?;
    let rows = if served == OrderListV2::KIND {
        app.run(order_list_v2::count).await?
    } else {
        app.run(order_list::count).await?
    };
    Ok((served, rows))
}

/// A progress line: `replayed 1200/4800 (25%), 3100 events/s, ETA 1.2 s, in_progress`.
fn describe(p: &CatchUpProgress) -> String {
    let eta = p
        .eta
        .map(|d| format!(", ETA {:.1} s", d.as_secs_f64()))
        .unwrap_or_default();
    format!(
        "replayed {:>5}/{} ({:>3.0}%), {:>5.0} events/s{eta}, {}",
        p.replayed,
        p.total_estimate,
        p.fraction() * 100.0,
        p.rate,
        p.status.as_str()
    )
}

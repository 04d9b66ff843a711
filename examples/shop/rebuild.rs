//! Rebuilding the order list while orders keep coming: a catch-up of the whole projection,
//! its progress printed until it is done, with a task placing orders all along.
//!
//! ```text
//!  catch_up_kind(OrderList, all) ─► first step: OrderList::reset (DELETE, in the transaction
//!      of the first replayed page) ─► history replayed through the Inbox ─► completed
//!  meanwhile: LiveTraffic places orders; their list events wait until the replay has passed
//!      them, then are applied (or dropped, when the replay applied them already)
//! ```
//!
//! This is a reset-then-replay rebuild: between the reset and the end of the replay, readers
//! see a partial list. A blue/green rebuild (a second table built beside the served one,
//! switched in one step) is not built in Shardbox yet. Whether the result is right is checked
//! by main.rs against the ledger.

use crate::db::AppDb;
use crate::order_list::{self, OrderList};
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

/// Rebuilds the order list from history while a task places orders `o-live-…`; prints its
/// progress, and how many rows a reader sees in the list, until it completes. The live orders
/// are still being delivered when it returns.
pub async fn rebuild_under_traffic(shardbox: &Shardbox, app: &AppDb) -> Result<Rebuilt, BoxError> {
    let traffic = LiveTraffic::start(shardbox.clone(), "o-live", LIVE_EVERY);
    // Let the traffic run before and during the rebuild.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    // Reset-then-replay: the one rebuild Shardbox has (blue/green is not built yet).
    let job = shardbox
        .catch_up_kind(OrderList::KIND, CatchUp::all())
        .await?;
    let progress = loop {
        let progress = job.progress().await?;
        let rows = app.run(order_list::count).await?;
        println!("   {}; {rows} rows in the list", describe(&progress));
        if progress.status.is_finished() {
            break progress;
        }
        if started.elapsed() > REBUILD_LIMIT {
            traffic.stop().await?;
            return Err(format!("the rebuild is not done after {REBUILD_LIMIT:?}").into());
        }
        tokio::time::sleep(PRINT_EVERY).await;
    };
    let took = started.elapsed();
    let live_orders = traffic.stop().await?;
    Ok(Rebuilt {
        progress,
        took,
        live_orders,
    })
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

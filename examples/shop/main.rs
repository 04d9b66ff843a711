//! A shop with a read model the application queries (issue 34): orders and payments, an
//! order list in the application's own SQL table, and the four things an application does
//! with it — query it, evolve the events under it, read its own writes, rebuild a new version
//! of it beside the served one while orders keep coming (blue/green).
//!
//! Run with `cargo run --example shop` (a fresh SQLite file in a temporary directory), or
//! `cargo run --example shop -- --postgres postgres://postgres@127.0.0.1:5432/test` (a fresh
//! schema of its own in that database, dropped at the end). It exits non-zero if the table is
//! not what the orders sent make it.
//!
//! ```text
//!  1. history      the v1 code writes orders whose event said `amount` (version 1)
//!  2. the app      v2 code: Order, Payment, the v1 ─► v2 upcaster, the OrderList SQL projection
//!                  (table shop_order_list) and its version 2 OrderListV2 (shop_order_list_v2)
//!  3. backfill     a catch-up fills the new list from history: the v1 orders, upcast
//!  4. seed         thousands of orders and payments, delivered live
//!  5. query        one customer's orders between two dates, newest first (typed diesel)
//!  6. web          place_order: send, await the list (read-your-writes), answer with the page
//!  7. blue/green   version 2 built from history beside version 1 while a task keeps placing
//!                  orders; readers of the served table see the whole list all along; the
//!                  completion switches the model to version 2; version 1 retired, its table
//!                  dropped
//!  8. checks       every order in version 2's table once, totals, statuses, amounts paid right
//! ```
//!
//! Readers pick the table by `served_kind`: version 1's until the switch, version 2's after
//! (see docs/read-models.md, "Blue/green rebuilds").
//!
//! ```text
//!  main.rs        the run, above
//!  db.rs          SQLite file or PostgreSQL schema; the application's connection, migrated
//!  domain.rs      the aggregates Order and Payment, their events, the v1 ─► v2 upcaster
//!  legacy.rs      the v1 code that wrote the history
//!  order_list.rs  the SQL projection, its table and migration, the queries
//!  order_list_v2.rs  version 2: the same and the amount paid, in a table of its own
//!  web.rs         the web handler with read-your-writes
//!  traffic.rs     the orders the run places, in bulk or from a live task
//!  rebuild.rs     the blue/green rebuild under traffic, with progress and what readers see
//!  expected.rs    the fold of what was sent, and the table's comparison with it
//! ```

mod db;
mod domain;
mod expected;
mod legacy;
mod order_list;
mod order_list_v2;
mod rebuild;
mod traffic;
mod web;

use chrono::{Duration as Span, TimeZone, Utc};
use db::{AppDb, ShopDb};
use diesel::connection::SimpleConnection;
use domain::{Order, OrderEvent, Payment};
use expected::{totals_of, Ledger};
use order_list::OrderList;
use order_list_v2::OrderListV2;
use shardbox::prelude::*;
use std::time::{Duration, Instant};
use traffic::{planned, PlannedOrder};
use web::Page;

/// An error of the run: any cause, sent across tasks.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How many orders the seed places (two of three paid).
const SEED_ORDERS: u32 = 3_000;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let started = Instant::now();
    let db = match postgres_url()? {
        None => ShopDb::sqlite().await?,
        Some(url) => ShopDb::postgres(&url).await?,
    };
    println!("storage: {}", db.described);
    let mut ledger = Ledger::default();

    let stored = legacy::write_history(&db.storage).await?;
    ledger.record(legacy::history());
    println!("\n1. history: the v1 code stored {stored} order events at version 1 (`amount`)");

    let shardbox = Shardbox::builder()
        .shared_storage(db.storage.clone())
        .shards(4)
        .poll_interval(Duration::from_millis(100))
        .aggregate::<Order>()
        .aggregate::<Payment>()
        .sql_projection(OrderList)
        .sql_projection(OrderListV2)
        .upcast::<OrderEvent>(1, domain::order_event_v1)
        .build()
        .await?;
    let node = shardbox.start();
    println!("2. the app: v2 code (`total`) with the upcaster from version 1");
    let steps = async {
        backfill(&shardbox, &db.app, &ledger).await?;
        seed(&shardbox, &db.app, &mut ledger).await?;
        query(&db.app).await?;
        web_request(&shardbox, &db.app, &mut ledger).await?;
        rebuild(&shardbox, &db.app, &mut ledger).await
    };
    let done: Result<(), BoxError> = steps.await;
    // The node's leases are released, whatever became of the steps.
    node.shutdown().await?;
    done?;

    let rows = db.app.run(order_list_v2::all_orders).await?;
    check("8. checks", &ledger, &rows)?;
    println!(
        "\nsummary: {} in shop_order_list_v2, as placed ({} by v1 code); {}; {:.1} s",
        totals_of(&rows),
        legacy::history().len(),
        db.described,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--postgres URL`, if given.
fn postgres_url() -> Result<Option<String>, BoxError> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next(), args.next()) {
        (None, ..) => Ok(None),
        (Some("--postgres"), Some(url), None) => Ok(Some(url)),
        _ => Err("usage: shop [--postgres postgres://user@host:port/database]".into()),
    }
}

/// Step 3: the order list is new in this version, so a catch-up fills it from history — the
/// v1 orders, read through the upcaster.
async fn backfill(shardbox: &Shardbox, app: &AppDb, ledger: &Ledger) -> Result<(), BoxError> {
    let job = shardbox
        .catch_up_kind(OrderList::KIND, CatchUp::all())
        .await?;
    let done = job.wait(Duration::from_secs(30)).await?;
    if !done.status.is_finished() {
        return Err(format!("the backfill is not done after 30 s: {done:?}").into());
    }
    settled(shardbox).await?;
    let rows = app.run(order_list::all_orders).await?;
    println!(
        "3. backfill: the list filled from history, upcast ({} events replayed):\n{}",
        done.replayed,
        order_list::render(&rows, "     ")
    );
    check("   the v1 orders", ledger, &rows)
}

/// Step 4: the seed orders, sent in bulk and delivered live.
async fn seed(shardbox: &Shardbox, app: &AppDb, ledger: &mut Ledger) -> Result<(), BoxError> {
    let started = Instant::now();
    let orders: Vec<_> = (0..SEED_ORDERS).map(|n| planned("o-seed", n)).collect();
    traffic::send_bulk(shardbox, &orders).await?;
    ledger.record(orders);
    settled(shardbox).await?;
    let rows = app.run(order_list::all_orders).await?;
    println!(
        "4. seed: {SEED_ORDERS} orders and their payments placed and listed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    check("   the list", ledger, &rows)
}

/// Step 5: one customer's orders between two dates, newest first.
async fn query(app: &AppDb) -> Result<(), BoxError> {
    let day = |d| Utc.with_ymd_and_hms(2026, 3, d, 0, 0, 0).single();
    let (Some(from), Some(end)) = (day(2), day(5)) else {
        return Err("not a date".into());
    };
    let to = end - Span::seconds(1); // to the end of 4 March
    let rows = app
        .run(move |c| order_list::orders_of(c, "chen", from, to, 100))
        .await?;
    println!(
        "5. query: chen's orders from {} to {}, newest first:\n{}",
        from.date_naive(),
        to.date_naive(),
        order_list::render(&rows, "     ")
    );
    let newest_first = rows.windows(2).all(|w| w[0].placed_at >= w[1].placed_at);
    let in_range = |t| (from.timestamp()..=to.timestamp()).contains(&t);
    if rows.is_empty() || !newest_first || rows.iter().any(|r| !in_range(r.placed_at)) {
        return Err("the query's rows are not chen's in range, newest first".into());
    }
    Ok(())
}

/// Step 6: a web request places an order and its page shows it at once.
async fn web_request(
    shardbox: &Shardbox,
    app: &AppDb,
    ledger: &mut Ledger,
) -> Result<(), BoxError> {
    let (order, page, took) = web_order(shardbox, app).await;
    println!(
        "6. web: place_order answered in {} ms:\n     {} {}",
        took.as_millis(),
        page.status,
        page.body.replace('\n', "\n     ")
    );
    if page.status != 201 || !page.body.contains(&order.id) {
        return Err(format!("the page does not show {}", order.id).into());
    }
    ledger.record([order]);
    Ok(())
}

/// The web order: alice's, an hour after the last seed order, unpaid. Returns it, the page
/// and how long the request took.
async fn web_order(shardbox: &Shardbox, app: &AppDb) -> (PlannedOrder, Page, Duration) {
    let order = PlannedOrder {
        id: "o-web-00001".into(),
        customer: "alice".into(),
        total: 3_490,
        placed_at: planned("o-seed", SEED_ORDERS).placed_at + Span::hours(1),
        paid: false,
    };
    let started = Instant::now();
    let page = web::place_order(
        shardbox,
        app,
        &order.id,
        &order.customer,
        order.total,
        order.placed_at,
    )
    .await;
    (order, page, started.elapsed())
}

/// Step 7: version 2 of the list built beside version 1 while orders keep coming; after the
/// switch both must equal the ledger (version 1 kept receiving live events); then version 1
/// is retired and its table dropped.
async fn rebuild(shardbox: &Shardbox, app: &AppDb, ledger: &mut Ledger) -> Result<(), BoxError> {
    println!(
        "7. blue/green: version 2 of the list ({}) built beside the served one while a task \
         keeps placing orders:",
        OrderListV2::KIND
    );
    let rebuilt = rebuild::rebuild_under_traffic(shardbox, app).await?;
    if rebuilt.progress.status != shardbox::CatchUpStatus::Completed {
        return Err(format!("the rebuild ended {:?}", rebuilt.progress.status).into());
    }
    let served = shardbox.served_kind(OrderList::KIND).await?;
    if served != OrderListV2::KIND {
        return Err(format!("the completed build left {served} serving").into());
    }
    let live = rebuilt.live_orders.len();
    ledger.record(rebuilt.live_orders);
    settled(shardbox).await?;
    println!(
        "   built and switched to {served} in {:.1} s, {} events replayed; {live} orders placed \
         meanwhile",
        rebuilt.took.as_secs_f64(),
        rebuilt.progress.replayed
    );
    check(
        "   version 2",
        ledger,
        &app.run(order_list_v2::all_orders).await?,
    )?;
    check_paid_amounts("   version 2's amounts paid", app).await?;
    check(
        "   version 1",
        ledger,
        &app.run(order_list::all_orders).await?,
    )?;
    // Version 1 serves no reader now: its framework states go, and its table is the
    // application's to drop. (Its registration goes with the next release: until then its
    // live events would fail on the missing table; none come in this run.)
    let deleted = shardbox
        .retire_version(OrderList::KIND, OrderList::KIND)
        .await?;
    app.run(|c| c.batch_execute("DROP TABLE shop_order_list"))
        .await?;
    println!("   version 1 retired ({deleted} framework states deleted), shop_order_list dropped");
    Ok(())
}

/// Checks version 2's new column: every paid order paid its total, no unpaid one paid.
async fn check_paid_amounts(what: &str, app: &AppDb) -> Result<(), BoxError> {
    let wrong = app.run(order_list_v2::wrong_paid_amounts).await?;
    if !wrong.is_empty() {
        return Err(format!("{}: wrong for {wrong:?}", what.trim()).into());
    }
    println!("{what}: ok");
    Ok(())
}

/// Compares the whole table with the ledger; prints `ok` or fails naming the differences.
fn check(what: &str, ledger: &Ledger, rows: &[order_list::OrderRow]) -> Result<(), BoxError> {
    let wrong = ledger.differences(rows, 10);
    if !wrong.is_empty() {
        return Err(format!("{}: {}", what.trim(), wrong.join("; ")).into());
    }
    let (found, expected) = (totals_of(rows), ledger.totals());
    if found != expected {
        return Err(format!("{}: {found}, expected {expected}", what.trim()).into());
    }
    println!("{what}: {found}: ok");
    Ok(())
}

/// Waits until nothing is left to deliver (at most 30 s).
async fn settled(shardbox: &Shardbox) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while shardbox.storage().counts(None).await?.pending() > 0 {
        if Instant::now() > deadline {
            return Err("messages still pending after 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

//! The web dashboard in a real browser: headless Chromium driven through chromedriver over
//! the WebDriver protocol, against `shardbox serve --allow-actions` run as a process over a
//! seeded SQLite database. It reads the counts the seed must show, clicks requeue on the
//! dead letter, sees the row leave, runs a node over the same database and sees the message
//! delivered — in the application's state and on the page.
//!
//! Without /usr/bin/chromium and /usr/bin/chromedriver it prints a SKIPPED banner and
//! passes; with CI=true it fails instead (.ci/run installs them).

mod support;

use shardbox::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use support::seed::{self, Ledger};
use support::serve::Served;
use support::webdriver::{available_or_skip, Browser};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_seed_and_requeues_a_dead_letter() {
    if !available_or_skip("the_dashboard_shows_the_seed_and_requeues_a_dead_letter") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dashboard.db");
    let storage = SqliteStorage::open(&path).await.expect("open");
    let (sb, gate) = seed::seed(Arc::new(storage)).await;
    // A paused kind, which the page lists with a resume button.
    sb.pause_kind(Ledger::KIND).await.expect("pause");
    let server = Served::start(path.to_str().expect("utf-8"), None, &["--allow-actions"]);
    let url = format!("http://{}/", server.addr);

    let browser = tokio::task::spawn_blocking(move || {
        let browser = Browser::start();
        browser.goto(&url);
        browser.wait_until("the first refresh", WAIT, |b| {
            b.script("return Number(document.body.dataset.refreshes)")
                .as_u64()
                .is_some_and(|n| n >= 1)
        });
        let counts = [
            ("#count-due", "1"),
            ("#count-delayed", "1"),
            ("#count-parked", "1"),
            ("#count-blocked-rows", "1"),
            ("#count-delivered", "3"),
            ("#count-dead-letters", "1"),
            ("#count-blocked", "1"),
            ("#count-nodes", "1"),
            ("#count-shards", "4"),
            ("#count-catch-ups", "0"),
        ];
        for (id, expected) in counts {
            assert_eq!(browser.text_of(id), expected, "{id}");
        }
        assert_eq!(browser.text_of("#actions-state"), "actions enabled");
        let node = browser.find(
            &format!("tr[data-node=\"{}\"]", seed::NODE),
            Duration::from_secs(1),
        );
        assert!(browser.text(&node).starts_with(seed::NODE));
        let blocked = browser.find("tr[data-blocked=\"vault/v-1\"]", Duration::from_secs(1));
        assert!(browser.text(&blocked).contains("poison pill"));
        let rows = browser.find_all("tr[data-dead-letter]");
        assert_eq!(rows.len(), 1, "one dead letter listed");
        let id = browser
            .attribute(&rows[0], "data-dead-letter")
            .expect("its id");
        assert!(browser.text(&rows[0]).contains("ledger/l-9"));
        assert!(browser.text(&rows[0]).contains("ledger closed"));
        let plotted = browser.find("#plot", Duration::from_secs(1));
        assert!(browser
            .attribute(&plotted, "data-points")
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|p| p >= 1));

        let paused = browser.find("tr[data-kind=\"ledger\"]", Duration::from_secs(1));
        assert_eq!(
            browser.attribute(&paused, "data-paused").as_deref(),
            Some("true")
        );
        assert!(browser.text(&paused).contains("paused since"));
        let resume = browser.find("button[data-resume=\"ledger\"]", Duration::from_secs(1));
        browser.click(&resume);
        browser.wait_until("the kind shows running", WAIT, |b| {
            !b.find_all("tr[data-kind=\"ledger\"][data-paused=\"false\"]")
                .is_empty()
        });
        assert_eq!(browser.text_of("#message"), "ledger resumed, 0 due");

        let requeue = browser.find(
            &format!("button[data-requeue=\"{id}\"]"),
            Duration::from_secs(1),
        );
        browser.click(&requeue);
        browser.wait_until("the dead letter leaves the list", WAIT, |b| {
            b.find_all(&format!("tr[data-dead-letter=\"{id}\"]"))
                .is_empty()
        });
        assert_eq!(browser.text_of("#count-dead-letters"), "0");
        assert_eq!(
            browser.text_of("#message"),
            "requeued 1 (already in the Inbox 0)"
        );
        assert_eq!(
            browser.text_of("#count-due"),
            "2",
            "l-5 and the requeued l-9"
        );
        browser
    })
    .await
    .expect("browser steps");

    let ledger = sb.kind_controls().await.expect("controls");
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].paused_since, None, "resumed from the page");

    // A node over the same database delivers the requeued command, now accepted.
    gate.0.store(true, Ordering::SeqCst);
    let node = sb.start();
    assert!(node.drain(Duration::from_secs(20)).await.expect("drain"));
    node.shutdown().await.expect("shutdown");
    let l9 = sb.aggregate_state::<Ledger>("l-9").await.expect("state");
    assert_eq!(
        l9.map(|l| l.applied),
        Some(1),
        "the requeued command applied"
    );

    tokio::task::spawn_blocking(move || {
        browser.wait_until("the page shows it delivered", WAIT, |b| {
            b.text_of("#count-delivered") == "5" && b.text_of("#count-due") == "0"
        });
        assert_eq!(browser.text_of("#count-dead-letters"), "0");
    })
    .await
    .expect("browser steps");
    drop(server);
}

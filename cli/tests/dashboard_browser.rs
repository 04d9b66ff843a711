//! The web dashboard in a real browser: headless Chromium driven through chromedriver over
//! the WebDriver protocol.
//!
//! - Against `shardbox serve --allow-actions` run as a process over a seeded SQLite
//!   database: the counts the seed must show, the node count and the attention banner as
//!   `shardbox status` prints them, red tiles only above zero, ages rather than raw
//!   timestamps, a dead letter's payload and failures in a dialog, a resume, a requeue, the
//!   history kept by the server across a reload, and a node delivering what was requeued
//!   (seen on the page and in the delivered-per-second plot).
//! - Against the router in this process, with long names, a running catch-up and an hour of
//!   history recorded:
//!   nothing clipped or sticking out of its panel at 1280 and 1920 px wide, four plots with
//!   time axes over the hour. With `SHARDBOX_DASHBOARD_SCREENSHOT=path.png` it saves a
//!   screenshot of the whole page at 1280 px there.
//!
//! Without /usr/bin/chromium and /usr/bin/chromedriver it prints a SKIPPED banner and
//! passes; with CI=true it fails instead (.ci/run installs them).

mod support;

use shardbox::admin::history::{Sample, SAMPLE_EVERY};
use shardbox::admin::AdminState;
use shardbox::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use support::binary;
use support::seed::{self, Cmd, Ledger, Vault};
use support::serve::Served;
use support::webdriver::{available_or_skip, Browser};

const WAIT: Duration = Duration::from_secs(20);

/// Every control, table, plot and count that sticks out of its panel or clips its own
/// content, and whether the page scrolls sideways: an empty list when the layout fits.
const LAYOUT_PROBLEMS: &str = r##"
const problems = [];
const de = document.documentElement;
if (de.scrollWidth > de.clientWidth) problems.push(`the page scrolls sideways: ${de.scrollWidth} > ${de.clientWidth}`);
const name = e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + " '" + (e.textContent || "").trim().slice(0, 40) + "'";
const shown = "main section, main table, main button, main select, main svg, main progress, main .count, #attention, dialog[open] *";
for (const e of document.querySelectorAll(shown)) {
  const r = e.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;
  const panel = e.parentElement.closest("section, #attention, dialog, body");
  const p = panel.getBoundingClientRect();
  if (r.left < p.left - 0.5 || r.right > p.right + 0.5)
    problems.push(`${name(e)} sticks out of ${name(panel).slice(0, 30)}: ${r.left}..${r.right} beyond ${p.left}..${p.right}`);
  if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowY !== "auto")
    problems.push(`${name(e)} clips its content: ${e.scrollWidth} > ${e.clientWidth}`);
  const cell = e.tagName === "BUTTON" && e.closest("td");
  if (cell) {
    const c = cell.getBoundingClientRect();
    if (r.left < c.left - 0.5 || r.right > c.right + 0.5) problems.push(`${name(e)} sticks out of its cell`);
    if (r.height > 2.2 * parseFloat(getComputedStyle(e).fontSize) + 8) problems.push(`${name(e)} wraps: ${r.height}px high`);
  }
}
return problems;
"##;

/// Raw timestamps in the visible text: RFC 3339 instants, or times with fractions.
const RAW_TIMES: &str = r##"
const text = document.body.innerText;
return (text.match(/\d{4}-\d\d-\d\dT\d\d:\d\d\S*/g) || []).concat(text.match(/\d\d:\d\d:\d\d\.\d+/g) || []);
"##;

/// The attention banner's lines as `shardbox status` writes them.
const BANNER: &str = r##"
return [...document.querySelectorAll("#attention li")].map(li => {
  const what = li.querySelector(".what").textContent;
  const code = li.querySelector("code");
  return code ? what + ": `" + code.textContent + "`" : what;
});
"##;

fn refreshes(b: &Browser) -> u64 {
    b.script("return Number(document.body.dataset.refreshes)")
        .as_u64()
        .unwrap_or(0)
}

/// Waits for the page's next completed refresh (the first after a load).
fn next_refresh(b: &Browser) {
    let seen = refreshes(b);
    b.wait_until("a refresh", WAIT, |b| refreshes(b) > seen);
}

fn plot_points(b: &Browser, plot: &str) -> u64 {
    b.script(&format!(
        "return Number(document.getElementById('plot-{plot}').dataset.points)"
    ))
    .as_u64()
    .unwrap_or(0)
}

fn plot_max(b: &Browser, plot: &str) -> f64 {
    b.script(&format!(
        "return Number(document.getElementById('plot-{plot}').dataset.max)"
    ))
    .as_f64()
    .unwrap_or(0.0)
}

fn strings(v: serde_json::Value) -> Vec<String> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

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
    let db = path.to_str().expect("utf-8").to_owned();
    let server = Served::start(&db, None, &["--allow-actions"]);
    let url = format!("http://{}/", server.addr);

    // What `shardbox status` says of the same database.
    let cli = binary::run(&db, None, &["status"]);
    assert_eq!(binary::code(&cli), 0, "{}", binary::stderr(&cli));
    let cli = binary::stdout(&cli);
    assert!(cli.contains("0 live nodes"), "{cli}");
    let cli_attention: Vec<String> = cli
        .lines()
        .filter_map(|l| l.strip_prefix("attention: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(cli_attention.len(), 3, "{cli}");

    let browser = tokio::task::spawn_blocking(move || {
        let browser = Browser::start();
        browser.goto(&url);
        next_refresh(&browser);
        let counts = [
            ("#count-due", "1"),
            ("#count-delayed", "1"),
            ("#count-parked", "1"),
            ("#count-blocked-rows", "1"),
            ("#count-delivered", "3"),
            ("#count-dead-letters", "1"),
            ("#count-blocked", "1"),
            ("#count-nodes", "0"),
            ("#count-leases", "0"),
            ("#count-shards", "4"),
            ("#count-catch-ups", "0"),
        ];
        for (id, expected) in counts {
            assert_eq!(browser.text_of(id), expected, "{id}");
        }
        assert_eq!(browser.text_of("#count-nodes-known"), "1 known");
        assert_eq!(
            strings(browser.script(BANNER)),
            cli_attention,
            "the banner is status's"
        );
        let red = strings(
            browser
                .script("return [...document.querySelectorAll('.count.alert b')].map(b => b.id)"),
        );
        assert_eq!(
            red,
            ["count-blocked-rows", "count-dead-letters", "count-blocked"],
            "red only above zero"
        );
        assert_eq!(strings(browser.script(RAW_TIMES)), Vec::<String>::new());
        assert_eq!(browser.text_of("#actions-state"), "actions enabled");
        // The tables are redrawn on every refresh: each read finds its element again.
        let node = browser.text_of(&format!("tr[data-node=\"{}\"]", seed::NODE));
        assert!(node.starts_with(seed::NODE));
        assert!(node.contains("not a member"));
        let blocked = browser.text_of("tr[data-blocked=\"vault/v-1\"]");
        assert!(blocked.contains("poison pill"));
        let rows = browser.find_all("tr[data-dead-letter]");
        assert_eq!(rows.len(), 1, "one dead letter listed");
        let id = browser
            .attribute_of("tr[data-dead-letter]", "data-dead-letter")
            .expect("its id");
        let row = browser.text_of(&format!("tr[data-dead-letter=\"{id}\"]"));
        assert!(row.contains("ledger/l-9"));
        assert!(row.contains("ledger closed"));

        // The dead letter's payload and failures.
        browser.click_on(&format!("button[data-show=\"{id}\"]"));
        browser.wait_until("the dead letter's dialog", WAIT, |b| {
            b.script("return document.getElementById('dead-letter').open") == true
        });
        assert_eq!(browser.text_of("#dead-letter-payload"), "\"Flaky\"");
        assert_eq!(browser.text_of("#dead-letter-type"), "admin-test.cmd");
        let errors = browser.text_of("#dead-letter-errors");
        assert!(errors.contains("attempt 1 failed"), "{errors}");
        assert!(errors.contains("ledger closed"), "{errors}");
        // The stored history lists each kept attempt: here its one, which killed it.
        let attempts = browser.find_all("#dead-letter-errors li[data-attempt]");
        assert_eq!(attempts.len(), 1, "{errors}");
        assert_eq!(
            browser.attribute(&attempts[0], "data-attempt").as_deref(),
            Some("1")
        );
        assert_eq!(strings(browser.script(RAW_TIMES)), Vec::<String>::new());
        let close = browser.find("#dead-letter-close", Duration::from_secs(1));
        browser.click(&close);

        let paused = "tr[data-kind=\"ledger\"]";
        assert_eq!(
            browser.attribute_of(paused, "data-paused").as_deref(),
            Some("true")
        );
        assert!(browser.text_of(paused).contains("paused for"));
        // Counts by kind: ledger's due, delayed and dead letter; vault's blocked target and
        // the message parked behind it (a kind the kinds list lacks: no live node registers
        // it, it has no controls).
        let cell = |kind: &str, field: &str| {
            browser.text_of(&format!(
                "tr[data-kind=\"{kind}\"] td[data-field=\"{field}\"]"
            ))
        };
        assert_eq!(cell("ledger", "due"), "1");
        assert_eq!(cell("ledger", "waiting"), "1");
        assert_eq!(cell("ledger", "dead-letters"), "1");
        assert_eq!(cell("ledger", "blocked-targets"), "0");
        assert_eq!(cell("vault", "due"), "0");
        assert_eq!(cell("vault", "waiting"), "1");
        assert_eq!(cell("vault", "dead-letters"), "0");
        assert_eq!(cell("vault", "blocked-targets"), "1");
        browser.click_on("button[data-resume=\"ledger\"]");
        browser.wait_until("the kind shows running", WAIT, |b| {
            !b.find_all("tr[data-kind=\"ledger\"][data-paused=\"false\"]")
                .is_empty()
        });
        assert_eq!(browser.text_of("#message"), "ledger resumed, 0 due");

        // The history is the server's: a reload keeps it.
        browser.wait_until("two samples plotted", WAIT, |b| {
            plot_points(b, "depth") >= 2
        });
        // A short history starts at the plot's left edge, not in a sliver at the right.
        let first_x = browser
            .script(
                "const p = document.querySelector('#plot-depth polyline[data-series=\"due\"]'); \
                 return Number(p.getAttribute('points').split(' ')[0].split(',')[0])",
            )
            .as_f64()
            .expect("x");
        assert!(first_x < 60.0, "the first sample at x {first_x}");
        let before = plot_points(&browser, "depth");
        browser.reload();
        browser.wait_until("the first refresh after the reload", WAIT, |b| {
            refreshes(b) >= 1
        });
        assert!(
            plot_points(&browser, "depth") >= before,
            "kept across a reload"
        );
        for plot in ["depth", "lag", "delivered", "failures"] {
            let ticks = browser.find_all(&format!("#plot-{plot} text.x-tick"));
            assert!(ticks.len() >= 2, "{plot}: time labels on its axis");
            let label = browser.text_of(&format!("#plot-{plot} text.x-tick"));
            assert!(
                label.len() >= 5 && label.as_bytes()[2] == b':',
                "{plot}: {label:?} is a time"
            );
        }

        browser.click_on(&format!("button[data-requeue=\"{id}\"]"));
        browser.wait_until("the dead letter leaves the list", WAIT, |b| {
            b.find_all(&format!("tr[data-dead-letter=\"{id}\"]"))
                .is_empty()
        });
        assert_eq!(browser.text_of("#count-dead-letters"), "0");
        assert!(
            browser
                .find_all(".count.alert #count-dead-letters")
                .is_empty(),
            "no longer red at 0"
        );
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
        browser.wait_until("the delivered plot rises", WAIT, |b| {
            plot_max(b, "delivered") > 0.0
        });
    })
    .await
    .expect("browser steps");
    drop(server);
}

/// An hour of samples every [`SAMPLE_EVERY`] up to `end`: a backlog that builds and drains,
/// deliveries, and failures now and then.
fn record_an_hour(state: &AdminState, end: chrono::DateTime<chrono::Utc>) {
    let every = SAMPLE_EVERY.as_secs() as i64;
    let n = 3600 / every;
    let mut delivered = 0u64;
    let mut dead = 0u64;
    for i in 0..=n {
        let phase = i as f64 / n as f64 * std::f64::consts::TAU * 2.0;
        let due = (60.0 + 50.0 * phase.sin()).round() as u64;
        delivered += 40 + (20.0 * phase.cos()).round() as u64;
        if i % 37 == 0 {
            dead += 1;
        }
        state.history().record(Sample {
            at: end - chrono::TimeDelta::seconds((n - i) * every),
            due,
            waiting: 10 + (i % 12) as u64,
            blocked: 1,
            lag_ms: due as i64 * 150,
            delivered_rows: delivered,
            dead_letters: dead,
            counters: None,
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_fits_1280_and_1920_with_an_hour_of_history() {
    if !available_or_skip("the_dashboard_fits_1280_and_1920_with_an_hour_of_history") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dashboard.db");
    let storage: Arc<dyn shardbox::core::Storage> =
        Arc::new(SqliteStorage::open(&path).await.expect("open"));
    let (sb, _gate) = seed::seed(storage.clone()).await;
    // Long names, as real ones can be: they wrap, not push a table out of its panel.
    for i in 0..3 {
        let id = format!("ledger-{i}-with-a-long-identifier-{}", "x".repeat(48));
        sb.send::<Ledger>(&id, &Cmd::Flaky).await.expect("send");
    }
    let vault = format!("vault-with-a-long-identifier-{}", "y".repeat(60));
    sb.send::<Vault>(&vault, &Cmd::Poison).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    sb.pause_kind(Vault::KIND).await.expect("pause");

    let state = AdminState::new(storage).allow_actions(true);
    record_an_hour(&state, chrono::Utc::now() - chrono::TimeDelta::seconds(5));
    let app = shardbox::admin::router(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = tokio::spawn(async move { shardbox::admin::axum::serve(listener, app).await });
    let url = format!("http://{addr}/");
    // A running catch-up, with its progress bar and cancel button.
    let started = support::http::call(
        &addr.to_string(),
        "POST",
        "/api/catch-ups",
        Some(r#"{"projection_kind": "ledger-balances-rebuilt-by-an-operator", "ids": ["l-1"], "force": true}"#),
    )
    .await;
    assert_eq!(started.status, 202, "{}", started.body);
    let screenshot = std::env::var_os("SHARDBOX_DASHBOARD_SCREENSHOT");

    tokio::task::spawn_blocking(move || {
        let browser = Browser::start();
        assert_eq!(browser.resize(1280, 1000), 1280);
        browser.goto(&url);
        next_refresh(&browser);
        assert_eq!(browser.find_all("tr[data-dead-letter]").len(), 4);
        assert_eq!(browser.find_all("tr[data-blocked]").len(), 2);
        assert_eq!(browser.find_all("tr[data-catch-up]").len(), 1);

        for width in [1280, 1920] {
            assert_eq!(browser.resize(width, 1000), u64::from(width));
            next_refresh(&browser);
            let problems = strings(browser.script(LAYOUT_PROBLEMS));
            assert!(problems.is_empty(), "at {width} px: {problems:#?}");
        }

        for plot in ["depth", "lag", "delivered", "failures"] {
            assert!(plot_points(&browser, plot) >= 700, "{plot}: the hour");
            assert!(plot_max(&browser, plot) > 0.0, "{plot}: something drawn");
            let ticks = browser.find_all(&format!("#plot-{plot} text.x-tick"));
            assert!(ticks.len() >= 3, "{plot}: {} time labels", ticks.len());
            let span = browser
                .script(&format!(
                    "const t = [...document.querySelectorAll('#plot-{plot} text.x-tick')].map(e => Number(e.dataset.t)); return (t[t.length - 1] - t[0]) / 60000"
                ))
                .as_f64()
                .expect("minutes");
            assert!(span >= 40.0, "{plot}: the axis spans the hour ({span} min)");
            assert!(!browser
                .find_all(&format!("#plot-{plot} text.y-tick"))
                .is_empty());
        }

        // The window selector narrows every plot to the last 5 minutes (a sample per 5 s).
        let narrowed = browser
            .script(
                "const s = document.getElementById('plot-window'); s.value = '300000'; \
                 s.dispatchEvent(new Event('change')); \
                 return [...document.querySelectorAll('svg[data-plot]')].map(p => Number(p.dataset.points))",
            )
            .as_array()
            .expect("points")
            .iter()
            .map(|p| p.as_u64().expect("a count"))
            .collect::<Vec<_>>();
        assert_eq!(narrowed.len(), 4);
        assert!(
            narrowed.iter().all(|p| (55..=70).contains(p)),
            "{narrowed:?}"
        );
        browser.script(
            "const s = document.getElementById('plot-window'); s.value = '0'; \
             s.dispatchEvent(new Event('change'))",
        );

        assert_eq!(browser.resize(1280, 1000), 1280);
        next_refresh(&browser);
        browser.click_on("button[data-show]");
        browser.wait_until("the dead letter's dialog", WAIT, |b| {
            b.script("return document.getElementById('dead-letter').open") == true
        });
        let problems = strings(browser.script(LAYOUT_PROBLEMS));
        assert!(problems.is_empty(), "with the dialog open: {problems:#?}");
        let close = browser.find("#dead-letter-close", Duration::from_secs(1));
        browser.click(&close);

        if let Some(path) = screenshot {
            browser.script("window.scrollTo(0, 0)");
            next_refresh(&browser);
            browser.screenshot(std::path::Path::new(&path));
        }
    })
    .await
    .expect("browser steps");
    served.abort();
}

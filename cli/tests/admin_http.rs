//! The admin HTTP surface without a browser: `shardbox serve` run as a process over a
//! seeded database (read-only, then with --allow-actions), and the router mounted beside a
//! running node; on SQLite, and on PostgreSQL when SHARDBOX_PG_URL is set (skipped loudly
//! without). The client is a tool's: `Host` the address, a JSON content type, no `Origin`;
//! the guard's tests send what a browser on another site would.

mod support;

use diesel::connection::{Connection, SimpleConnection};
use serde_json::{json, Value};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{DeadLetterFilter, PostgresStorage};
use shardbox_storage::test_schema::{pg_url, TestSchema};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use support::http::{call, call_with, mount, Reply};
use support::seed::{self, Ledger};
use support::serve::Served;

async fn get(addr: &str, path: &str) -> Reply {
    call(addr, "GET", path, None).await
}

async fn post(addr: &str, path: &str, body: Value) -> Reply {
    call(addr, "POST", path, Some(&body.to_string())).await
}

/// Asserts `reply` is `status` with a JSON error containing `words`.
fn refused(reply: &Reply, status: u16, words: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let error = reply.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains(words), "{error:?} should say {words:?}");
}

/// Health, metrics, every view and the refusal of actions, on a read-only server.
async fn read_only(sb: &Shardbox, addr: &str) {
    let live = get(addr, "/health/live").await;
    assert_eq!((live.status, live.json()), (200, json!({ "live": true })));
    let ready = get(addr, "/health/ready").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    let ready = ready.json();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["schema"]["detail"], "current");
    assert!(ready["workers"]["detail"]
        .as_str()
        .expect("detail")
        .contains("standalone"));

    let metrics = get(addr, "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")));
    let text = &metrics.body;
    let due_shard = sb.shard_of(Ledger::KIND, "l-5").0;
    for line in [
        "# TYPE shardbox_inbox_depth gauge".to_owned(),
        // The labels a node's own recorder gives (state; the shard is the lag's label).
        "shardbox_inbox_depth{state=\"due\"} 1".to_owned(),
        "shardbox_dead_letters 1".to_owned(),
        "shardbox_blocked_targets 1".to_owned(),
        format!("shardbox_leases_held{{node=\"{}\"}} 0", seed::NODE),
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
    assert!(text.contains(&format!(
        "shardbox_shard_lag_seconds{{shard=\"{due_shard}\"}} "
    )));
    // One catalog: every help line is core's, the one the `metrics` facade describes.
    let mut helped = 0;
    for line in text.lines().filter(|l| l.starts_with("# HELP ")) {
        let (name, help) = line["# HELP ".len()..]
            .split_once(' ')
            .expect("name and help");
        assert_eq!(Some(help), shardbox::core::metric_help(name), "{name}");
        helped += 1;
    }
    // Every gauge with a line: the exporter writes no header for a metric without one, and
    // the catch-up progress gauges have lines only while a catch-up runs.
    assert_eq!(helped, 7, "every gauge of core's catalog:\n{text}");
    assert!(
        !text.contains("shardbox_delivered_total"),
        "a standalone server has no node counters"
    );

    let status = get(addr, "/api/status").await.json();
    let totals = &status["totals"];
    assert_eq!(
        [
            &totals["due"],
            &totals["delayed"],
            &totals["parked"],
            &totals["blocked"],
            &totals["delivered"]
        ],
        [
            &json!(1),
            &json!(1),
            &json!(1),
            &json!(1),
            &json!(seed::DELIVERED)
        ],
        "{status}"
    );
    assert_eq!(status["dead_letters"], seed::DEAD_LETTERS);
    assert_eq!(status["blocked_targets"], seed::BLOCKED);
    assert_eq!(status["nodes"][0]["node"], seed::NODE);
    assert_eq!(status["live_nodes"], 0, "the seeding node is no member");
    assert_eq!(status["leases_held"], 0);
    let topics: Vec<&Value> = status["attention"]
        .as_array()
        .expect("attention")
        .iter()
        .map(|a| &a["topic"])
        .collect();
    assert_eq!(
        topics,
        [
            &json!("dead_letters"),
            &json!("blocked_targets"),
            &json!("no_node")
        ]
    );
    assert_eq!(
        status["attention"][0]["command"],
        "shardbox dead-letters list"
    );
    assert_eq!(
        status["shards"].as_array().map(Vec::len),
        Some(seed::SHARDS as usize)
    );
    // By kind: ledger's due l-5, delayed l-4 and dead letter; vault's block and the
    // message parked behind it.
    let by_kind: Vec<Value> = status["by_kind"]
        .as_array()
        .expect("by_kind")
        .iter()
        .map(|k| {
            json!([
                k["kind"],
                k["due"],
                k["waiting"],
                k["blocked_targets"],
                k["dead_letters"]
            ])
        })
        .collect();
    assert_eq!(
        by_kind,
        [json!(["ledger", 1, 1, 0, 1]), json!(["vault", 0, 1, 1, 0])],
        "{status}"
    );
    let history = get(addr, "/api/history").await;
    assert_eq!(history.status, 200, "{}", history.body);
    let history = history.json();
    assert_eq!(history["keep_ms"], 3_600_000);
    assert_eq!(history["rates_from"], "database totals");
    let points = history["points"].as_array().expect("points");
    assert!(!points.is_empty(), "the status read above was sampled");
    assert_eq!(points.last().unwrap()["due"], 1, "{history}");
    let last = points.last().unwrap()["t"].as_str().expect("t").to_owned();
    let after = get(addr, &format!("/api/history?after={last}"))
        .await
        .json();
    let later = after["points"].as_array().expect("points");
    assert!(
        later.len() < points.len() && later.iter().all(|p| p["t"] != json!(last)),
        "only the samples after the last one seen: {after}"
    );
    refused(&get(addr, "/api/history?after=soon").await, 400, "after");
    refused(
        &get(addr, "/api/dead-letters/nine").await,
        400,
        "Cannot parse",
    );

    let list = get(addr, "/api/dead-letters").await.json();
    assert_eq!(list["matching"], 1);
    assert_eq!(list["dead_letters"][0]["target_id"], "l-9");
    assert_eq!(list["dead_letters"][0]["reason"], "ledger closed");
    let id = list["dead_letters"][0]["id"].as_i64().expect("id");
    let none = get(addr, "/api/dead-letters?kind=vault").await.json();
    assert_eq!(none["matching"], 0);
    assert_eq!(
        get(addr, "/api/dead-letters?since=1h").await.json()["matching"],
        1
    );
    refused(
        // Weeks are an age since humantime reads them (`5w`); `x` is no unit.
        &get(addr, "/api/dead-letters?since=5x").await,
        400,
        "unit of an age",
    );
    refused(
        &get(addr, "/api/dead-letters?target=l-9").await,
        400,
        "needs its kind",
    );
    let shown = get(addr, &format!("/api/dead-letters/{id}")).await.json();
    assert_eq!(shown["payload"], "\"Flaky\"");
    assert_eq!(shown["dead_letter"]["id"], id);
    // Its error history: its one attempt, which killed it.
    let errors = shown["errors"].as_array().expect("an error history");
    assert_eq!(errors.len(), 1, "{shown}");
    assert_eq!(
        (&errors[0]["attempt"], &errors[0]["error"]),
        (&json!(1), &json!("ledger closed"))
    );
    refused(
        &get(addr, "/api/dead-letters/999999").await,
        404,
        "no dead letter 999999",
    );
    let blocked = get(addr, "/api/blocked").await.json();
    assert_eq!(blocked["blocked"][0]["id"], "v-1");
    assert_eq!(blocked["blocked"][0]["last_error"], "poison pill");
    assert_eq!(
        get(addr, "/api/catch-ups").await.json(),
        json!({ "running": [] })
    );
    assert_eq!(
        get(addr, "/api/read-models").await.json(),
        json!([]),
        "no read model was built beside (cli_catch_up.rs shows one that was)"
    );
    refused(
        &get(addr, "/api/catch-ups/12345").await,
        404,
        "catch-up job 12345 does not exist",
    );
    // An unknown route or method: a JSON error naming it and where the API is, not an
    // empty answer.
    refused(
        &get(addr, "/api/nope").await,
        404,
        "no such route: GET /api/nope",
    );
    refused(
        &post(addr, "/api/status", json!({})).await,
        405,
        "POST is not served at /api/status",
    );
    assert_eq!(
        get(addr, "/api/admin").await.json()["actions_allowed"],
        false
    );

    // Actions are refused, and nothing is written.
    let ids = json!({ "ids": [id] });
    refused(
        &post(addr, "/api/dead-letters/requeue", ids.clone()).await,
        403,
        "--allow-actions",
    );
    refused(
        &post(addr, "/api/dead-letters/purge", ids).await,
        403,
        "--allow-actions",
    );
    refused(
        &post(
            addr,
            "/api/blocked/unblock",
            json!({ "kind": "vault", "id": "v-1" }),
        )
        .await,
        403,
        "--allow-actions",
    );
    refused(
        &post(addr, "/api/catch-ups", json!({ "projection_kind": "p" })).await,
        403,
        "--allow-actions",
    );
    refused(
        &post(addr, "/api/catch-ups/1/cancel", json!({})).await,
        403,
        "--allow-actions",
    );
    assert_eq!(
        get(addr, "/api/catch-ups").await.json()["running"],
        json!([])
    );
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap(),
        1
    );
    assert_eq!(sb.blocked_targets().await.unwrap().len(), 1);

    let page = get(addr, "/").await;
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/html")));
    assert!(page.body.contains("id=\"count-dead-letters\""));
}

/// The actions on a server started with --allow-actions; then a node delivers the requeued
/// message.
async fn act(sb: &Shardbox, gate: &seed::Gate, addr: &str) {
    assert_eq!(
        get(addr, "/api/admin").await.json()["actions_allowed"],
        true
    );
    refused(
        &post(addr, "/api/dead-letters/requeue", json!({})).await,
        400,
        "requeue every dead letter",
    );
    refused(
        &post(addr, "/api/dead-letters/requeue", json!({ "idz": [1] })).await,
        400,
        "idz",
    );
    let id = get(addr, "/api/dead-letters").await.json()["dead_letters"][0]["id"].clone();
    // The CLI's --shards, over HTTP: the same query type.
    refused(
        &post(
            addr,
            "/api/dead-letters/requeue",
            json!({ "ids": [id], "shards": 0 }),
        )
        .await,
        400,
        "shards must be at least 1",
    );
    refused(
        &get(addr, "/api/dead-letters?shards=4").await,
        400,
        "shards applies to a requeue only",
    );
    // A dry run says what the requeue would touch and changes nothing (the requeue below
    // still finds its letter).
    let dry = post(
        addr,
        "/api/dead-letters/requeue",
        json!({ "ids": [id], "shards": seed::SHARDS, "dry_run": true }),
    )
    .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert_eq!(
        (&dry.json()["dry_run"], &dry.json()["dead_letters"]),
        (&json!(true), &json!(1)),
        "{}",
        dry.body
    );
    let requeued = post(
        addr,
        "/api/dead-letters/requeue",
        json!({ "ids": [id], "shards": seed::SHARDS }),
    )
    .await;
    assert_eq!(requeued.status, 200, "{}", requeued.body);
    assert_eq!(requeued.json()["requeued"], 1);
    refused(
        &post(addr, "/api/dead-letters/requeue", json!({ "ids": [id] })).await,
        404,
        "no dead letters match",
    );
    let unblocked = post(
        addr,
        "/api/blocked/unblock",
        json!({ "kind": "vault", "id": "v-1", "action": "drop" }),
    )
    .await;
    assert_eq!(unblocked.status, 200, "{}", unblocked.body);
    assert_eq!(unblocked.json(), json!({ "unblocked": 1, "released": 1 }));
    refused(
        &post(
            addr,
            "/api/blocked/unblock",
            json!({ "kind": "vault", "id": "v-1" }),
        )
        .await,
        404,
        "was not blocked",
    );
    refused(
        &post(addr, "/api/dead-letters/purge", json!({ "all": true })).await,
        404,
        "no dead letters match",
    );

    gate.0.store(true, Ordering::SeqCst);
    sb.deliver_all().await.expect("deliver");
    let l9 = sb.aggregate_state::<Ledger>("l-9").await.unwrap();
    assert_eq!(
        l9.map(|l| l.applied),
        Some(1),
        "the requeued command applied"
    );
    let status = get(addr, "/api/status").await.json();
    assert_eq!(status["dead_letters"], 0);
    assert_eq!(status["totals"]["due"], 0, "{status}");

    // A catch-up started and cancelled over HTTP; the node's next stage carries it out.
    refused(
        &post(addr, "/api/catch-ups", json!({ "projection_kind": "" })).await,
        400,
        "target_kind",
    );
    // No node runs (none registers `http-rebuilt` as a projection): refused unless forced,
    // and a dry run says so without starting anything.
    refused(
        &post(
            addr,
            "/api/catch-ups",
            json!({ "projection_kind": "http-rebuilt", "ids": ["a"] }),
        )
        .await,
        400,
        "no node is running; the live nodes register no projection",
    );
    let dry = post(
        addr,
        "/api/catch-ups",
        json!({ "projection_kind": "http-rebuilt", "ids": ["a"], "dry_run": true }),
    )
    .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert_eq!(
        (&dry.json()["dry_run"], &dry.json()["served"]),
        (&json!(true), &json!(false)),
        "{}",
        dry.body
    );
    assert_eq!(
        get(addr, "/api/catch-ups").await.json()["running"],
        json!([]),
        "neither started a job"
    );
    let started = post(
        addr,
        "/api/catch-ups",
        json!({ "projection_kind": "http-rebuilt", "ids": ["a"], "force": true }),
    )
    .await;
    assert_eq!(started.status, 202, "accepted: {}", started.body);
    let job = started.json()["id"].as_i64().expect("job id");
    assert_eq!(
        started.header("location"),
        Some(format!("catch-ups/{job}").as_str()),
        "where its progress is, relative to the request"
    );
    assert_eq!(
        get(
            addr,
            &format!("/api/{}", started.header("location").unwrap_or(""))
        )
        .await
        .json()["id"],
        job
    );
    refused(
        &post(
            addr,
            "/api/catch-ups",
            json!({ "projection_kind": "http-rebuilt", "force": true }),
        )
        .await,
        409,
        &format!("already running (job {job})"),
    );
    refused(
        &post(addr, "/api/catch-ups/987654/cancel", json!({})).await,
        404,
        "catch-up job 987654 does not exist",
    );
    let cancelled = post(addr, &format!("/api/catch-ups/{job}/cancel"), json!({})).await;
    assert_eq!(cancelled.status, 202, "accepted: {}", cancelled.body);
    assert_eq!(cancelled.json()["status"], "cancelling");
    sb.deliver_all().await.expect("deliver");
    let view = get(addr, &format!("/api/catch-ups/{job}")).await.json();
    assert_eq!(view["status"], "cancelled", "{view}");
    refused(
        &post(addr, &format!("/api/catch-ups/{job}/cancel"), json!({})).await,
        409,
        "already cancelled",
    );
}

/// Records a migration this binary does not know, as a newer Shardbox would.
const NEWER_SCHEMA: &str =
    "INSERT INTO __diesel_schema_migrations (version) VALUES ('99991231000000')";

/// Both servers' checks; then a schema migrated by a newer binary makes the server unready.
async fn standalone(
    storage: Arc<dyn Storage>,
    db: &str,
    schema: Option<&str>,
    migrate_newer: impl FnOnce(),
) {
    let (sb, gate) = seed::seed(storage).await;
    let server = Served::start(db, schema, &[]);
    read_only(&sb, &server.addr).await;
    drop(server);
    let server = Served::start(db, schema, &["--allow-actions"]);
    act(&sb, &gate, &server.addr).await;

    migrate_newer();
    let ready = get(&server.addr, "/health/ready").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    let ready = ready.json();
    assert_eq!(
        (&ready["ready"], &ready["schema"]["ok"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(ready["storage"]["ok"], true);
    let detail = ready["schema"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("newer Shardbox"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_server_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("admin.db");
    let storage = SqliteStorage::open(&path).await.expect("open");
    let newer = || {
        let url = path.to_str().expect("utf-8");
        let mut raw = diesel::SqliteConnection::establish(url).expect("raw connection");
        raw.batch_execute(NEWER_SCHEMA).expect("insert");
    };
    standalone(
        Arc::new(storage),
        path.to_str().expect("utf-8"),
        None,
        newer,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_server_on_postgres() {
    let Some(url) = pg_url("standalone_server_on_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "admin_serve");
    let storage = PostgresStorage::connect_with(url.clone(), schema.options(4))
        .await
        .expect("connect");
    let newer = || schema.raw().batch_execute(NEWER_SCHEMA).expect("insert");
    standalone(Arc::new(storage), &url, Some(&schema.name), newer).await;
}

/// An age past the clock's range (`1000000000d` once overflowed chrono and panicked the
/// request's task, which closed the connection without a reply) is a 400 that names the
/// parameter and the allowed range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_age_out_of_range_is_refused_naming_the_parameter_and_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = SqliteStorage::open(dir.path().join("ages.db"))
        .await
        .expect("open");
    let addr = mount(shardbox::admin::router(shardbox::admin::AdminState::new(
        Arc::new(storage),
    )))
    .await;
    for parameter in ["since", "until"] {
        for age in ["1000000000d", "36501d", "99999999999999999999999s"] {
            let reply = get(&addr, &format!("/api/dead-letters?{parameter}={age}")).await;
            refused(&reply, 400, parameter);
            refused(&reply, 400, "at most 36500d");
        }
    }
    // The longest age is served.
    let longest = get(&addr, "/api/dead-letters?since=36500d").await;
    assert_eq!(longest.status, 200, "{}", longest.body);
    assert_eq!(longest.json()["matching"], 0);
}

/// The router mounted beside a running node: readiness follows the node, the metrics carry
/// its counters, a requeue is delivered by its woken workers, and its shutdown makes it
/// unready.
async fn mounted(storage: Arc<dyn Storage>) {
    let (sb, gate) = seed::seed(storage).await;
    let node = sb.start();
    assert!(
        node.drain(Duration::from_secs(10)).await.unwrap(),
        "l-5 delivered"
    );
    let read_only = mount(shardbox::admin::router(sb.admin_state(&node))).await;
    let actions = mount(shardbox::admin::router(
        sb.admin_state(&node).allow_actions(true),
    ))
    .await;

    let ready = get(&read_only, "/health/ready").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    let workers = ready.json()["workers"]["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(workers.ends_with("node tasks running"), "{workers}");
    let metrics = get(&read_only, "/metrics").await.body;
    let node_id = seed::NODE;
    assert!(
        metrics.contains(&format!("shardbox_delivered_total{{node=\"{node_id}\"}} ")),
        "{metrics}"
    );
    assert!(metrics.contains("shardbox_dead_letters 1"));
    assert_eq!(get(&read_only, "/api/admin").await.json()["node"], node_id);
    let status = get(&read_only, "/api/status").await.json();
    assert_eq!(status["live_nodes"], 1, "{status}");
    let history = get(&read_only, "/api/history").await.json();
    assert_eq!(history["rates_from"], "node counters", "{history}");
    let id = get(&read_only, "/api/dead-letters").await.json()["dead_letters"][0]["id"].clone();
    refused(
        &post(
            &read_only,
            "/api/dead-letters/requeue",
            json!({ "ids": [id] }),
        )
        .await,
        403,
        "allow_actions",
    );

    gate.0.store(true, Ordering::SeqCst);
    let requeued = post(
        &actions,
        "/api/dead-letters/requeue",
        json!({ "ids": [id] }),
    )
    .await;
    assert_eq!(requeued.status, 200, "{}", requeued.body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let l9 = sb.aggregate_state::<Ledger>("l-9").await.unwrap();
        if l9.is_some_and(|l| l.applied == 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the running node delivered the requeued command"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Kinds: listed with the node that registers them; paused through the API, a new
    // command waits; resumed, it is delivered (the mounted node reads the change at once).
    let kinds = get(&read_only, "/api/kinds").await.json();
    let ledger = kinds["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "ledger")
        .cloned()
        .expect("ledger listed");
    assert_eq!(ledger["nodes"], json!([node_id]));
    assert_eq!(ledger["paused"], false);
    refused(
        &post(&read_only, "/api/kinds/ledger/pause", json!({})).await,
        403,
        "allow_actions",
    );
    let paused = post(&actions, "/api/kinds/ledger/pause", json!({})).await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.json()["paused"], true);
    sb.send::<Ledger>("l-20", &seed::Cmd::Ok)
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        sb.aggregate_state::<Ledger>("l-20")
            .await
            .unwrap()
            .is_none(),
        "a paused kind's command waits"
    );
    let bad = post(
        &actions,
        "/api/kinds/ledger/settings",
        json!({ "settings": { "max_concurrent": 0 } }),
    )
    .await;
    refused(&bad, 400, "max_concurrent 0");
    let resumed = post(&actions, "/api/kinds/ledger/resume", json!({})).await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    assert_eq!(resumed.json()["released"], 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sb
        .aggregate_state::<Ledger>("l-20")
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivered after the resume"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let requeued_counter = format!("shardbox_requeued_total{{node=\"{node_id}\"}} 1");
    assert!(get(&actions, "/metrics")
        .await
        .body
        .contains(&requeued_counter));

    node.shutdown().await.expect("shutdown");
    let ready = get(&read_only, "/health/ready").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    let ready = ready.json();
    assert_eq!(ready["ready"], false);
    assert_eq!(ready["workers"]["ok"], false);
    assert!(ready["workers"]["detail"]
        .as_str()
        .unwrap()
        .contains("shutting down"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_router_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = SqliteStorage::open(dir.path().join("mounted.db"))
        .await
        .expect("open");
    mounted(Arc::new(storage)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_router_on_postgres() {
    let Some(url) = pg_url("mounted_router_on_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "admin_mount");
    let storage = PostgresStorage::connect_with(url.clone(), schema.options(4))
        .await
        .expect("connect");
    mounted(Arc::new(storage)).await;
}

/// A router with actions over a fresh SQLite database, served on loopback, with a running
/// catch-up (job id returned) to cancel; `hosts` are allowed besides the loopback names.
async fn guarded(dir: &tempfile::TempDir, hosts: &[&str]) -> (String, i64) {
    let storage: Arc<dyn Storage> = Arc::new(
        SqliteStorage::open(dir.path().join("guarded.db"))
            .await
            .expect("open"),
    );
    // A node records the shard count, which a catch-up start places its rows by.
    Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .build()
        .await
        .expect("build");
    let state = shardbox::admin::AdminState::new(storage)
        .allow_actions(true)
        .allow_hosts(hosts.iter().copied());
    let addr = mount(shardbox::admin::router(state)).await;
    let started = post(
        &addr,
        "/api/catch-ups",
        json!({ "projection_kind": "guarded", "ids": ["a"], "force": true }),
    )
    .await;
    assert_eq!(started.status, 202, "{}", started.body);
    (addr, started.json()["id"].as_i64().expect("job id"))
}

/// Defect 4 of issue 37: a web page the operator visits cannot act or read through the
/// operator's browser. A cross-site form or "simple" fetch (no JSON content type: the cancel
/// took no body, so nothing refused it), a POST from another origin, and any request through
/// a name of another site that resolves to the loopback server (DNS rebinding) are refused,
/// and the catch-up keeps running; the dashboard's own POST (same origin, JSON) cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_requests_are_refused_and_the_dashboard_s_own_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, job) = guarded(&dir, &[]).await;
    let cancel = format!("/api/catch-ups/{job}/cancel");
    let port = addr.rsplit_once(':').expect("host:port").1;

    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let reply = call_with(
            &addr,
            "POST",
            &cancel,
            &[
                ("content-type", content_type),
                ("origin", Some("http://evil.example")),
            ],
            Some(""),
        )
        .await;
        // Refused whichever check comes first: a browser sends the Origin of the page.
        assert!(
            [403, 415].contains(&reply.status),
            "{content_type:?}: {} {}",
            reply.status,
            reply.body
        );
        // A tool's request without the type is refused too, naming the header to send.
        refused(
            &call_with(
                &addr,
                "POST",
                &cancel,
                &[("content-type", content_type)],
                None,
            )
            .await,
            415,
            "Content-Type: application/json",
        );
    }
    // From another origin, even with the JSON type (which a browser would not send without a
    // preflight this server never grants).
    for origin in [
        "http://evil.example",
        &format!("http://localhost:{port}"),
        "null",
    ] {
        refused(
            &call_with(
                &addr,
                "POST",
                &cancel,
                &[("origin", Some(origin))],
                Some("{}"),
            )
            .await,
            403,
            "cross-origin",
        );
    }
    // DNS rebinding: the browser believes it talks to evil.example; reads and actions alike.
    let rebound = format!("evil.example:{port}");
    for (method, path) in [
        ("GET", "/api/dead-letters"),
        ("GET", "/api/dead-letters/1"),
        ("GET", "/api/status"),
        ("GET", "/"),
        ("POST", cancel.as_str()),
    ] {
        let reply = call_with(
            &addr,
            method,
            path,
            &[
                ("host", Some(&rebound)),
                ("origin", Some(&format!("http://{rebound}"))),
            ],
            (method == "POST").then_some("{}"),
        )
        .await;
        refused(&reply, 403, "--allowed-host");
        refused(&reply, 403, "AdminState::allow_hosts");
    }
    let view = get(&addr, &format!("/api/catch-ups/{job}")).await.json();
    assert_eq!(
        (&view["status"], &view["cancel_requested"]),
        (&json!("started"), &json!(false)),
        "nothing was cancelled: {view}"
    );

    // The dashboard's own request: same origin, JSON content type, a `{}` body.
    let own = call_with(
        &addr,
        "POST",
        &cancel,
        &[("origin", Some(&format!("http://{addr}")))],
        Some("{}"),
    )
    .await;
    assert_eq!(own.status, 202, "{}", own.body);
    assert_eq!(own.json()["status"], "cancelling");
    let page = get(&addr, "/").await.body;
    assert!(
        page.contains(r#"headers: { "content-type": "application/json" }"#),
        "the dashboard's POSTs declare JSON"
    );
}

/// The names an operator configures are answered (with any port), mounted and by `shardbox
/// serve --allowed-host`; others are still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_host_names_are_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, _) = guarded(&dir, &["admin.example"]).await;
    let as_host = |host: &'static str| {
        let addr = addr.clone();
        async move { call_with(&addr, "GET", "/api/status", &[("host", Some(host))], None).await }
    };
    assert_eq!(as_host("admin.example:443").await.status, 200);
    assert_eq!(as_host("localhost").await.status, 200);
    assert_eq!(as_host("[::1]:9187").await.status, 200);
    refused(&as_host("other.example").await, 403, "admin.example");

    let path = dir.path().join("guarded.db");
    let served = Served::start(
        path.to_str().expect("utf-8"),
        None,
        &[
            "--allowed-host",
            "admin.example",
            "--allowed-host",
            "10.1.2.3",
        ],
    );
    for host in ["admin.example", "10.1.2.3:9187", "127.0.0.1"] {
        let reply = call_with(
            &served.addr,
            "GET",
            "/health/ready",
            &[("host", Some(host))],
            None,
        )
        .await;
        assert_eq!(reply.status, 200, "{host}: {}", reply.body);
    }
    refused(
        &call_with(
            &served.addr,
            "GET",
            "/api/status",
            &[("host", Some("other.example"))],
            None,
        )
        .await,
        403,
        "--allowed-host",
    );
}

/// A list's `limit` is bounded: one answer is read and sent whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_limit_above_the_bound_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, _) = guarded(&dir, &[]).await;
    for path in [
        "/api/dead-letters?limit=1001",
        "/api/dead-letters?kind=k&limit=18446744073709551615",
        "/api/blocked?limit=1001",
    ] {
        refused(&get(&addr, path).await, 400, "at most 1000 rows");
    }
    for path in ["/api/dead-letters?limit=1000", "/api/blocked?limit=1000"] {
        let reply = get(&addr, path).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    }
}

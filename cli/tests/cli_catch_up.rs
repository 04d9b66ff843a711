//! `shardbox catch-up start|cancel|progress` end to end: the binary run as a process over a
//! database an application's node serves (on SQLite, and on PostgreSQL when SHARDBOX_PG_URL
//! is set). A job started by the CLI is replayed by the node, with its estimate counted by
//! the first step; a job cancelled by the CLI ends `cancelled` on the node, its parked live
//! events delivered once; the library's refusals come back in its words with exit code 1.

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{EventSource, PostgresStorage};
use shardbox_storage::test_schema::{pg_url, TestSchema};
mod support;

use std::sync::Arc;
use std::time::Duration;
use support::binary::{code, json, run, stderr};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ticked;
impl Message for Ticked {
    const TYPE: &'static str = "cli-catch-up-test.ticked";
}

/// How many events each counter saw.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Counter(u64);
impl Projection for Counter {
    const KIND: &'static str = "counter";
    type Event = Ticked;
    async fn apply(&mut self, _: &Ticked, _: &Context<'_>) -> Result<(), HandlerError> {
        self.0 += 1;
        Ok(())
    }
}

/// Version 2 of the counters (a read model built beside `counter`).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct CounterV2(u64);
impl Projection for CounterV2 {
    const KIND: &'static str = "counter-v2";
    type Event = Ticked;
    async fn apply(&mut self, _: &Ticked, _: &Context<'_>) -> Result<(), HandlerError> {
        self.0 += 1;
        Ok(())
    }
}

const COUNTERS: usize = 5;

fn counter(i: usize) -> String {
    format!("c-{i}")
}

async fn counts(sb: &Shardbox) -> Vec<u64> {
    let mut out = Vec::new();
    for i in 0..COUNTERS {
        let c = sb.projection_state::<Counter>(&counter(i)).await.unwrap();
        out.push(c.unwrap_or_default().0);
    }
    out
}

async fn post(sb: &Shardbox, n: usize, posted: &mut [u64]) {
    for k in 0..n {
        let i = k % COUNTERS;
        sb.post(EventSource::external(counter(i)), &Ticked)
            .await
            .expect("post");
        posted[i] += 1;
    }
}

async fn settle(sb: &Shardbox) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while sb.storage().counts(None).await.unwrap().pending() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "settled in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start_and_cancel(storage: Arc<dyn Storage>, db: &str, schema: Option<&str>) {
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .poll_interval(Duration::from_millis(50))
        .projection::<Counter>()
        .build()
        .await
        .expect("build");
    let mut posted = vec![0u64; COUNTERS];
    post(&sb, 100, &mut posted).await;
    let node = sb.start();
    settle(&sb).await;
    node.shutdown().await.unwrap();
    assert_eq!(counts(&sb).await, posted);

    // No node runs: a start, which deletes the read model at once, is refused unless forced
    // (and nothing is deleted); forced, the job waits for a node.
    let refused = run(db, schema, &["catch-up", "start", "counter", "--yes"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("no node is running") && stderr(&refused).contains("--force"),
        "{}",
        stderr(&refused)
    );
    let misspelled = run(db, schema, &["catch-up", "start", "countr", "--dry-run"]);
    assert!(
        String::from_utf8_lossy(&misspelled.stdout)
            .contains("a start would be refused without --force"),
        "{}",
        String::from_utf8_lossy(&misspelled.stdout)
    );
    assert_eq!(counts(&sb).await, posted, "nothing was reset");
    let first = json(
        db,
        schema,
        &["catch-up", "start", "counter", "--force", "--yes"],
    );
    let id = first["id"].as_i64().expect("job id");
    assert_eq!(first["status"], "started");
    assert_eq!(first["total_estimate"], 0, "counted by the first step");
    assert_eq!(
        counts(&sb).await,
        vec![0; COUNTERS],
        "the targets are reset"
    );
    // The job's first step waits in the Inbox as a row of Shardbox's own kind: no kinds
    // list shows it (status by kind, which the dashboard's Kinds table reads too; `kinds
    // list`), and a kind action on it is refused, forced or not (issue 36).
    let tick = shardbox::core::catch_up::TICK_KIND;
    let status = json(db, schema, &["status"]);
    let by_kind = status["by_kind"].as_array().expect("by_kind");
    assert!(
        by_kind.iter().all(|k| k["kind"] != tick),
        "internal kinds are not listed: {status}"
    );
    let kinds = json(db, schema, &["kinds", "list"]);
    assert!(
        kinds["kinds"]
            .as_array()
            .expect("kinds")
            .iter()
            .all(|k| k["kind"] != tick),
        "{kinds}"
    );
    let steps: [&[&str]; 2] = [
        &["kinds", "pause", tick, "--force"],
        &["kinds", "set", tick, "--max-concurrent", "1", "--force"],
    ];
    for args in steps {
        let refused = run(db, schema, args);
        assert_eq!(code(&refused), 2, "{args:?}: {}", stderr(&refused));
        assert!(
            stderr(&refused).contains("one of Shardbox's own kinds"),
            "{args:?}: {}",
            stderr(&refused)
        );
    }
    let overlap = run(
        db,
        schema,
        &[
            "catch-up", "start", "counter", "--id", "c-1", "--force", "--yes",
        ],
    );
    assert_eq!(code(&overlap), 1, "{}", stderr(&overlap));
    assert!(
        stderr(&overlap).contains(&format!("already running (job {id})")),
        "the library's words: {}",
        stderr(&overlap)
    );
    let unknown = run(db, schema, &["catch-up", "cancel", "987654"]);
    assert_eq!(code(&unknown), 1);
    assert!(stderr(&unknown).contains("catch-up job 987654 does not exist"));

    // Live events while the job waits, then the cancel.
    let mut live = vec![0u64; COUNTERS];
    post(&sb, 20, &mut live).await;
    let asked = json(db, schema, &["catch-up", "cancel", &id.to_string()]);
    assert_eq!(asked["status"], "cancelling");
    assert_eq!(asked["cancel_requested"], true);
    let listed = json(db, schema, &["catch-up", "list"]);
    assert_eq!(listed["running"][0]["status"], "cancelling");
    let waited = run(
        db,
        schema,
        &["catch-up", "cancel", &id.to_string(), "--wait", "1"],
    );
    assert_eq!(code(&waited), 1, "no node ran the job: {}", stderr(&waited));
    assert!(stderr(&waited).contains("has not ended yet"));

    // A node carries the cancel out; the live events are delivered once each.
    let node = sb.start();
    let followed = json(
        db,
        schema,
        &["catch-up", "progress", &id.to_string(), "--follow"],
    );
    assert_eq!(followed["status"], "cancelled");
    settle(&sb).await;
    assert_eq!(
        counts(&sb).await,
        live,
        "reset, nothing replayed, then live"
    );
    let again = run(db, schema, &["catch-up", "cancel", &id.to_string()]);
    assert_eq!(code(&again), 1);
    assert!(
        stderr(&again).contains(&format!(
            "catch-up job {id} is already cancelled; there is nothing to cancel"
        )),
        "{}",
        stderr(&again)
    );

    // A job the CLI starts while the node runs is replayed to the end.
    let second = json(db, schema, &["catch-up", "start", "counter", "--yes"]);
    let second = second["id"].as_i64().expect("job id").to_string();
    let done = json(db, schema, &["catch-up", "progress", &second, "--follow"]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["total_estimate"], 120, "the first step's estimate");
    assert_eq!(done["replayed"], 120);
    settle(&sb).await;
    let all: Vec<u64> = posted.iter().zip(&live).map(|(a, b)| a + b).collect();
    assert_eq!(counts(&sb).await, all, "rebuilt from the whole history");
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_start_and_cancel_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("catch-up.db");
    let storage = shardbox::SqliteStorage::open(&path).await.expect("open");
    start_and_cancel(Arc::new(storage), path.to_str().expect("utf-8"), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_start_and_cancel_on_postgres() {
    let Some(url) = pg_url("catch_up_start_and_cancel_on_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "cli_catch_up");
    let storage = PostgresStorage::connect_with(url.clone(), schema.options(4))
        .await
        .expect("connect");
    start_and_cancel(Arc::new(storage), &url, Some(&schema.name)).await;
}

/// `read-models`, `catch-up list` and `status` show a blue/green build: the kind being built
/// beside the served one and its job while it waits for a node, then the switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_models_show_a_version_build_and_its_switch_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("read-models.db");
    let db = path.to_str().expect("utf-8");
    let storage = shardbox::SqliteStorage::open(&path).await.expect("open");
    let sb = Shardbox::builder()
        .shared_storage(Arc::new(storage))
        .shards(4)
        .poll_interval(Duration::from_millis(50))
        .projection::<Counter>()
        .projection::<CounterV2>()
        .build()
        .await
        .expect("build");
    let mut posted = vec![0u64; COUNTERS];
    post(&sb, 40, &mut posted).await;
    let none = run(db, None, &["read-models"]);
    assert_eq!(code(&none), 0, "{}", stderr(&none));
    assert!(String::from_utf8_lossy(&none.stdout).contains("no read model was built"));

    // No node runs: the build waits, and every view says what is being built.
    let job = sb
        .build_version(Counter::KIND, CounterV2::KIND)
        .await
        .expect("build a version");
    let listed = json(db, None, &["read-models"]);
    assert_eq!(listed[0]["model"], "counter", "{listed}");
    assert_eq!(listed[0]["served"], "counter");
    assert_eq!(listed[0]["building"], "counter-v2");
    assert_eq!(listed[0]["building_job"], job.id());
    let table = run(db, None, &["read-models"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("counter-v2") && table.contains("being built"),
        "{table}"
    );
    let jobs = json(db, None, &["catch-up", "list"]);
    assert_eq!(jobs["running"][0]["version_of"], "counter", "{jobs}");
    let jobs = run(db, None, &["catch-up", "list"]);
    assert!(
        String::from_utf8_lossy(&jobs.stdout).contains("counter-v2 (next version of counter)"),
        "{}",
        String::from_utf8_lossy(&jobs.stdout)
    );
    let status = json(db, None, &["status"]);
    assert_eq!(
        status["read_models"][0]["building"], "counter-v2",
        "{status}"
    );

    // A node builds it; the completion switched the model.
    let node = sb.start();
    let done = json(
        db,
        None,
        &["catch-up", "progress", &job.id().to_string(), "--follow"],
    );
    assert_eq!(done["status"], "completed", "{done}");
    let listed = json(db, None, &["read-models"]);
    assert_eq!(listed[0]["served"], "counter-v2", "{listed}");
    assert_eq!(listed[0]["previous"], "counter");
    assert!(listed[0]["building"].is_null());
    assert!(listed[0]["switched_at"].is_string());
    settle(&sb).await;
    let mut v2 = Vec::new();
    for i in 0..COUNTERS {
        let c = sb.projection_state::<CounterV2>(&counter(i)).await.unwrap();
        v2.push(c.unwrap_or_default().0);
    }
    assert_eq!(v2, posted, "the new version folds the whole history");
    node.shutdown().await.unwrap();
}

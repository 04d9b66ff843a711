//! An application with its own `ShardStrategy`, operated from outside and from inside: the
//! `shardbox` binary (which cannot rebuild that strategy) refuses every action that would
//! place rows by hashing — a requeue with `--shards`, a catch-up start, a re-sharding —
//! writing nothing, and still requeues into the shard a dead letter holds; the admin surface
//! mounted in the application places rows by the application's strategy. Before the
//! operator actions had one home, the CLI and the admin surface hashed with the stock
//! strategy: a requeue with `--shards` put a target's message in a shard it does not live
//! in, and a catch-up held live messages in the wrong shards. On SQLite, and on PostgreSQL
//! when SHARDBOX_PG_URL is set (skipped loudly without).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{
    Backoff, DeadLetterFilter, ExhaustedOutcome, FailurePolicy, PostgresStorage, ShardIndex,
    ShardStrategy, StableHashStrategy,
};
use shardbox_storage::test_schema::{pg_url, TestSchema};
mod support;

use std::sync::Arc;
use std::time::Duration;
use support::binary::{code, json, run, stderr};
use support::http::{call, mount, Reply};

const SHARDS: u32 = 4;

/// Every target in the last shard: unlike the stable hash for the ids used here.
struct LastShard;
impl ShardStrategy for LastShard {
    fn shard_of(&self, _: &str, _: &str, shard_count: u32) -> ShardIndex {
        ShardIndex(shard_count.saturating_sub(1))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Poison;
impl Message for Poison {
    const TYPE: &'static str = "custom-strategy-test.poison";
}
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Noted;
impl Message for Noted {
    const TYPE: &'static str = "custom-strategy-test.noted";
}

/// Dead-letters every command.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Ledger;
impl Aggregate for Ledger {
    const KIND: &'static str = "ledger";
    type Command = Poison;
    type Event = Noted;
    async fn handle(&self, _: &Poison, _: &Context<'_>) -> Result<Vec<Noted>, HandlerError> {
        Err(HandlerError::new("poison pill"))
    }
    fn apply(&mut self, _: &Noted) {}
}

/// A projection to rebuild.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Notes(u64);
impl Projection for Notes {
    const KIND: &'static str = "notes";
    type Event = Noted;
    async fn apply(&mut self, _: &Noted, _: &Context<'_>) -> Result<(), HandlerError> {
        self.0 += 1;
        Ok(())
    }
}

async fn app(storage: Arc<dyn Storage>) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(SHARDS)
        .strategy(LastShard)
        .poll_interval(Duration::from_millis(50))
        .kind_policy(
            Ledger::KIND,
            FailurePolicy::new(
                1,
                Backoff::Fixed(Duration::from_secs(1)),
                ExhaustedOutcome::DeadLetter,
            ),
        )
        .aggregate::<Ledger>()
        .projection::<Notes>()
        .build()
        .await
        .expect("build")
}

/// The id of the one dead letter of `ledger/id` (dead-lettering it first).
async fn dead_letter(sb: &Shardbox, id: &str) -> i64 {
    sb.send::<Ledger>(id, &Poison).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    let dead = sb
        .dead_letters(DeadLetterFilter::all().target(Ledger::KIND, id))
        .await
        .expect("list");
    assert_eq!(dead.len(), 1, "{id} dead-lettered");
    assert_eq!(dead[0].letter.original.shard, ShardIndex(SHARDS - 1));
    dead[0].id.0
}

/// How many undelivered rows `shard` holds.
async fn pending_in(sb: &Shardbox, shard: u32) -> u64 {
    sb.storage()
        .counts(Some(ShardIndex(shard)))
        .await
        .expect("counts")
        .pending()
}

fn refused_for_the_custom_strategy(out: &std::process::Output, what: &str) {
    assert_eq!(code(out), 2, "{what}: {}", stderr(out));
    let text = stderr(out);
    assert!(
        text.contains("LastShard") && text.contains("cannot rebuild"),
        "{what}: names the strategy and why: {text}"
    );
}

async fn post(addr: &str, path: &str, body: Value) -> Reply {
    call(addr, "POST", path, Some(&body.to_string())).await
}

async fn operate(storage: Arc<dyn Storage>, db: &str, schema: Option<&str>) {
    let sb = app(storage).await;
    let stock = StableHashStrategy::new();
    for id in ["l-1", "l-2"] {
        assert_ne!(
            stock.shard_of(Ledger::KIND, id, SHARDS),
            ShardIndex(SHARDS - 1),
            "the stock strategy would place {id} elsewhere (what the test tells apart)"
        );
    }
    assert_ne!(
        stock.shard_of(Notes::KIND, "n-1", SHARDS),
        ShardIndex(SHARDS - 1)
    );

    // The binary: every placement by hashing is refused, nothing is written.
    let first = dead_letter(&sb, "l-1").await;
    let out = run(
        db,
        schema,
        &[
            "dead-letters",
            "requeue",
            "--id",
            &first.to_string(),
            "--shards",
            &SHARDS.to_string(),
        ],
    );
    refused_for_the_custom_strategy(&out, "requeue --shards");
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .unwrap(),
        1,
        "still a dead letter"
    );
    let out = run(db, schema, &["catch-up", "start", "notes", "--id", "n-1"]);
    refused_for_the_custom_strategy(&out, "catch-up start");
    let running = json(db, schema, &["catch-up", "list"]);
    assert_eq!(running["running"], json!([]), "no job was started");
    let out = run(db, schema, &["reshard", "--shards", "8"]);
    refused_for_the_custom_strategy(&out, "reshard");
    assert_eq!(
        sb.storage().recorded_shard_count().await.unwrap(),
        Some(SHARDS)
    );

    // Where it died is its target's shard: the binary requeues there.
    let requeued = json(
        db,
        schema,
        &[
            "dead-letters",
            "requeue",
            "--id",
            &first.to_string(),
            "--yes",
        ],
    );
    assert_eq!(requeued["requeued"], 1, "{requeued}");
    assert_eq!(requeued["shards"], json!([SHARDS - 1]), "{requeued}");
    assert_eq!(pending_in(&sb, SHARDS - 1).await, 1);
    sb.deliver_all().await.expect("deliver");

    // Mounted in the application: its strategy places the rows. (The second dead letter is
    // made before the node runs: `deliver_all` beside a running node may find its shard
    // leased.)
    let second = dead_letter(&sb, "l-2").await;
    let node = sb.start();
    let admin = mount(shardbox::admin::router(
        sb.admin_state(&node).allow_actions(true),
    ))
    .await;
    let reply = post(
        &admin,
        "/api/dead-letters/requeue",
        json!({ "ids": [second], "shards": SHARDS }),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["shards"],
        json!([SHARDS - 1]),
        "{}",
        reply.body
    );
    // Forced: no node of the application runs here (the start is refused otherwise).
    let reply = post(
        &admin,
        "/api/catch-ups",
        json!({ "projection_kind": "notes", "ids": ["n-1"], "force": true }),
    )
    .await;
    assert_eq!(reply.status, 202, "accepted: {}", reply.body);
    let job = reply.json()["id"].as_i64().expect("job id");
    let stored = sb
        .storage()
        .catch_up(job)
        .await
        .expect("read")
        .expect("the job");
    assert_eq!(
        stored.spec.affected_shards,
        vec![ShardIndex(SHARDS - 1)],
        "live messages of notes/n-1 are held where they arrive"
    );
    let done = sb
        .catch_up_progress(job)
        .await
        .expect("progress")
        .status
        .is_finished();
    if !done {
        let handle_wait = tokio::time::Instant::now() + Duration::from_secs(30);
        while !sb
            .catch_up_progress(job)
            .await
            .unwrap()
            .status
            .is_finished()
        {
            assert!(tokio::time::Instant::now() < handle_wait, "job {job} ends");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    node.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_strategy_is_never_hashed_by_tools_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("custom.db");
    let storage = shardbox::SqliteStorage::open(&path).await.expect("open");
    operate(Arc::new(storage), path.to_str().expect("utf-8"), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_strategy_is_never_hashed_by_tools_on_postgres() {
    let Some(url) = pg_url("a_custom_strategy_is_never_hashed_by_tools_on_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "cli_custom_strategy");
    let storage = PostgresStorage::connect_with(url.clone(), schema.options(4))
        .await
        .expect("connect");
    operate(Arc::new(storage), &url, Some(&schema.name)).await;
}

//! The `shardbox` binary over several PostgreSQL databases (`--db "url0 url1"`, the home
//! database first): it opens them as the application does, so that it reads every database
//! and places requeued rows in their target's database and shard; a list that names
//! something else than PostgreSQL URLs, or one database twice, is refused before anything is
//! connected to; a catch-up starts over the set (one job in the home database, spread over
//! both) and is refused by name on one of its databases opened alone. The PostgreSQL part runs when
//! SHARDBOX_PG_URL is set (skipped loudly without), on that database and a second one of the
//! same server (`shardbox_cli_db1`, made if missing).

use diesel::connection::SimpleConnection;
use diesel::Connection;
use serde::{Deserialize, Serialize};
use shardbox::core::databases::{DatabaseStrategy, Databases};
use shardbox::core::storage::{CatchUpStore, Inspect};
use shardbox::core::StableHashStrategy;
use shardbox::prelude::*;
use shardbox::storage::{PostgresOptions, PostgresStorage};
use shardbox::{Backoff, ExhaustedOutcome, FailurePolicy};
use shardbox_storage::test_schema::{pg_url, TestSchema};
use std::sync::Arc;
use std::time::Duration;
mod support;

use support::binary::{code, json, run, stderr};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Open;
impl Message for Open {
    const TYPE: &'static str = "cli-several.open";
}
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Opened;
impl Message for Opened {
    const TYPE: &'static str = "cli-several.opened";
}

/// An aggregate whose every command fails: each becomes a dead letter at once.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Vault;
impl Aggregate for Vault {
    const KIND: &'static str = "vault";
    type Command = Open;
    type Event = Opened;
    async fn handle(&self, _: &Open, _: &Context<'_>) -> Result<Vec<Opened>, HandlerError> {
        Err(HandlerError::new("the vault is shut"))
    }
    fn apply(&mut self, _: &Opened) {}
}

#[test]
fn a_list_of_databases_must_name_distinct_postgres_urls() {
    let out = run("postgres://u@127.0.0.1:1/a ./local.db", None, &["status"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(
        err.contains("./local.db") && err.contains("PostgreSQL URL"),
        "names the entry and what it must be: {err}"
    );
    let out = run(
        "postgres://u@127.0.0.1:1/a postgres://u@127.0.0.1:1/a",
        None,
        &["status"],
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("twice"), "{err}");
}

/// The URL of database `name` on the server of `url`, made if it does not exist.
fn second_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, ""), |(b, q)| (b, q));
    let (server, _) = base.rsplit_once('/').expect("a URL with a database");
    let mut admin = diesel::PgConnection::establish(url).expect("connect");
    // Made once per server; a concurrent run made it first: fine.
    let _ = admin.batch_execute(&format!("CREATE DATABASE {name}"));
    match query {
        "" => format!("{server}/{name}"),
        q => format!("{server}/{name}?{q}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_and_requeues_over_several_databases() {
    let Some(url0) = pg_url("the_cli_reads_and_requeues_over_several_databases") else {
        return;
    };
    let url1 = second_database(&url0, "shardbox_cli_db1");
    let home = TestSchema::new(&url0, "cli_several");
    let _other = TestSchema {
        url: url1.clone(),
        name: home.name.clone(),
    };
    let urls = vec![url0.clone(), url1.clone()];
    let options = PostgresOptions::default()
        .schema(home.name.clone())
        .pool_size(4);
    let storage = PostgresStorage::connect_databases(&urls, options)
        .await
        .expect("two databases");
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .poll_interval(Duration::from_millis(50))
        .failure_policy(FailurePolicy::new(
            1,
            Backoff::Fixed(Duration::from_secs(1)),
            ExhaustedOutcome::DeadLetter,
        ))
        .aggregate::<Vault>()
        .build()
        .await
        .expect("build");
    let node = sb.start();
    let ids: Vec<String> = (0..12).map(|i| format!("v-{i}")).collect();
    for id in &ids {
        sb.send::<Vault>(id, &Open).await.expect("send");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while storage
        .count_dead_letters(&shardbox::DeadLetterFilter::all())
        .await
        .expect("count")
        < ids.len() as u64
    {
        assert!(std::time::Instant::now() < deadline, "dead letters in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await.expect("shutdown");

    let dbs = Databases::of(storage.as_ref()).expect("several");
    let strategy = DatabaseStrategy::over(Arc::new(StableHashStrategy::new()), storage.as_ref());
    let in_second = ids
        .iter()
        .filter(|id| dbs.database_of_target("vault", id) == 1)
        .count();
    assert!(
        in_second > 0 && in_second < ids.len(),
        "both databases hold targets"
    );

    let db = urls.join(" ");
    let schema = Some(home.name.as_str());
    let listed = json(&db, schema, &["dead-letters", "list"]);
    let letters = listed["dead_letters"].as_array().expect("a list");
    assert_eq!(
        letters.len(),
        ids.len(),
        "every database's dead letters: {listed}"
    );
    let mut listed_ids: Vec<i64> = letters.iter().filter_map(|l| l["id"].as_i64()).collect();
    listed_ids.sort_unstable();
    listed_ids.dedup();
    assert_eq!(listed_ids.len(), ids.len(), "ids unique across databases");
    // One by id, wherever it is: the letter of a target in the second database.
    let far = letters
        .iter()
        .find(|l| dbs.database_of_target("vault", l["target_id"].as_str().unwrap()) == 1)
        .expect("a letter in the second database");
    let shown = json(
        &db,
        schema,
        &["dead-letters", "show", &far["id"].to_string()],
    );
    assert_eq!(
        shown["dead_letter"]["target_id"], far["target_id"],
        "{shown}"
    );
    let status = json(&db, schema, &["status"]);
    assert_eq!(status["dead_letters"], ids.len() as u64, "{status}");

    let out = run(&db, schema, &["dead-letters", "requeue", "--all", "--yes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows = dbs.rows().await.expect("rows");
    assert_eq!(rows.len(), ids.len(), "every letter back in the Inbox");
    for row in rows {
        let id = &row.message.target_id;
        assert_eq!(
            row.shard,
            strategy.shard_of("vault", id, 4),
            "{id}: back in its shard, in its database"
        );
    }

    let out = run(
        &db,
        schema,
        &["catch-up", "start", "vault", "--yes", "--force"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let jobs = dbs.running_catch_ups().await.expect("jobs");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        jobs[0].spec.databases, 2,
        "spread over both databases: {jobs:?}"
    );
    let set = jobs[0].spread.as_ref().expect("spread");
    assert_eq!(
        set.events.len(),
        2,
        "each database's end read at the start: {set:?}"
    );
    assert!(
        dbs.databases()[1]
            .running_catch_ups()
            .await
            .expect("jobs")
            .is_empty(),
        "the job lives in the home database"
    );
    // Opened alone, one database of the set refuses: it holds only its own events.
    let alone = run(
        &url1,
        schema,
        &["catch-up", "start", "vault", "--yes", "--force"],
    );
    let alone_err = stderr(&alone);
    assert_ne!(code(&alone), 0, "{alone_err}");
    assert!(alone_err.contains("database 1 of 2"), "{alone_err}");
}

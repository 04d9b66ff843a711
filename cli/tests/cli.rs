//! The `shardbox` binary end to end, run as a process over a database seeded through the
//! library (a dead letter, a blocked target with a message parked behind it, a delayed and
//! a due message): on SQLite, and on PostgreSQL when SHARDBOX_PG_URL is set (skipped loudly
//! without).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Backoff, DeadLetterFilter, ExhaustedOutcome, FailurePolicy, PostgresStorage};
use shardbox_storage::test_schema::{pg_url, TestSchema};
mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use support::binary::{code, json, run, stdout};

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Ok,
    Poison,
}
impl Message for Cmd {
    const TYPE: &'static str = "cli-test.cmd";
}
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Done;
impl Message for Done {
    const TYPE: &'static str = "cli-test.done";
}

fn handle(c: &Cmd) -> Result<Vec<Done>, HandlerError> {
    match c {
        Cmd::Ok => Ok(vec![Done]),
        Cmd::Poison => Err(HandlerError::new("poison pill")),
    }
}

/// Dead-letters its poison commands.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Ledger;
impl Aggregate for Ledger {
    const KIND: &'static str = "ledger";
    type Command = Cmd;
    type Event = Done;
    async fn handle(&self, c: &Cmd, _: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
        handle(c)
    }
    fn apply(&mut self, _: &Done) {}
}

/// Blocks on its poison commands.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Vault;
impl Aggregate for Vault {
    const KIND: &'static str = "vault";
    type Command = Cmd;
    type Event = Done;
    async fn handle(&self, c: &Cmd, _: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
        handle(c)
    }
    fn apply(&mut self, _: &Done) {}
}

fn once(outcome: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy::new(1, Backoff::Fixed(Duration::from_secs(1)), outcome)
}

/// Seeds `storage`: ledger/l-1 dead-lettered, vault/v-1 blocked with one message parked
/// behind it, ledger/l-2 delayed by an hour, ledger/l-3 due; two nodes in the membership
/// table (`cli-test-node`, which leased the shards, and `cli-idle-node`, which holds none).
async fn seed(storage: Arc<dyn Storage>) -> Shardbox {
    let now = chrono::Utc::now();
    for node in ["cli-test-node", "cli-idle-node"] {
        storage
            .beat(
                &shardbox::NodeId(node.into()),
                now,
                now + chrono::TimeDelta::minutes(10),
                &[],
            )
            .await
            .expect("beat");
    }
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .node_id(shardbox::NodeId("cli-test-node".into()))
        .kind_policy(Ledger::KIND, once(ExhaustedOutcome::DeadLetter))
        .kind_policy(Vault::KIND, once(ExhaustedOutcome::Block))
        .aggregate::<Ledger>()
        .aggregate::<Vault>()
        .build()
        .await
        .expect("build");
    sb.send::<Ledger>("l-1", &Cmd::Poison).await.expect("send");
    sb.send::<Vault>("v-1", &Cmd::Poison).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    sb.send::<Vault>("v-1", &Cmd::Ok).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    sb.send_with::<Ledger>(
        "l-2",
        &Cmd::Ok,
        SendOptions::default().delay(Duration::from_secs(3600)),
    )
    .await
    .expect("send");
    sb.send::<Ledger>("l-3", &Cmd::Ok).await.expect("send");
    sb
}

/// Every command on a seeded database (`db`, tables in `schema` on PostgreSQL).
async fn operate(sb: &Shardbox, storage: &dyn Storage, db: &str, schema: Option<&str>) {
    // status: depth by wait, lag, counts, and where the nodes come from.
    let status = json(db, schema, &["status"]);
    let totals = &status["totals"];
    assert_eq!(totals["due"], 1, "ledger/l-3: {status}");
    assert_eq!(totals["delayed"], 1, "ledger/l-2: {status}");
    assert_eq!(totals["parked"], 1, "behind vault/v-1's block: {status}");
    assert_eq!(totals["blocked"], 1);
    assert!(totals["lag_ms"].as_i64().expect("lag") >= 0);
    assert_eq!(status["dead_letters"], 1);
    assert_eq!(status["blocked_targets"], 1);
    assert!(status["nodes_source"]
        .as_str()
        .expect("source")
        .contains("membership table"));
    // The nodes come from the membership table, sorted by id, with their heartbeats; the one
    // that leased the shards also shows it.
    let nodes = status["nodes"].as_array().expect("nodes");
    let names: Vec<&str> = nodes.iter().filter_map(|n| n["node"].as_str()).collect();
    assert_eq!(names, ["cli-idle-node", "cli-test-node"], "{status}");
    for n in nodes {
        assert_eq!(n["member"], true, "{n}");
        assert!(n["last_heartbeat"].is_string(), "{n}");
    }
    assert!(
        nodes[0]["last_picked_at"].is_null(),
        "the idle node leased nothing"
    );
    assert!(
        nodes[1]["last_picked_at"].is_string(),
        "the test node leased shards"
    );
    let text = run(db, schema, &["status"]);
    assert_eq!(code(&text), 0);
    let text = stdout(&text);
    assert!(text.contains("last heartbeat"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("cli-idle-node") && l.contains(" ago")),
        "the idle node with its heartbeat's age: {text}"
    );
    assert!(
        text.contains("dead letters: 1   blocked targets: 1"),
        "{text}"
    );
    // The summary and what needs attention come first; idle shards are counted, not listed.
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].starts_with("summary: 4 shards; 4 pending (1 due, lag "),
        "{text}"
    );
    assert!(lines[1].contains("2 live nodes"), "{text}");
    assert_eq!(
        &lines[2..4],
        [
            "attention: 1 dead letter(s): `shardbox dead-letters list`",
            "attention: 1 blocked target(s): `shardbox blocked list`"
        ],
        "{text}"
    );
    let busy = status["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .filter(|s| {
            s["held"] == true
                || ["due", "delayed", "retrying", "parked", "replay", "blocked"]
                    .iter()
                    .any(|k| s[k] != 0)
        })
        .count();
    let listed = lines
        .iter()
        .skip_while(|l| !l.starts_with("shards"))
        .skip(2)
        .take_while(|l| !l.starts_with("  all"))
        .count();
    assert_eq!(listed, busy, "only the busy shards: {text}");
    // By kind: a line per kind the status view breaks down, with its due count.
    let by_kind = status["by_kind"].as_array().expect("by_kind");
    assert!(!by_kind.is_empty(), "{status}");
    let section: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with("by kind"))
        .skip(2)
        .take(by_kind.len())
        .copied()
        .collect();
    for (line, kind) in section.iter().zip(by_kind) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cells[0],
            kind["kind"].as_str().unwrap_or("(other"),
            "{text}"
        );
        assert_eq!(cells[1], kind["due"].to_string(), "{text}");
    }
    assert_eq!(section.len(), by_kind.len(), "{text}");
    let every = stdout(&run(db, schema, &["status", "--all-shards"]));
    assert!(!every.contains("idle shard"), "{every}");

    // dead letters: list with filters, show, requeue, purge.
    let list = json(db, schema, &["dead-letters", "list"]);
    let letters = list["dead_letters"].as_array().expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0]["target_id"], "l-1");
    assert_eq!(letters[0]["reason"], "poison pill");
    let id = letters[0]["id"].as_i64().expect("id").to_string();
    let none = json(db, schema, &["dead-letters", "list", "--kind", "vault"]);
    assert_eq!(none["dead_letters"].as_array().map(Vec::len), Some(0));
    let recent = json(db, schema, &["dead-letters", "list", "--since", "1h"]);
    assert_eq!(recent["matching"], 1);
    let old = json(db, schema, &["dead-letters", "list", "--until", "1h"]);
    assert_eq!(old["matching"], 0);
    let shown = json(db, schema, &["dead-letters", "show", &id]);
    assert_eq!(shown["payload"], "\"Poison\"");
    // Its error history, kept by the stage that killed it: its one attempt.
    let errors = shown["errors"].as_array().expect("an error history");
    assert_eq!(errors.len(), 1, "{shown}");
    assert_eq!(errors[0]["attempt"], 1);
    assert_eq!(errors[0]["error"], "poison pill");
    assert!(errors[0]["at"].as_str().is_some_and(|t| t.contains('T')));
    let text = stdout(&run(db, schema, &["dead-letters", "show", &id]));
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("error ")).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains("attempt 1 at ") && lines[0].ends_with(": poison pill"),
        "{text}"
    );
    assert_eq!(
        code(&run(db, schema, &["dead-letters", "show", "999999"])),
        1
    );
    let unscoped = run(db, schema, &["dead-letters", "requeue"]);
    assert_eq!(code(&unscoped), 2, "a requeue of everything needs --all");
    assert_eq!(
        code(&run(
            db,
            schema,
            &["dead-letters", "purge", "--kind", "vault"]
        )),
        1,
        "nothing matched"
    );
    let zero = run(
        db,
        schema,
        &["dead-letters", "requeue", "--id", &id, "--shards", "0"],
    );
    assert_eq!(code(&zero), 2, "a usage error");
    assert!(String::from_utf8_lossy(&zero.stderr).contains("shards must be at least 1"));
    // A requeue says first what it touches: a dry run stops there, a script without --yes is
    // refused; nothing changes either way.
    let dry = run(
        db,
        schema,
        &["dead-letters", "requeue", "--id", &id, "--dry-run"],
    );
    let dry_text = String::from_utf8_lossy(&dry.stdout);
    assert_eq!(code(&dry), 0, "{}", String::from_utf8_lossy(&dry.stderr));
    assert!(
        dry_text.starts_with("would requeue 1 dead letter (ledger ×1; into shards ")
            && dry_text.contains("nothing changed (dry run)"),
        "{dry_text}"
    );
    let dry = json(
        db,
        schema,
        &["dead-letters", "purge", "--kind", "ledger", "--dry-run"],
    );
    assert_eq!(
        (&dry["dry_run"], &dry["action"], &dry["dead_letters"]),
        (&true.into(), &"purge".into(), &1.into()),
        "{dry}"
    );
    assert_eq!(dry["kinds"]["ledger"], 1, "{dry}");
    let unconfirmed = run(db, schema, &["dead-letters", "requeue", "--id", &id]);
    let unconfirmed_err = String::from_utf8_lossy(&unconfirmed.stderr);
    assert_eq!(code(&unconfirmed), 2, "{unconfirmed_err}");
    assert!(
        unconfirmed_err.contains("Requeue 1 dead letter (ledger ×1")
            && unconfirmed_err.contains("pass --yes"),
        "{unconfirmed_err}"
    );
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .expect("count"),
        1,
        "neither the dry runs nor the unconfirmed requeue changed anything"
    );
    let requeued = json(
        db,
        schema,
        &["dead-letters", "requeue", "--id", &id, "--yes"],
    );
    assert_eq!(requeued["requeued"], 1);
    assert_eq!(
        sb.count_dead_letters(DeadLetterFilter::all())
            .await
            .expect("count"),
        0
    );
    assert_eq!(
        code(&run(db, schema, &["dead-letters", "requeue", "--id", &id])),
        1,
        "gone already"
    );

    // blocked: list, unblock, and unblocking again matches nothing.
    let blocked = json(db, schema, &["blocked", "list"]);
    assert_eq!(blocked["blocked"][0]["id"], "v-1");
    assert_eq!(blocked["blocked"][0]["last_error"], "poison pill");
    let unblocked = json(
        db,
        schema,
        &["blocked", "unblock", "vault", "v-1", "--action", "drop"],
    );
    assert_eq!(
        (&unblocked["unblocked"], &unblocked["released"]),
        (&1.into(), &1.into())
    );
    assert_eq!(sb.blocked_targets().await.expect("blocked").len(), 0);
    assert_eq!(
        code(&run(db, schema, &["blocked", "unblock", "vault", "v-1"])),
        1
    );
    let after = json(db, schema, &["status"]);
    assert_eq!(
        after["totals"]["due"], 3,
        "l-3, the requeued l-1, the released v-1"
    );
    assert_eq!(after["totals"]["parked"], 0);

    // kinds: a tool refuses a kind no live node registers unless forced; pause, list, set
    // (options not given keep their stored value), resume, clear — the library reads the same.
    assert_eq!(
        code(&run(db, schema, &["kinds", "pause", "ledger"])),
        2,
        "no live node registers it: refused"
    );
    let paused = json(db, schema, &["kinds", "pause", "ledger", "--force"]);
    assert_eq!(paused["paused"], true);
    let listed = json(db, schema, &["kinds", "list"]);
    assert_eq!(listed["kinds"][0]["kind"], "ledger");
    assert_eq!(listed["kinds"][0]["paused"], true);
    let set = json(
        db,
        schema,
        &["kinds", "set", "ledger", "--max-concurrent", "3"],
    );
    assert_eq!(set["settings"]["max_concurrent"], 3);
    let set = json(db, schema, &["kinds", "set", "ledger", "--rate", "5"]);
    assert_eq!(
        (
            &set["settings"]["max_concurrent"],
            &set["settings"]["rate_per_second"]
        ),
        (&3.into(), &5.0.into()),
        "options not given keep their stored value"
    );
    let half = run(
        db,
        schema,
        &["kinds", "set", "ledger", "--max-attempts", "2"],
    );
    assert_eq!(code(&half), 2);
    assert!(String::from_utf8_lossy(&half.stderr).contains("given whole"));
    let controls = sb.kind_controls().await.expect("controls");
    assert_eq!(controls.len(), 1);
    assert!(controls[0].paused_since.is_some());
    assert_eq!(controls[0].settings.limits.max_concurrent, Some(3));
    let resumed = json(db, schema, &["kinds", "resume", "ledger"]);
    assert_eq!(resumed["was_paused"], true);
    let cleared = json(db, schema, &["kinds", "set", "ledger", "--clear"]);
    assert_eq!(cleared["settings"], serde_json::json!({}));
    assert_eq!(cleared["paused"], false);

    // catch-ups and migrations.
    assert_eq!(
        json(db, schema, &["catch-up", "list"])["running"],
        Value::Array(vec![])
    );
    assert_eq!(
        code(&run(db, schema, &["catch-up", "progress", "12345"])),
        1
    );
    assert_eq!(json(db, schema, &["migrate", "--check"])["current"], true);
    let usage = run(db, schema, &["dead-letters", "frobnicate"]);
    assert_eq!(code(&usage), 2);

    // reshard: 4 -> 8 with no node serving (every lease free): the rows move and the count
    // is recorded; the library's handle learns it at its next send and delivers on.
    let pending = json(db, schema, &["status"])["totals"].clone();
    let dry = run(db, schema, &["reshard", "--shards", "8", "--dry-run"]);
    let dry_text = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry_text.starts_with("would re-shard the Inbox from 4 to 8 shards: "),
        "{dry_text}"
    );
    assert_eq!(
        code(&run(db, schema, &["reshard", "--shards", "8"])),
        2,
        "a re-sharding without --yes, and no terminal to ask"
    );
    assert_eq!(
        sb.storage().recorded_shard_count().await.expect("count"),
        Some(4),
        "the dry run and the unconfirmed re-sharding changed nothing"
    );
    let resharded = json(db, schema, &["reshard", "--shards", "8", "--yes"]);
    assert_eq!(
        (&resharded["from"], &resharded["to"]),
        (&4.into(), &8.into())
    );
    assert!(
        resharded["inbox_rows"].as_u64().is_some_and(|n| n >= 4),
        "{resharded}"
    );
    assert_eq!(
        sb.storage().recorded_shard_count().await.expect("count"),
        Some(8)
    );
    let after = json(db, schema, &["status"]);
    assert_eq!(after["shards"].as_array().map(Vec::len), Some(8), "{after}");
    assert_eq!(
        (&after["totals"]["due"], &after["totals"]["delayed"]),
        (&pending["due"], &pending["delayed"]),
        "the same messages wait, in the new layout"
    );
    sb.send::<Ledger>("l-4", &Cmd::Ok).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    assert_eq!(json(db, schema, &["status"])["totals"]["due"], 0);
    let again = json(db, schema, &["reshard", "--shards", "8"]);
    assert_eq!(again["inbox_moved"], 0, "the same count changes nothing");
    assert_eq!(code(&run(db, schema, &["reshard", "--shards", "0"])), 2);
    // Another operator's re-sharding in force: refused (exit 1), nothing changed.
    let now = chrono::Utc::now();
    storage
        .announce_reshard(
            &shardbox::core::storage::ReshardAnnouncement {
                by: shardbox::NodeId("other-operator".into()),
                to: 2,
                until: now + chrono::TimeDelta::minutes(5),
            },
            now,
        )
        .await
        .expect("announce");
    let refused = run(db, schema, &["reshard", "--shards", "16", "--yes"]);
    assert_eq!(
        code(&refused),
        1,
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("another re-sharding"));
    storage
        .withdraw_reshard(&shardbox::NodeId("other-operator".into()))
        .await
        .expect("withdraw");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cli.db");
    let storage = SqliteStorage::open(&path).await.expect("open");
    let storage: Arc<dyn Storage> = Arc::new(storage);
    let sb = seed(storage.clone()).await;
    operate(&sb, &*storage, path.to_str().expect("utf-8 path"), None).await;

    // A file that is not there is refused (3), not created; migrate creates it and
    // --check says whether it is current.
    let fresh = dir.path().join("fresh.db");
    let fresh = fresh.to_str().expect("utf-8 path");
    let missing = run(fresh, None, &["status"]);
    assert_eq!(code(&missing), 3);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("is unavailable"));
    assert_eq!(code(&run(fresh, None, &["migrate", "--check"])), 3);
    let created = run(fresh, None, &["migrate"]);
    assert_eq!(
        code(&created),
        0,
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    assert!(stdout(&created).contains("is current"));
    let check = run(fresh, None, &["migrate", "--check"]);
    assert_eq!(code(&check), 0);
}

#[test]
fn a_database_that_refuses_or_is_missing_exits_with_its_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_shardbox"))
        .env_remove("SHARDBOX_DB")
        .arg("status")
        .output()
        .expect("run");
    assert_eq!(code(&out), 2, "no --db");
    let out = run(
        "postgres://nobody@127.0.0.1:1/none?connect_timeout=2",
        None,
        &["status"],
    );
    assert_eq!(code(&out), 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is unavailable"),
        "the library's words: {stderr}"
    );
}

/// An age past the clock's range (`1000000000d` once overflowed chrono and the binary
/// panicked) is refused with an error naming the flag and the allowed range, and a non-zero
/// exit: no panic, nothing read.
#[test]
fn an_age_out_of_range_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ages.db");
    let db = path.to_str().expect("utf-8 path");
    assert_eq!(code(&run(db, None, &["migrate"])), 0);
    for args in [
        &["dead-letters", "list", "--since", "1000000000d"][..],
        &["dead-letters", "list", "--until", "1000000000d"],
        &["dead-letters", "purge", "--since", "36501d"],
        &["catch-up", "start", "balances", "--since", "1000000000d"],
    ] {
        let out = run(db, None, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 2, "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        let flag = args[args.len() - 2];
        assert!(
            stderr.contains(flag) && stderr.contains("at most 36500d"),
            "{args:?} names {flag} and the range: {stderr}"
        );
    }
    let longest = run(db, None, &["dead-letters", "list", "--since", "36500d"]);
    assert_eq!(
        code(&longest),
        0,
        "{}",
        String::from_utf8_lossy(&longest.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_on_postgres() {
    let Some(url) = pg_url("every_command_on_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "cli");
    let storage = PostgresStorage::connect_with(url.clone(), schema.options(4))
        .await
        .expect("connect");
    let storage: Arc<dyn Storage> = Arc::new(storage);
    let sb = seed(storage.clone()).await;
    operate(&sb, &*storage, &url, Some(&schema.name)).await;

    // A schema that was never migrated is not current: --check says so with exit 1.
    let empty = TestSchema::new(&url, "cli_empty");
    let check = run(&url, Some(&empty.name), &["migrate", "--check"]);
    assert_eq!(
        code(&check),
        1,
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stderr).contains("schema is not current"));
}

//! SQLite-specific behaviour beyond the conformance suite: opening, schema versions, errors,
//! several handles on one file, and the query plans that keep a stage O(page).
#![cfg(feature = "sqlite")]

mod common;

use common::{capture_statements, taken, CACHED, ISSUED};
use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{Connection, QueryableByName, RunQueryDsl, SqliteConnection};
use shardbox_conformance::fixtures::{self, command, messages, t0};
use shardbox_core::storage::WriteBatch;
use shardbox_core::{InboxStore, ShardIndex, Storage, StorageError};
use shardbox_storage::{MigrationMode, SqliteOptions, SqliteStorage};
use std::path::Path;
use std::sync::Arc;

fn db_in(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("shardbox.db")
}

fn raw(path: &Path) -> SqliteConnection {
    let mut conn =
        SqliteConnection::establish(path.to_str().expect("utf-8 path")).expect("open raw");
    // As any outside tool should: wait for a lock (a dropped storage's background checkpoint
    // can still hold it for a moment on a loaded machine) instead of failing at once.
    conn.batch_execute("PRAGMA busy_timeout = 5000")
        .expect("busy timeout");
    conn
}

#[tokio::test]
async fn reopening_keeps_rows_and_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    let storage = SqliteStorage::open(&path).await.expect("open");
    storage
        .write(messages(vec![command(0, "a", "s1")]))
        .await
        .expect("write");
    assert_eq!(storage.describe(), format!("sqlite {}", path.display()));
    drop(storage);

    let storage = SqliteStorage::open(&path).await.expect("reopen");
    let rows = storage.rows().await.expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].message.signal_id.0, "s1");
}

#[tokio::test]
async fn a_newer_schema_is_refused_with_advice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    drop(SqliteStorage::open(&path).await.expect("open"));
    raw(&path)
        .batch_execute("INSERT INTO __diesel_schema_migrations (version) VALUES ('20990101000000')")
        .expect("fake a newer migration");

    let err = SqliteStorage::open(&path).await.expect_err("newer schema");
    match err {
        StorageError::SchemaMismatch {
            database,
            found,
            advice,
            ..
        } => {
            assert_eq!(database, path.display().to_string());
            assert!(found.contains("20990101000000"), "{found}");
            assert!(advice.contains("upgrade"), "{advice}");
        }
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn verify_mode_refuses_pending_migrations_and_accepts_a_migrated_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    let verify = SqliteOptions::default().migrations(MigrationMode::Verify);
    let err = SqliteStorage::open_with(&path, verify.clone())
        .await
        .expect_err("fresh file in verify mode");
    match &err {
        StorageError::SchemaMismatch { found, .. } => {
            assert!(found.contains("pending"), "{found}")
        }
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
    drop(SqliteStorage::open(&path).await.expect("migrate"));
    SqliteStorage::open_with(&path, verify)
        .await
        .expect("a migrated file passes verification");
}

#[tokio::test]
async fn unopenable_paths_are_unavailable_and_named() {
    let err = SqliteStorage::open("/nonexistent-dir/sub/shardbox.db")
        .await
        .expect_err("missing directory");
    match err {
        StorageError::Unavailable { database, .. } => {
            assert_eq!(database, "/nonexistent-dir/sub/shardbox.db")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let err = SqliteStorage::open(":memory:").await.expect_err(":memory:");
    assert!(
        matches!(&err, StorageError::Unavailable { reason, .. } if reason.contains("MemoryStorage")),
        "{err:?}"
    );
}

#[tokio::test]
async fn writes_to_a_read_only_database_are_read_only_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    // Keep a writer open so the WAL index exists for the read-only handle.
    let writer = SqliteStorage::open(&path).await.expect("open");
    let uri = format!("file:{}?mode=ro", path.display());
    let reader = SqliteStorage::open(&uri).await.expect("open read-only");
    let err = reader
        .write(messages(vec![command(0, "a", "s1")]))
        .await
        .expect_err("read-only write");
    match err {
        StorageError::ReadOnly {
            database, reason, ..
        } => {
            assert_eq!(database, uri);
            assert!(reason.contains("readonly"), "{reason}");
        }
        other => panic!("expected ReadOnly, got {other:?}"),
    }
    drop(writer);
}

/// Two handles on one file, as two processes would have: both open at once (one migrates),
/// and their concurrent writers all succeed without "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_on_one_file_open_and_write_concurrently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    let options = SqliteOptions::default()
        .pool_size(4)
        .busy_timeout(std::time::Duration::from_secs(30));
    let (a, b) = tokio::join!(
        SqliteStorage::open_with(&path, options.clone()),
        SqliteStorage::open_with(&path, options)
    );
    let handles = [Arc::new(a.expect("open a")), Arc::new(b.expect("open b"))];
    let mut tasks = Vec::new();
    for t in 0..8 {
        let storage = Arc::clone(&handles[t % 2]);
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let batch = WriteBatch {
                    events: vec![],
                    messages: vec![command(t as u32, &format!("t{t}"), &format!("s{i}"))],
                };
                storage.write(batch).await.expect("concurrent write");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let counts = handles[0].counts(None).await.expect("counts");
    assert_eq!(counts.to_deliver, 160);
    let page = handles[1]
        .read_page(ShardIndex(3), t0(), 100)
        .await
        .expect("read");
    assert_eq!(page.messages.len(), 20);
}

#[derive(QueryableByName)]
struct PlanStep {
    #[diesel(sql_type = Text)]
    detail: String,
}

fn plan(conn: &mut SqliteConnection, sql: &str) -> String {
    let steps: Vec<PlanStep> = diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
        .load(conn)
        .expect("explain");
    steps
        .into_iter()
        .map(|s| s.detail)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The statements of a stage use the indexes that keep its cost O(page): the SQL the storage
/// really issues is captured and explained.
#[tokio::test]
async fn stage_queries_use_their_indexes() {
    capture_statements();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    let storage = SqliteStorage::open(&path).await.expect("open");
    storage
        .write(messages(vec![command(0, "a", "s1")]))
        .await
        .expect("write");
    // A batch of four: the multi-row forms of a page (cut into arrays, see `ladder!`).
    storage
        .write(messages(
            (0..4)
                .map(|i| command(0, &format!("m{i}"), &format!("sm{i}")))
                .collect(),
        ))
        .await
        .expect("write four");
    let lease = fixtures::pick(&storage, 0, "node-a", t0()).await;
    let page = storage
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    storage.next_due(ShardIndex(0), t0()).await.expect("next");
    assert_eq!(page.messages.len(), 5);
    let mut commit = fixtures::delivering(&lease, t0(), &page.messages);
    commit.purge_delivered = 10;
    let key = fixtures::key("a");
    commit.states = ["a", "m0", "m1", "m2", "m3"]
        .map(|id| fixtures::state(fixtures::key(id), Some("{}")))
        .to_vec();
    storage.commit_stage(commit).await.expect("commit");
    // A send of one event, and one state loaded: the single-row and single-value forms.
    storage
        .write(WriteBatch {
            events: vec![fixtures::event("e1", "booked", t0())],
            messages: vec![command(1, "b", "e1")],
        })
        .await
        .expect("write an event");
    let states = shardbox_core::storage::EntityStore::load_states(&storage, &[key])
        .await
        .expect("states");
    assert_eq!(states.len(), 1, "the state the commit stored");
    assert_eq!(states[0].version, 1);
    drop(storage);

    let issued = taken(&ISSUED);
    let find = |needle: &str| -> String {
        issued
            .iter()
            .find(|q| q.starts_with("SELECT") && q.contains("inbox_messages") && q.contains(needle))
            .unwrap_or_else(|| panic!("no SELECT containing {needle:?} in {issued:#?}"))
            .clone()
    };
    let mut conn = raw(&path);
    // The page read is one statement of six parts, each a range of its own index.
    let page_sql = find("SELECT 0 AS part");
    // No bare `LIMIT ?`: SQLite prepares such a statement again at every execution (binding
    // the limit expires it, since the planner may use its value), which took half the CPU of
    // the `latency` benchmark.
    assert!(!page_sql.contains("LIMIT ?"), "{page_sql}");
    let page = plan(&mut conn, &page_sql);
    for index in [
        "USING INDEX inbox_immediate (shard=?)",
        "USING INDEX inbox_delayed (shard=?",
        "USING INDEX inbox_retrying (shard=?)",
        "USING INDEX inbox_blocked_by_shard (shard=?)",
        "USING INDEX inbox_purge (shard=?",
    ] {
        assert!(
            page.contains(index),
            "{index:?} not in the page read: {page}"
        );
    }
    assert!(
        !page.contains("SCAN inbox_messages"),
        "no table scan: {page}"
    );
    // Only the delayed part sorts (its range up to now, at most a page kept); the immediate
    // range is read in seq order from its index.
    let immediate = page
        .split("CO-ROUTINE due_later")
        .next()
        .unwrap_or_default();
    assert!(!immediate.contains("TEMP B-TREE"), "no sort: {page}");
    assert_eq!(page.matches("TEMP B-TREE").count(), 1, "{page}");
    let next_due = plan(&mut conn, &find("min("));
    assert!(next_due.contains("inbox_delayed"), "{next_due}");
    let purge = plan(&mut conn, &find("`keep_until` <= ?"));
    assert!(purge.contains("inbox_purge"), "{purge}");
    // A page's rows are marked delivered through their seqs.
    let delivered = issued
        .iter()
        .find(|q| q.starts_with("UPDATE OR FAIL inbox_messages SET status = 'delivered'"))
        .expect("the commit marked rows delivered");
    let delivered = plan(&mut conn, delivered);
    assert_eq!(
        delivered,
        "SEARCH inbox_messages USING INDEX inbox_seq (seq=?)"
    );

    // The page read's statements are prepared once per connection, not at every read: the
    // partial-index predicates, written as SQL text, must not make them uncacheable. Nor are
    // the single-row inserts and the single-id state load.
    let cached = taken(&CACHED);
    for needle in [
        "SELECT 0 AS part",
        "min(",
        // The seqs a send draws, its message (one), its event, one state: statements of a
        // stage or send of one message.
        "UPDATE inbox_sequence SET last",
        "INSERT OR FAIL INTO inbox_messages (seq, shard, signal_id, target_kind, target_id, \
         tenant, kind, status, received_at, deliver_after, expires_at, payload, payload_type, \
         metadata, payload_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON",
        // The batch of four messages: one statement of four rows.
        "payload_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (",
        "INSERT OR FAIL INTO events (id, event_type, source_kind, source_id, tenant, \
         occurred_at, payload, metadata, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id)",
        "FROM `entity_states`",
        // The commit's fence, its delivered rows and states (five: four and one).
        "UPDATE shard_sessions SET lease_until",
        "seq IN (?)",
        "seq IN (?, ?, ?, ?)",
        "INSERT OR FAIL INTO entity_states",
        "VALUES (?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?), \
         (?, ?, ?, ?, ?, ?, ?) ON",
    ] {
        assert!(
            cached.iter().any(|sql| sql.contains(needle)),
            "{needle:?} not cached: {cached:#?}"
        );
    }
}

/// One write of several shards' rows stores them shard by shard (a page's commit then
/// dirties a few table pages, not one per row or two), while `seq` keeps the order they were
/// written in, across shards too.
#[tokio::test]
async fn a_write_stores_its_rows_shard_by_shard_in_seq_order() {
    #[derive(QueryableByName, Debug, PartialEq)]
    struct Stored {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        seq: i64,
        #[diesel(sql_type = diesel::sql_types::Integer)]
        shard: i32,
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    let storage = SqliteStorage::open(&path).await.expect("open");
    storage
        .write(messages(vec![command(0, "before", "s0")]))
        .await
        .expect("write");
    let interleaved: Vec<_> = (1..=9)
        .map(|i| command(i % 3, &format!("t{i}"), &format!("s{i}")))
        .collect();
    storage.write(messages(interleaved)).await.expect("write");
    let in_table_order: Vec<Stored> =
        diesel::sql_query("SELECT seq, shard FROM inbox_messages ORDER BY rowid")
            .load(&mut raw(&path))
            .expect("rows");
    let stored = |seq, shard| Stored { seq, shard };
    assert_eq!(
        in_table_order,
        [
            stored(1, 0),
            // The second write: its shard 0 rows, then shard 1's, then shard 2's, each
            // numbered in the order written.
            stored(4, 0),
            stored(7, 0),
            stored(10, 0),
            stored(2, 1),
            stored(5, 1),
            stored(8, 1),
            stored(3, 2),
            stored(6, 2),
            stored(9, 2),
        ]
    );
    let rows = storage.rows().await.expect("rows");
    assert_eq!(
        fixtures::signals(&rows),
        ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"],
        "in seq order, the order written"
    );
}

/// A file made by the first schema is migrated in place: its rows survive whole, the new
/// status and column are usable, and `seq` keeps counting past rows already deleted.
#[tokio::test]
async fn upgrading_a_first_schema_file_keeps_rows_and_seq() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    let mut conn = raw(&path);
    conn.batch_execute(include_str!(
        "../migrations/sqlite/2025-01-01-000001_shardbox_schema/up.sql"
    ))
    .expect("first schema");
    conn.batch_execute(
        "CREATE TABLE __diesel_schema_migrations (version VARCHAR(50) PRIMARY KEY NOT NULL, \
         run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP); \
         INSERT INTO __diesel_schema_migrations (version) VALUES ('20250101000001'); \
         INSERT INTO inbox_messages (shard, signal_id, target_kind, target_id, tenant, kind, \
           status, received_at, attempts, last_error, payload, payload_type) VALUES \
           (0, 'kept', 'account', 'a', '', 'command', 'to_deliver', 1, 2, 'boom', x'7b7d', 't'), \
           (0, 'gone', 'account', 'b', '', 'command', 'to_deliver', 1, 0, NULL, x'7b7d', 't'); \
         DELETE FROM inbox_messages WHERE signal_id = 'gone';",
    )
    .expect("old rows");
    drop(conn);

    let storage = SqliteStorage::open(&path).await.expect("open migrates");
    let rows = storage.rows().await.expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].seq, rows[0].attempts, rows[0].last_error.as_deref()),
        (1, 2, Some("boom"))
    );
    assert_eq!(rows[0].first_failed_at, None);
    storage
        .write(messages(vec![command(0, "c", "new")]))
        .await
        .expect("write");
    let rows = storage.rows().await.expect("rows");
    assert_eq!(
        rows[1].seq, 3,
        "seq 2 was used before the upgrade: never again"
    );
    raw(&path)
        .batch_execute("UPDATE inbox_messages SET status = 'blocked' WHERE seq = 1")
        .expect("the new status is allowed");
}

/// The background thread copies committed pages into the database file: the commits here stay
/// far below every autocheckpoint threshold, so the file grows only through the thread — and
/// with the thread turned off it does not grow until the last connection closes.
#[tokio::test]
async fn background_checkpoints_copy_the_wal_into_the_file() {
    for interval in [Some(std::time::Duration::from_millis(20)), None] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = db_in(&dir);
        let options = SqliteOptions::default().checkpoint_interval(interval);
        let storage = SqliteStorage::open_with(&path, options)
            .await
            .expect("open");
        let size = || std::fs::metadata(&path).expect("db file").len();
        let before = size();
        let rows = (0..2_000)
            .map(|i| command(i % 8, &format!("t{i}"), &format!("s{i}")))
            .collect();
        storage.write(messages(rows)).await.expect("write");
        let wal = std::fs::metadata(dir.path().join("shardbox.db-wal"))
            .expect("wal file")
            .len();
        assert!(wal > 100 * 1024, "the write went to the WAL: {wal} bytes");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut after = size();
        while interval.is_some() && after <= before && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            after = size();
        }
        if interval.is_some() {
            assert!(after > before, "checkpointed: {before} → {after} bytes");
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            assert_eq!(size(), before, "no checkpoint without the thread");
        }
        drop(storage);
        let reopened = SqliteStorage::open(&path).await.expect("reopen");
        assert_eq!(reopened.rows().await.expect("rows").len(), 2_000);
    }
}

/// A query that fails keeps the driver's error as its `source()`, not only its text.
#[tokio::test]
async fn a_failed_query_keeps_the_diesel_error_as_its_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_in(&dir);
    let storage = SqliteStorage::open(&path).await.expect("open");
    // A schema edited by hand: the inbox is gone.
    SqliteConnection::establish(&path.display().to_string())
        .expect("raw")
        .batch_execute("DROP TABLE inbox_messages")
        .expect("drop");
    let err = storage
        .write(messages(vec![command(0, "a", "s1")]))
        .await
        .expect_err("no inbox table");
    assert!(
        matches!(&err, StorageError::Query { reason, .. } if reason.contains("no such table")),
        "{err:?}"
    );
    let source = std::error::Error::source(&err).expect("the driver's error is kept");
    assert!(
        matches!(
            source.downcast_ref::<diesel::result::Error>(),
            Some(diesel::result::Error::DatabaseError(..))
        ),
        "{source:?}"
    );
}

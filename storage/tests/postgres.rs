//! PostgreSQL-specific behaviour beyond the conformance suite: connection errors, concurrent
//! migration, schema versions and isolation, page reads over a large inbox, event order, an
//! unblock beside a stage commit in flight.
//!
//! Needs `SHARDBOX_PG_URL` (except the unreachable-server case); each test uses its own schema.
#![cfg(feature = "postgres")]

mod common;

use common::{pg_url, Schema};
use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{QueryableByName, RunQueryDsl};
use shardbox_conformance::fixtures::{command, messages, t0};
use shardbox_core::{InboxStore, ShardIndex, Storage, StorageError};
use shardbox_storage::{MigrationMode, PostgresStorage};

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_the_password_never_shows() {
    let url = "postgres://app:hunter2@127.0.0.1:1/shardbox?connect_timeout=2";
    let err = PostgresStorage::connect(url)
        .await
        .expect_err("nothing listens on port 1");
    let shown = err.to_string();
    match &err {
        StorageError::Unavailable { database, .. } => {
            assert_eq!(
                database,
                "postgres://app:***@127.0.0.1:1/shardbox?connect_timeout=2"
            )
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(!format!("{err:?}").contains("hunter2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_connects_migrate_once() {
    let Some(url) = pg_url("concurrent_connects_migrate_once") else {
        return;
    };
    let schema = Schema::new(&url, "concurrent_connects");
    let connects = (0..4).map(|_| PostgresStorage::connect_with(url.clone(), schema.options(1)));
    let handles: Vec<_> = futures_join_all(connects).await;
    for h in &handles {
        assert!(h.is_ok(), "{h:?}");
    }
    #[derive(QueryableByName)]
    struct Version {
        #[diesel(sql_type = Text)]
        version: String,
    }
    let versions: Vec<Version> =
        diesel::sql_query("SELECT version FROM __diesel_schema_migrations")
            .load(&mut schema.raw())
            .expect("versions");
    let known = diesel::migration::MigrationSource::<diesel::pg::Pg>::migrations(
        &shardbox_storage::POSTGRES_MIGRATIONS,
    )
    .expect("embedded migrations")
    .len();
    assert!(known >= 2, "{known}");
    assert_eq!(versions.len(), known, "every migration, each applied once");
    assert!(versions.iter().all(|v| !v.version.is_empty()));
}

/// Awaits every future concurrently (tokio has no join_all; spawn each).
async fn futures_join_all<F, T>(futures: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_verify_mode_refuses_pending() {
    let Some(url) = pg_url("a_newer_schema_is_refused") else {
        return;
    };
    let schema = Schema::new(&url, "schema_versions");
    let verify = schema.options(4).migrations(MigrationMode::Verify);
    let err = PostgresStorage::connect_with(url.clone(), verify.clone())
        .await
        .expect_err("an empty schema has pending migrations");
    assert!(
        matches!(&err, StorageError::SchemaMismatch { found, .. } if found.contains("pending")),
        "{err:?}"
    );

    drop(schema.connect(4).await);
    PostgresStorage::connect_with(url.clone(), verify)
        .await
        .expect("a migrated schema passes verification");

    schema
        .raw()
        .batch_execute("INSERT INTO __diesel_schema_migrations (version) VALUES ('20990101000000')")
        .expect("fake a newer migration");
    let err = PostgresStorage::connect_with(url, schema.options(4))
        .await
        .expect_err("newer schema");
    match err {
        StorageError::SchemaMismatch { found, advice, .. } => {
            assert!(found.contains("20990101000000"), "{found}");
            assert!(advice.contains("upgrade"), "{advice}");
        }
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn schemas_isolate_their_data() {
    let Some(url) = pg_url("schemas_isolate_their_data") else {
        return;
    };
    let (one, two) = (Schema::new(&url, "iso_one"), Schema::new(&url, "iso_two"));
    let (a, b) = (one.connect(4).await, two.connect(4).await);
    a.write(messages(vec![command(0, "a", "s1")]))
        .await
        .expect("write");
    assert_eq!(a.counts(None).await.expect("counts").to_deliver, 1);
    assert_eq!(b.counts(None).await.expect("counts").to_deliver, 0);
    assert!(a.describe().contains(&one.name), "{}", a.describe());
    assert_eq!(b.schema(), Some(two.name.as_str()));
}

/// A page read over a large inbox returns the right rows, with a backlog and with most rows
/// delivered (kept for deduplication) and analyzed. The statement's plan — each part a range
/// of its own index, in the generic plan with and without statistics — is checked where the
/// statement is defined (`sql::page_read`).
#[tokio::test]
async fn page_reads_find_the_pending_rows_whatever_the_inbox_holds() {
    let Some(url) = pg_url("page_reads_find_the_pending_rows") else {
        return;
    };
    let schema = Schema::new(&url, "page_plan");
    let storage = schema.connect(4).await;
    let rows: Vec<_> = (0..20_000)
        .map(|i| command(i % 8, &format!("t{i}"), &format!("s{i}")))
        .collect();
    storage.write(messages(rows)).await.expect("write");
    let mut conn = schema.raw();
    conn.batch_execute("ANALYZE inbox_messages")
        .expect("analyze");
    let shard_three = || storage.read_page(ShardIndex(3), t0(), 100);
    let backlog = shard_three().await.expect("read");
    // Shard 3 holds seq ≡ 4 (mod 8): the first 100 of them.
    assert_eq!(backlog.messages.len(), 100);
    assert!(backlog.messages.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(backlog.messages.iter().all(|m| m.seq % 8 == 4));

    conn.batch_execute(
        "UPDATE inbox_messages SET status = 'delivered', keep_until = 1800000000000000 \
         WHERE seq % 100 <> 0; ANALYZE inbox_messages",
    )
    .expect("deliver most rows");
    let page = shard_three().await.expect("read");
    // Shard 3 holds seq ≡ 4 (mod 8); of those, seq ≡ 100 (mod 200) stayed pending: 100 rows.
    assert_eq!(page.messages.len(), 100);
    assert!(page.messages.iter().all(|m| m.seq % 200 == 100));
}

/// Events commit in `seq` order, so a reader paging by `seq` never returns a later event
/// without an earlier one that is still being appended (its cursor would pass it for good).
///
/// Appender A inserts two events in one statement: the first gets its `seq`, the second
/// waits on a conflicting insert a raw connection holds open. Appender B starts after it:
/// it must not commit its event (a higher `seq`) before A, so a read meanwhile returns
/// neither; once the raw insert rolls back, both commit in `seq` order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_event_commit_never_shows_past_an_earlier_one() {
    use diesel::Connection;
    use shardbox_conformance::fixtures::event;
    use shardbox_core::storage::WriteBatch;
    use shardbox_core::EventStore;
    let Some(url) = pg_url("a_late_event_commit_never_shows_past_an_earlier_one") else {
        return;
    };
    let schema = Schema::new(&url, "event_commit_order");
    let storage = std::sync::Arc::new(schema.connect(4).await);
    let events = |ids: &[&str]| WriteBatch {
        events: ids.iter().map(|id| event(id, "booked", t0())).collect(),
        messages: vec![],
    };
    let ids = |read: Vec<shardbox_core::StoredEvent>| -> Vec<String> {
        read.into_iter().map(|e| e.event.id.0).collect()
    };
    // A raw transaction holds an uncommitted event `x` (it takes no part in the ordering; it
    // only makes appender A wait after A has taken its own `seq`).
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let mut raw = schema.raw();
    let holder = std::thread::spawn(move || {
        raw.transaction(|conn| {
            conn.batch_execute(
                "INSERT INTO events (id, event_type, source_kind, source_id, tenant, \
                 occurred_at, payload) VALUES ('x', 'booked', 'k', 'i', '', 0, '')",
            )?;
            held_tx.send(()).expect("signal");
            hold_rx.recv().expect("release");
            Err::<(), _>(diesel::result::Error::RollbackTransaction)
        })
        .expect_err("rolled back");
    });
    held_rx.recv().expect("holder ready");
    let a = tokio::spawn({
        let storage = storage.clone();
        async move { storage.write(events(&["a", "x"])).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!a.is_finished(), "A waits on the held insert of x");
    let b = tokio::spawn({
        let storage = storage.clone();
        async move { storage.write(events(&["b"])).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let meanwhile = ids(storage.read_events(0, &[], None, 100).await.expect("read"));
    assert!(
        meanwhile.is_empty(),
        "B's event must not be readable before A's: {meanwhile:?}"
    );
    hold_tx.send(()).expect("release the holder");
    holder.join().expect("holder");
    a.await.expect("task").expect("A commits");
    b.await.expect("task").expect("B commits");
    let all = ids(storage.read_events(0, &[], None, 100).await.expect("read"));
    assert_eq!(all, ["a", "x", "b"], "seq order is commit order");
}

/// Passwords with characters a URL reserves, left unencoded (libpq accepts most of them), or
/// with a malformed percent-escape that libpq quotes back in its message: neither the error's
/// Display nor its Debug nor any error in its `source()` chain shows the password or a piece
/// of it.
#[tokio::test]
async fn a_hostile_password_never_shows_in_connect_errors() {
    let Some(url) = pg_url("a_hostile_password_never_shows_in_connect_errors") else {
        return;
    };
    // The same server, but with the user name and a password spliced in.
    let host_part = url
        .split_once('@')
        .map_or("127.0.0.1:5432/test", |(_, h)| h);
    let wrong_port = host_part.replacen(":5432", ":5433", 1);
    let cases = [
        (
            format!("postgres://postgres:S3c#retPw6@{wrong_port}"),
            "S3c#retPw6",
            &["S3c", "retPw6"][..],
        ),
        (
            format!("postgres://postgres:S3c%zzretPw6@{host_part}"),
            "S3c%zzretPw6",
            &["S3c", "zzretPw6"][..],
        ),
        (
            format!("postgres://postgres:S3c?ret/Pw6@{host_part}"),
            "S3c?ret/Pw6",
            &["S3c", "ret", "Pw6"][..],
        ),
        (
            format!("postgres://postgres:S3c@ret:Pw6@{wrong_port}"),
            "S3c@ret:Pw6",
            &["S3c", "ret", "Pw6"][..],
        ),
    ];
    for (url, password, pieces) in cases {
        let err = PostgresStorage::connect(url.as_str())
            .await
            .expect_err("a wrong port or a malformed URL");
        let mut shown = vec![err.to_string(), format!("{err:?}")];
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            shown.push(cause.to_string());
            shown.push(format!("{cause:?}"));
            source = cause.source();
        }
        for text in &shown {
            assert!(!text.contains(password), "{password} shows in: {text}");
            for piece in pieces {
                assert!(
                    !text.contains(piece),
                    "{piece} of {password} shows in: {text}"
                );
            }
        }
    }
}

/// Secrets libpq finds where a careless reader would not: a `password` option whose name is
/// percent-encoded (libpq decodes it, then quotes the malformed value back), and a
/// keyword/value string whose password holds `://`. Neither shows, in the database's name nor
/// in the error. Needs no server: nothing listens on port 1.
#[tokio::test]
async fn secrets_libpq_reads_in_unusual_places_never_show() {
    let cases = [
        (
            "postgres://app@127.0.0.1:1/shardbox?pass%77ord=S3c%zzret&connect_timeout=2",
            "postgres://app@127.0.0.1:1/shardbox?pass%77ord=***&connect_timeout=2",
            "S3c%zzret",
        ),
        (
            "host=127.0.0.1 port=1 password=se://cret dbname=shardbox connect_timeout=2",
            "host=127.0.0.1 port=1 password=*** dbname=shardbox connect_timeout=2",
            "se://cret",
        ),
    ];
    for (url, shown, password) in cases {
        let err = PostgresStorage::connect(url)
            .await
            .expect_err("a malformed escape or nothing listening");
        match &err {
            StorageError::Unavailable { database, .. }
            | StorageError::InvalidUrl { database, .. } => {
                assert_eq!(database, shown)
            }
            other => panic!("expected Unavailable or InvalidUrl, got {other:?}"),
        }
        let mut text = vec![err.to_string(), format!("{err:?}")];
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            text.push(format!("{cause} {cause:?}"));
            source = cause.source();
        }
        for text in &text {
            assert!(!text.contains(password), "{password} shows in: {text}");
        }
    }
}

/// A missing role, a missing database and a malformed URL each get their own error, which
/// says what to do, with libpq's trailing newline trimmed. (A wrong password cannot be shown
/// here: the test server trusts local logins whatever the password; its message is
/// classified in the unit tests.)
#[tokio::test]
async fn login_failures_are_told_apart() {
    let Some(url) = pg_url("login_failures_are_told_apart") else {
        return;
    };
    let host_part = url
        .split_once('@')
        .map_or("127.0.0.1:5432/test", |(_, h)| h);
    let (server, _db) = host_part.split_once('/').unwrap_or((host_part, "test"));

    let err = PostgresStorage::connect(format!("postgres://sbx_no_such_role@{host_part}"))
        .await
        .expect_err("no such role");
    match &err {
        StorageError::UnknownRole { role, reason, .. } => {
            assert_eq!(role, "sbx_no_such_role");
            assert!(!reason.ends_with('\n'), "{reason:?}");
        }
        other => panic!("expected UnknownRole, got {other:?}"),
    }
    assert!(err.to_string().contains("CREATE ROLE"), "{err}");

    let err = PostgresStorage::connect(format!("postgres://postgres@{server}/sbx_no_such_db"))
        .await
        .expect_err("no such database");
    match &err {
        StorageError::UnknownDatabase { name, .. } => assert_eq!(name, "sbx_no_such_db"),
        other => panic!("expected UnknownDatabase, got {other:?}"),
    }
    assert!(err.to_string().contains("CREATE DATABASE"), "{err}");

    for malformed in [
        format!("postgres://postgres:pw%zz@{host_part}"),
        format!("postgres://postgres@{server}/test?no_such_option=1"),
        "postgres://postgres@127.0.0.1:notaport/test".to_owned(),
    ] {
        let err = PostgresStorage::connect(malformed.as_str())
            .await
            .expect_err("malformed");
        assert!(
            matches!(&err, StorageError::InvalidUrl { .. }),
            "{malformed}: expected InvalidUrl, got {err:?}"
        );
        assert!(err.to_string().contains("Percent-encode"), "{err}");
        assert!(!err.to_string().contains("pw%zz"), "{err}");
    }
}

/// An unblock does not interleave with a stage commit on the target's shard: a commit in
/// flight (its fence taken, a row behind the block parked, not yet committed) makes the
/// unblock wait, and the unblock then sees that row and makes it due. Without the wait
/// (READ COMMITTED: the unblock's statements would not see the uncommitted park) the row
/// would stay parked with nothing left to release it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unblock_waits_for_a_commit_in_flight_and_releases_what_it_parked() {
    use shardbox_conformance::fixtures::{key, pick, signals, stage};
    use shardbox_core::storage::{RowChange, RowUpdate, Unblock};
    use shardbox_core::{DeadLetterStore, WorkRegistry};
    use std::sync::Arc;

    let Some(url) = pg_url("an_unblock_waits_for_a_commit_in_flight") else {
        return;
    };
    let schema = Schema::new(&url, "unblock_in_flight");
    let storage = Arc::new(schema.connect(2).await);
    storage
        .write(messages(vec![command(1, "a", "a1"), command(1, "a", "a2")]))
        .await
        .expect("write");
    let rows = storage.rows().await.expect("rows");
    let (a1, a2) = (rows[0].seq, rows[1].seq);
    let lease = pick(&*storage, 1, "node-a", t0()).await;
    let block = RowUpdate {
        seq: a1,
        change: RowChange::Block {
            attempts: 1,
            error: "bad".into(),
            errors: Default::default(),
        },
    };
    storage
        .commit_stage(stage(&lease, t0(), vec![block]))
        .await
        .expect("block");
    storage.release(&lease).await.expect("release");

    // What a stage's commit does first (the fence) and then for a2 behind the block.
    let mut raw = schema.raw();
    let parked = shardbox_core::catch_up::parked_until().timestamp_micros();
    raw.batch_execute(&format!(
        "BEGIN; UPDATE shard_sessions SET lease_until = lease_until WHERE shard = 1; \
         UPDATE inbox_messages SET deliver_after = {parked} WHERE seq = {a2}"
    ))
    .expect("a commit in flight");
    let unblocking = {
        let storage = storage.clone();
        tokio::spawn(async move {
            storage
                .unblock_target(&key("a"), Unblock::Requeue, t0())
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !unblocking.is_finished(),
        "the unblock waits for the commit in flight on the target's shard"
    );
    raw.batch_execute("COMMIT").expect("commit");
    let report = unblocking.await.expect("task").expect("unblock");
    assert_eq!((report.unblocked, report.released), (1, 1), "{report:?}");
    let page = storage
        .read_page(ShardIndex(1), t0(), 10)
        .await
        .expect("page");
    assert_eq!(signals(&page.messages), ["a1", "a2"]);
}

/// Two stage commits that complete catch-ups over overlapping shards, each on a shard of its
/// own, run at once: each holds its own shard's session row (the fence) and re-fences the
/// others'. Locked in opposite orders that is a deadlock, which PostgreSQL breaks by failing
/// one commit with "deadlock detected"; every commit that re-fences other shards takes all
/// its session rows in ascending order first, so one waits for the other — and is then fenced
/// (`LeaseLost`) by the other's re-fence, as a stage that read before a completion must be. A third connection holds the
/// two jobs' rows until both commits are past their fences, so the overlap happens every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_catch_up_completions_do_not_deadlock() {
    use shardbox_conformance::fixtures::{pick, secs, stage};
    use shardbox_core::storage::{CatchUpStatus, CatchUpTargets, NewCatchUp};
    use shardbox_core::CatchUpStore;
    use std::sync::Arc;

    let Some(url) = pg_url("overlapping_catch_up_completions_do_not_deadlock") else {
        return;
    };
    let schema = Schema::new(&url, "refence_order");
    let storage = Arc::new(schema.connect(4).await);
    let start = |kind: &str| NewCatchUp {
        projection_kind: kind.into(),
        tenant: String::new(),
        targets: CatchUpTargets::All,
        since: None,
        affected_shards: vec![ShardIndex(1), ShardIndex(2), ShardIndex(3)],
        total_estimate: 0,
        created_at: t0(),
        version_of: None,
        databases: 1,
    };
    for round in 0..3 {
        let one = storage
            .start_catch_up(start(&format!("p1-{round}")), 16)
            .await
            .expect("start");
        let two = storage
            .start_catch_up(start(&format!("p2-{round}")), 16)
            .await
            .expect("start");
        let complete = |mut job: shardbox_core::storage::CatchUpJob| {
            job.status = CatchUpStatus::Completed;
            job.finished_at = Some(secs(1));
            job.updated_at = secs(1);
            job
        };
        let mut commit_one = stage(&pick(&*storage, 1, "node-a", t0()).await, t0(), vec![]);
        commit_one.catch_ups = vec![complete(one.clone())];
        let mut commit_two = stage(&pick(&*storage, 2, "node-b", t0()).await, t0(), vec![]);
        commit_two.catch_ups = vec![complete(two.clone())];

        let mut holder = schema.raw();
        holder
            .batch_execute(&format!(
                "BEGIN; SELECT id FROM catch_ups WHERE id IN ({}, {}) FOR UPDATE",
                one.id, two.id
            ))
            .expect("hold the job rows");
        let run = |commit| {
            let storage = storage.clone();
            tokio::spawn(async move { storage.commit_stage(commit).await })
        };
        let (a, b) = (run(commit_one), run(commit_two));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        holder.batch_execute("COMMIT").expect("let go");
        let a = a.await.expect("task");
        let b = b.await.expect("task");
        // The first to take the rows commits and re-fences the other's shard, whose stage is
        // then refused as designed (it read before the completion) — never a deadlock.
        for r in [&a, &b] {
            assert!(
                matches!(r, Ok(_) | Err(StorageError::LeaseLost { .. })),
                "round {round}: committed or fenced, not failed: {r:?}"
            );
        }
        assert!(
            a.is_ok() || b.is_ok(),
            "round {round}: one commits: {a:?} / {b:?}"
        );
    }
}

/// A send that addresses its rows by the recorded shard count while a re-sharding's switch
/// is in flight waits for the switch, then reads the count the switch committed and is
/// refused, writing nothing (the sender addresses it anew); a write that locked the count
/// first holds the switch off until it commits, so the switch sees (and moves) its rows. What
/// `FOR KEY SHARE` against the switch's `FOR UPDATE` on the setting's row promises, checked
/// with the switch's first statement held open on a connection of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addressed_write_waits_for_a_switch_in_flight_and_sees_its_count() {
    use shardbox_core::WorkRegistry;
    use std::sync::Arc;

    let Some(url) = pg_url("an_addressed_write_waits_for_a_switch_in_flight") else {
        return;
    };
    let schema = Schema::new(&url, "reshard_fence");
    let storage = Arc::new(schema.connect(2).await);
    storage.claim_shard_count(4).await.expect("claim");

    // The switch: the count's row locked, then 4 -> 8, committed while the write waits.
    let mut raw = schema.raw();
    raw.batch_execute(
        "BEGIN; SELECT value FROM shardbox_settings WHERE name = 'shard_count' FOR UPDATE",
    )
    .expect("a switch in flight");
    let writing = {
        let storage = storage.clone();
        tokio::spawn(async move {
            storage
                .write_all_addressed(vec![messages(vec![command(1, "a", "a1")])], 4)
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !writing.is_finished(),
        "the write waits for the switch in flight"
    );
    raw.batch_execute(
        "UPDATE shardbox_settings SET value = '8' WHERE name = 'shard_count'; COMMIT",
    )
    .expect("switch commits");
    let refused = writing.await.expect("task");
    assert!(
        matches!(
            refused,
            Err(StorageError::ShardCountChanged {
                expected: 4,
                recorded: 8
            })
        ),
        "{refused:?}"
    );
    assert!(
        storage.rows().await.expect("rows").is_empty(),
        "nothing was written"
    );

    // The other order: a write holding the shared lock keeps the switch's lock waiting.
    let mut raw = schema.raw();
    raw.batch_execute(
        "BEGIN; SELECT value FROM shardbox_settings WHERE name = 'shard_count' FOR KEY SHARE",
    )
    .expect("a write in flight");
    let switching = {
        let mut other = schema.raw();
        tokio::task::spawn_blocking(move || {
            other.batch_execute(
                "BEGIN; SELECT value FROM shardbox_settings WHERE name = 'shard_count' FOR UPDATE; COMMIT",
            )
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !switching.is_finished(),
        "the switch waits for the write in flight"
    );
    raw.batch_execute("COMMIT").expect("write commits");
    switching.await.expect("task").expect("switch");
}

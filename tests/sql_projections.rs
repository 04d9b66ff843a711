//! SQL projections (issue 34): a read model in the application's own table, written inside
//! the stage's transaction, on SQLite and PostgreSQL.
//!
//! - the table equals the in-order fold of the events, each applied once;
//! - a write the table refuses (a CHECK constraint) fails only its own target's message: the
//!   failure policy retries then dead-letters it, the target's later events and the other
//!   targets are written;
//! - the in-memory backend refuses a SQL projection at build, naming it;
//! - blue/green: a second version writing a table of its own (`tally_rows_v2`, the
//!   table-name-suffix mapping) is built beside the served table while commands keep coming;
//!   every read of the served table is complete, the completion switches the model, and the
//!   new table is then the in-order fold of every event.
//!
//! That a stale owner lands none of its writes is `storage/tests/in_transaction.rs`.

mod common;

use common::{Tally, TallyCommand, TallyEvent};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use shardbox::prelude::*;
use shardbox::storage::on_connection;
use shardbox::{Backoff, CatchUp, ManualClock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

diesel::table! {
    /// The application's read model: one row per tally.
    tally_rows (id) {
        id -> Text,
        events -> BigInt,
        total -> BigInt,
        seen -> Text,
    }
}

diesel::table! {
    /// Version 2 of the read model, in a table of its own: the same per tally, and how many
    /// numbers it recorded (the new column a rebuild is for).
    tally_rows_v2 (id) {
        id -> Text,
        events -> BigInt,
        total -> BigInt,
        seen -> Text,
        recorded -> BigInt,
    }
}

/// The application's migration: totals stay under 1,000; version 2's table beside.
const MIGRATION: &str = "CREATE TABLE tally_rows (
    id TEXT PRIMARY KEY,
    events BIGINT NOT NULL,
    total BIGINT NOT NULL CHECK (total < 1000),
    seen TEXT NOT NULL
);
CREATE TABLE tally_rows_v2 (
    id TEXT PRIMARY KEY,
    events BIGINT NOT NULL,
    total BIGINT NOT NULL,
    seen TEXT NOT NULL,
    recorded BIGINT NOT NULL
)";

/// Per tally: how many events, the sum of `Added`, and the `Recorded` numbers in order.
struct TallyRows;

impl SqlProjection for TallyRows {
    const KIND: &'static str = "tally-rows";
    type Event = TallyEvent;

    fn apply(&self, conn: SqlConnection<'_>, e: &TallyEvent, cx: &Context<'_>) -> SqlResult {
        use tally_rows::dsl as t;
        let (added, seen) = match e {
            TallyEvent::Recorded(n) => (0, format!(",{n}")),
            TallyEvent::Added(x) => (*x, String::new()),
        };
        on_connection!(conn, |c| diesel::insert_into(t::tally_rows)
            .values((
                t::id.eq(cx.target_id),
                t::events.eq(1),
                t::total.eq(added),
                t::seen.eq(&seen),
            ))
            .on_conflict(t::id)
            .do_update()
            .set((
                t::events.eq(t::events + 1),
                t::total.eq(t::total + added),
                t::seen.eq(t::seen.concat(&seen)),
            ))
            .execute(c))?;
        Ok(())
    }

    fn reset(&self, conn: SqlConnection<'_>, scope: &RebuildScope) -> SqlResult {
        use tally_rows::dsl as t;
        match &scope.ids {
            None => on_connection!(conn, |c| diesel::delete(t::tally_rows).execute(c))?,
            Some(ids) => on_connection!(conn, |c| diesel::delete(
                t::tally_rows.filter(t::id.eq_any(ids))
            )
            .execute(c))?,
        };
        Ok(())
    }
}

/// Version 2 of [`TallyRows`]: the same columns in `tally_rows_v2`, and `recorded`.
struct TallyRowsV2;

impl SqlProjection for TallyRowsV2 {
    const KIND: &'static str = "tally-rows-v2";
    type Event = TallyEvent;

    fn apply(&self, conn: SqlConnection<'_>, e: &TallyEvent, cx: &Context<'_>) -> SqlResult {
        use tally_rows_v2::dsl as t;
        let (added, seen, recorded) = match e {
            TallyEvent::Recorded(n) => (0, format!(",{n}"), 1),
            TallyEvent::Added(x) => (*x, String::new(), 0),
        };
        on_connection!(conn, |c| diesel::insert_into(t::tally_rows_v2)
            .values((
                t::id.eq(cx.target_id),
                t::events.eq(1),
                t::total.eq(added),
                t::seen.eq(&seen),
                t::recorded.eq(recorded),
            ))
            .on_conflict(t::id)
            .do_update()
            .set((
                t::events.eq(t::events + 1),
                t::total.eq(t::total + added),
                t::seen.eq(t::seen.concat(&seen)),
                t::recorded.eq(t::recorded + recorded),
            ))
            .execute(c))?;
        Ok(())
    }

    fn reset(&self, conn: SqlConnection<'_>, scope: &RebuildScope) -> SqlResult {
        use tally_rows_v2::dsl as t;
        match &scope.ids {
            None => on_connection!(conn, |c| diesel::delete(t::tally_rows_v2).execute(c))?,
            Some(ids) => on_connection!(conn, |c| diesel::delete(
                t::tally_rows_v2.filter(t::id.eq_any(ids))
            )
            .execute(c))?,
        };
        Ok(())
    }
}

/// A row of the read model.
#[derive(Queryable, Debug, PartialEq)]
struct Row {
    id: String,
    events: i64,
    total: i64,
    seen: String,
}

/// Reads the whole read model, the way the application's own queries would.
fn read_model(db: &mut Db) -> Vec<Row> {
    use tally_rows::dsl as t;
    match db {
        Db::Sqlite(c) => t::tally_rows.order(t::id).load(c),
        Db::Postgres(c) => t::tally_rows.order(t::id).load(c),
    }
    .expect("read the read model")
}

/// Reads the table of version `kind` of the read model (the columns both versions have), as
/// the application reads the version `served_kind` names.
fn read_version(db: &mut Db, kind: &str) -> Vec<Row> {
    use tally_rows_v2::dsl as t;
    if kind == TallyRows::KIND {
        return read_model(db);
    }
    assert_eq!(kind, TallyRowsV2::KIND, "no table for `{kind}`");
    let columns = (t::id, t::events, t::total, t::seen);
    match db {
        Db::Sqlite(c) => t::tally_rows_v2.order(t::id).select(columns).load(c),
        Db::Postgres(c) => t::tally_rows_v2.order(t::id).select(columns).load(c),
    }
    .expect("read version 2")
}

/// Waits (at most 30 s) until version `kind`'s table is `expected`.
async fn until_table(db: &mut Db, kind: &str, expected: &[Row]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rows = read_version(db, kind);
        if rows == expected || tokio::time::Instant::now() >= deadline {
            assert_eq!(rows, expected, "`{kind}`'s table is the in-order fold");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A connection of the application's own to the database.
enum Db {
    Sqlite(diesel::SqliteConnection),
    Postgres(diesel::PgConnection),
}

async fn sqlite() -> (Arc<dyn shardbox::core::Storage>, Db, Box<dyn std::any::Any>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shop.db");
    let storage = shardbox::SqliteStorage::open(&path).await.expect("open");
    let mut raw = diesel::SqliteConnection::establish(path.to_str().expect("utf-8")).expect("raw");
    raw.batch_execute(&format!("PRAGMA busy_timeout = 5000; {MIGRATION}"))
        .expect("the application's migration");
    (Arc::new(storage), Db::Sqlite(raw), Box::new(dir))
}

async fn postgres(
    test: &str,
) -> Option<(Arc<dyn shardbox::core::Storage>, Db, Box<dyn std::any::Any>)> {
    let url = common::pg_url(test)?;
    let schema = common::PgSchema::new(&url, test);
    let storage = schema.connect(4).await;
    let mut raw = schema.raw();
    raw.batch_execute(MIGRATION)
        .expect("the application's migration");
    Some((Arc::new(storage), Db::Postgres(raw), Box::new(schema)))
}

/// Two attempts a minute apart, then a dead letter.
fn two_attempts() -> FailurePolicy {
    FailurePolicy::new(
        2,
        Backoff::Fixed(Duration::from_secs(60)),
        ExhaustedOutcome::DeadLetter,
    )
}

async fn the_table_is_the_in_order_fold(storage: Arc<dyn shardbox::core::Storage>, mut db: Db) {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .clock(clock.clone())
        .shards(4)
        .aggregate::<Tally>()
        .sql_projection(TallyRows)
        .kind_policy(TallyRows::KIND, two_attempts())
        .build()
        .await
        .expect("build");
    let ids: Vec<String> = (0..12).map(|i| format!("t-{i:02}")).collect();
    for n in 1..=5 {
        for id in &ids {
            sb.send::<Tally>(id, &TallyCommand::Record(n))
                .await
                .unwrap();
        }
    }
    for id in &ids {
        sb.send::<Tally>(id, &TallyCommand::Add(10)).await.unwrap();
    }
    // `bad`: its second event breaks the table's CHECK; its first and third are written.
    sb.send::<Tally>("bad", &TallyCommand::Record(1))
        .await
        .unwrap();
    sb.send::<Tally>("bad", &TallyCommand::Add(5000))
        .await
        .unwrap();
    sb.send::<Tally>("bad", &TallyCommand::Record(2))
        .await
        .unwrap();

    sb.deliver_all().await.expect("deliver");
    // Past the retry: the second attempt fails too and dead-letters the event.
    clock.advance(chrono::Duration::minutes(2));
    sb.deliver_all().await.expect("deliver");

    let mut expected: Vec<Row> = ids
        .iter()
        .map(|id| Row {
            id: id.clone(),
            events: 6,
            total: 10,
            seen: ",1,2,3,4,5".into(),
        })
        .collect();
    expected.insert(
        0,
        Row {
            id: "bad".into(),
            events: 2,
            total: 0,
            seen: ",1,2".into(),
        },
    );
    assert_eq!(read_model(&mut db), expected);

    let dead = sb
        .dead_letters(DeadLetterFilter::all())
        .await
        .expect("dead letters");
    assert_eq!(dead.len(), 1, "{dead:?}");
    let letter = &dead[0].letter;
    assert_eq!(
        (
            letter.original.message.target_kind.as_str(),
            letter.original.message.target_id.as_str(),
            letter.attempts
        ),
        (TallyRows::KIND, "bad", 2)
    );
    let reason = letter.reason.to_lowercase();
    assert!(reason.contains("check"), "{reason}");
    // Nothing else waits.
    let counts = sb.storage().counts(None).await.expect("counts");
    assert_eq!((counts.to_deliver, counts.blocked), (0, 0), "{counts:?}");
    // The stages' reports say what the table holds: 75 commands and 74 of their events
    // delivered; `bad`'s refused write retried, then dead-lettered — never counted as
    // delivered, though the stage had counted it so before its commit refused it.
    let m = sb.metrics();
    assert_eq!(m.delivered, 75 + 74, "{m:?}");
    assert_eq!(m.dead_lettered, 1, "{m:?}");
    assert!(m.retries >= 1 && m.held >= 1, "{m:?}");
}

async fn a_rebuild_writes_the_table_again(storage: Arc<dyn shardbox::core::Storage>, mut db: Db) {
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .aggregate::<Tally>()
        .sql_projection(TallyRows)
        .build()
        .await
        .expect("build");
    let ids: Vec<String> = (0..6).map(|i| format!("t-{i:02}")).collect();
    for n in 1..=5 {
        for id in &ids {
            sb.send::<Tally>(id, &TallyCommand::Record(n))
                .await
                .unwrap();
        }
    }
    sb.deliver_all().await.expect("deliver");
    // The table drifted (a bug since fixed, a hand edit): the rebuild writes it again.
    let drift = "UPDATE tally_rows SET total = 999 WHERE id = 't-00';
        DELETE FROM tally_rows WHERE id = 't-01';
        INSERT INTO tally_rows (id, events, total, seen) VALUES ('ghost', 1, 1, ',9')";
    match &mut db {
        Db::Sqlite(c) => c.batch_execute(drift),
        Db::Postgres(c) => c.batch_execute(drift),
    }
    .expect("drift");
    let node = sb.start();
    let job = sb
        .catch_up_kind(TallyRows::KIND, CatchUp::all())
        .await
        .expect("start the rebuild");
    // Live events flow during the rebuild.
    for id in &ids {
        sb.send::<Tally>(id, &TallyCommand::Add(10)).await.unwrap();
    }
    let done = job.wait(Duration::from_secs(60)).await.expect("progress");
    assert!(done.status.is_finished(), "{done:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let expected: Vec<Row> = ids
        .iter()
        .map(|id| Row {
            id: id.clone(),
            events: 6,
            total: 10,
            seen: ",1,2,3,4,5".into(),
        })
        .collect();
    loop {
        let rows = read_model(&mut db);
        if rows == expected || tokio::time::Instant::now() >= deadline {
            assert_eq!(rows, expected, "the rebuilt table is the in-order fold");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await.expect("shutdown");
}

/// Sends `Record(n)` to every tally of `ids`, in one write.
async fn record_all(sb: &Shardbox, ids: &[String], n: u64) {
    let commands: Vec<(&str, TallyCommand)> = ids
        .iter()
        .map(|id| (id.as_str(), TallyCommand::Record(n)))
        .collect();
    sb.send_many::<Tally>(&commands).await.expect("send");
}

/// Blue/green with tables, one per version (`tally_rows`, then `tally_rows_v2`): version 2
/// is built from the history while a task keeps sending commands. Every read of the table
/// `served_kind` names is complete meanwhile (every tally, its whole history in order, never
/// fewer numbers than the read of the same table before); the completion switches the model;
/// once the traffic stopped, the new table is the in-order fold of every event — none lost,
/// none applied twice across the switch. Retiring version 1 leaves its table to the
/// application.
async fn a_version_is_built_beside_the_served_table(
    storage: Arc<dyn shardbox::core::Storage>,
    mut db: Db,
) {
    const TARGETS: usize = 8;
    const HISTORY: u64 = 30;
    const MODEL: &str = TallyRows::KIND;
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .poll_interval(Duration::from_millis(50))
        .catch_up_page_size(40)
        .aggregate::<Tally>()
        .sql_projection(TallyRows)
        .sql_projection(TallyRowsV2)
        .build()
        .await
        .expect("build");
    let node = sb.start();
    let ids: Vec<String> = (0..TARGETS).map(|i| format!("t-{i:02}")).collect();
    // The row of tally `id` once it recorded 1..=upto.
    let row_of = |id: &str, upto: u64| Row {
        id: id.to_owned(),
        events: upto as i64,
        total: 0,
        seen: (1..=upto).map(|n| format!(",{n}")).collect(),
    };
    let fold = |upto: u64| -> Vec<Row> { ids.iter().map(|id| row_of(id, upto)).collect() };
    for n in 1..=HISTORY {
        record_all(&sb, &ids, n).await;
    }
    until_table(&mut db, TallyRows::KIND, &fold(HISTORY)).await;

    let (stop, last) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(HISTORY)),
    );
    let traffic = tokio::spawn({
        let (sb, ids, stop, last) = (sb.clone(), ids.clone(), stop.clone(), last.clone());
        async move {
            let mut n = HISTORY;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                record_all(&sb, &ids, n).await;
                last.store(n, Ordering::SeqCst);
                // No pause: events arrive faster than a step replays a page through the
                // Inbox (a replay that chased the store's end never finalized under it).
                tokio::task::yield_now().await;
            }
        }
    });
    let job = sb
        .build_version(MODEL, TallyRowsV2::KIND)
        .await
        .expect("build version 2");
    // A read of the served table is never partial. At the switch the new table may hold
    // fewer of the latest numbers than the old one did (its live events parked during the
    // replay are applied by the stages after it), so the least starts again at the history.
    let (mut reads, mut read_kind) = (0, TallyRows::KIND.to_owned());
    let mut least = vec![HISTORY; TARGETS];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let served = sb.served_kind(MODEL).await.expect("served");
        if served != read_kind {
            least = vec![HISTORY; TARGETS];
            read_kind.clone_from(&served);
        }
        let rows = read_version(&mut db, &served);
        assert_eq!(rows.len(), TARGETS, "a read of `{served}`: {rows:?}");
        for ((row, id), least) in rows.iter().zip(&ids).zip(least.iter_mut()) {
            let k = row.events as u64;
            assert!(
                k >= *least && *row == row_of(id, k),
                "a read of `{served}` is not complete: {row:?} (had {least})"
            );
            *least = k;
        }
        reads += 1;
        let progress = job.progress().await.expect("progress");
        if progress.status.is_finished() {
            break;
        }
        // The replay completes on a short page only: traffic that appends a page of events
        // faster than a tick replays one keeps it from ever completing (reported).
        assert!(
            tokio::time::Instant::now() < deadline,
            "the build is not done after 30 s ({} events replayed, {} at the start): {progress:?}",
            progress.replayed,
            progress.total_estimate
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let done = job.wait(Duration::from_secs(30)).await.expect("wait");
    assert_eq!(done.status, shardbox::CatchUpStatus::Completed, "{done:?}");
    assert_eq!(
        sb.served_kind(MODEL).await.expect("served"),
        TallyRowsV2::KIND
    );
    assert!(reads > 1, "the served table was read while the build ran");

    stop.store(true, Ordering::SeqCst);
    traffic.await.expect("traffic");
    let sent = last.load(Ordering::SeqCst);
    assert!(sent > HISTORY, "commands were sent during the build");
    until_table(&mut db, TallyRowsV2::KIND, &fold(sent)).await;
    until_table(&mut db, TallyRows::KIND, &fold(sent)).await;
    let recorded: Vec<i64> = match &mut db {
        Db::Sqlite(c) => tally_rows_v2::table.select(tally_rows_v2::recorded).load(c),
        Db::Postgres(c) => tally_rows_v2::table.select(tally_rows_v2::recorded).load(c),
    }
    .expect("read version 2's new column");
    assert_eq!(
        recorded,
        vec![sent as i64; TARGETS],
        "version 2's new column"
    );

    // Version 1 is retired; its table is the application's to drop.
    sb.retire_version(MODEL, TallyRows::KIND)
        .await
        .expect("retire version 1");
    let record = sb.read_model_version(MODEL).await.expect("record");
    assert_eq!(
        (record.served.as_str(), record.previous),
        (TallyRowsV2::KIND, None)
    );
    assert_eq!(
        read_model(&mut db),
        fold(sent),
        "the retired table is left as it was"
    );
    node.shutdown().await.expect("shutdown");
}

/// A node process's main for the crash test: serves the SQLite file named by
/// `SHARDBOX_SQL_PROJECTION_DB` until it is killed. Does nothing in a normal test run.
#[test]
fn sql_projection_node_entry() {
    let Ok(path) = std::env::var("SHARDBOX_SQL_PROJECTION_DB") else {
        return;
    };
    common::cluster::init_node_log();
    common::cluster::runtime().block_on(async {
        let storage = shardbox::SqliteStorage::open(&path).await.expect("open");
        let sb = Shardbox::builder()
            .storage(storage)
            .shards(4)
            .poll_interval(Duration::from_millis(20))
            // The killed node's leases run out soon, for the restarted one.
            .lease_duration(Duration::from_secs(2))
            .aggregate::<Tally>()
            .sql_projection(TallyRows)
            .build()
            .await
            .expect("build the node");
        common::cluster::serve_until_stopped(&sb, "sql-node", "").await;
    });
}

/// kill -9 of the process that writes the read model, mid-stream, then a restart: the table
/// is the in-order fold of every event, each applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kill_9_mid_stream_leaves_the_in_order_fold() {
    const TARGETS: usize = 20;
    const ROUNDS: u64 = 60;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shop.db");
    let path_text = path.to_str().expect("utf-8").to_owned();
    // The sender: the same application, no node of its own.
    let sender = Shardbox::builder()
        .storage(shardbox::SqliteStorage::open(&path).await.expect("open"))
        .shards(4)
        .aggregate::<Tally>()
        .sql_projection(TallyRows)
        .build()
        .await
        .expect("build the sender");
    let mut db = diesel::SqliteConnection::establish(&path_text).expect("raw");
    db.batch_execute(&format!("PRAGMA busy_timeout = 5000; {MIGRATION}"))
        .expect("the application's migration");
    let mut db = Db::Sqlite(db);
    let env = [("SHARDBOX_SQL_PROJECTION_DB", path_text.clone())];
    let spawn = || {
        let node =
            common::cluster::NodeProcess::spawn("sql-node", "sql_projection_node_entry", &env);
        node.ready();
        node
    };
    let ids: Vec<String> = (0..TARGETS).map(|t| format!("t-{t:02}")).collect();
    let send_round = |n: u64| {
        let sender = sender.clone();
        let ids = ids.clone();
        async move {
            let commands: Vec<(&str, TallyCommand)> = ids
                .iter()
                .map(|id| (id.as_str(), TallyCommand::Record(n)))
                .collect();
            sender.send_many::<Tally>(&commands).await.expect("send");
        }
    };
    let mut node = spawn();
    let mut n = 1;
    // Half the rounds, the node writing the read model as they come; killed once some are
    // written and more are on their way.
    while n <= ROUNDS / 2 {
        send_round(n).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let written = |db: &mut Db| read_model(db).iter().map(|r| r.events).sum::<i64>();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while written(&mut db) == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    node.kill();
    let at_kill = written(&mut db);
    assert!(at_kill > 0, "the node wrote nothing before it was killed");
    while n <= ROUNDS {
        send_round(n).await;
        n += 1;
    }
    let mut node = spawn();
    let expected: Vec<Row> = ids
        .iter()
        .map(|id| Row {
            id: id.clone(),
            events: ROUNDS as i64,
            total: 0,
            seen: (1..=ROUNDS).map(|n| format!(",{n}")).collect(),
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows = read_model(&mut db);
        if rows == expected || tokio::time::Instant::now() >= deadline {
            assert_eq!(
                rows, expected,
                "after kill -9 at {at_kill} events and a restart"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.stop(Duration::from_secs(30));
}

#[tokio::test]
async fn a_sql_projection_is_refused_on_the_memory_backend() {
    let refused = Shardbox::builder()
        .memory()
        .aggregate::<Tally>()
        .sql_projection(TallyRows)
        .build()
        .await;
    let error = match refused {
        Ok(_) => panic!("a SQL projection was built on the memory backend"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("sql_projection") && error.contains("tally-rows"),
        "{error}"
    );
}

/// One test per SQL backend for each case `case(storage, db)`: `sqlite::case` on a fresh file,
/// `postgres::case` in a fresh schema (skipped, loudly, without `SHARDBOX_PG_URL`).
macro_rules! on_sql_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (storage, db, _guard) = super::sqlite().await;
                    super::$case(storage, db).await;
                }
            )*
        }

        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some((storage, db, _guard)) =
                        super::postgres(concat!("sql_projections::", stringify!($case))).await
                    else {
                        return;
                    };
                    super::$case(storage, db).await;
                }
            )*
        }
    };
}

on_sql_backends!(
    the_table_is_the_in_order_fold,
    a_rebuild_writes_the_table_again,
    a_version_is_built_beside_the_served_table,
);

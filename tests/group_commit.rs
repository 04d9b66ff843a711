//! The group commit of concurrent sends against real databases: a write the database refuses
//! fails only its own send; the others of its group are written and delivered.
//!
//! The refusal is the database's own: a constraint the test adds to its database (SQLite
//! refuses almost nothing a send can carry, so a trigger stands in for a constraint there). To
//! make sure the refused send shares a group with others, the test holds the database's write
//! lock while a first send leads, so that the next 19 queue behind it and are written as one
//! group when the lock is let go — and checks that they were: the node's `write_groups`
//! counter grows by exactly two (the leader's group, then the 19), not by 20.

mod common;

use common::{Tally, TallyCommand};
use diesel::connection::SimpleConnection;
use diesel::Connection;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{DeliveryError, StorageError};
use std::sync::Arc;
use std::time::Duration;

/// The target every database of these tests refuses.
const REFUSED: &str = "refused-target";

/// The database under a test's storage, as a plain connection for what the test does behind
/// the storage's back.
enum Database {
    Sqlite(diesel::SqliteConnection),
    Postgres(diesel::PgConnection),
}

impl Database {
    fn execute(&mut self, sql: &str) {
        match self {
            Database::Sqlite(c) => c.batch_execute(sql),
            Database::Postgres(c) => c.batch_execute(sql),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Makes the database refuse any inbox row for [`REFUSED`].
    fn refuse_the_target(&mut self) {
        let sql = match self {
            Database::Sqlite(_) => format!(
                "CREATE TRIGGER refuse_target BEFORE INSERT ON inbox_messages \
                 WHEN NEW.target_id = '{REFUSED}' \
                 BEGIN SELECT RAISE(ABORT, 'target {REFUSED} is refused'); END;"
            ),
            Database::Postgres(_) => format!(
                "ALTER TABLE inbox_messages ADD CONSTRAINT refuse_target \
                 CHECK (target_id <> '{REFUSED}')"
            ),
        };
        self.execute(&sql);
    }

    /// Takes the database's write lock (inbox inserts wait) until [`Database::release`].
    fn hold_writes(&mut self) {
        self.execute(match self {
            Database::Sqlite(_) => "BEGIN IMMEDIATE",
            Database::Postgres(_) => "BEGIN; LOCK TABLE inbox_messages IN SHARE MODE",
        });
    }

    fn release(&mut self) {
        self.execute("COMMIT");
    }
}

/// 20 concurrent sends, one refused by the database: the 19 others return Ok and are
/// delivered; the refused one gets the database's error and leaves nothing behind.
async fn one_refused_send_fails_alone(storage: Arc<dyn Storage>, mut db: Database) {
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .aggregate::<Tally>()
        .build()
        .await
        .expect("build");
    // The schema exists once the storage is open.
    db.refuse_the_target();
    db.hold_writes();
    let send = |target: String, n: u64| {
        let sb = sb.clone();
        tokio::spawn(async move {
            sb.send::<Tally>(&target, &TallyCommand::Record(n))
                .await
                .map(|_| target)
        })
    };
    // The first send leads and waits for the lock (its group is counted when it is taken);
    // the 19 next queue behind it meanwhile.
    let groups_before = sb.metrics().write_groups;
    let first = send("good-0".into(), 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sb.metrics().write_groups == groups_before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first send leads"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut sends = vec![first];
    for i in 1..20u64 {
        let target = if i == 7 {
            REFUSED.to_owned()
        } else {
            format!("good-{i}")
        };
        sends.push(send(target, i));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    db.release();

    let mut good = Vec::new();
    for (i, send) in sends.into_iter().enumerate() {
        match send.await.expect("task") {
            Ok(target) if i != 7 => good.push(target),
            Err(DeliveryError::Storage(StorageError::Query { reason, .. })) if i == 7 => {
                assert!(
                    reason.contains("refuse"),
                    "the database's refusal: {reason}"
                )
            }
            other => panic!("send {i}: {other:?}"),
        }
    }
    assert_eq!(good.len(), 19, "every send but the refused one is written");
    assert_eq!(
        sb.metrics().write_groups - groups_before,
        2,
        "the first send alone, then the 19 that queued behind it as one group (a refused one \
         among them, written apart only by the bisection of that group)"
    );
    let counts = storage.counts(None).await.expect("counts");
    assert_eq!(counts.pending(), 19, "{counts:?}");

    assert_eq!(
        sb.deliver_all().await.expect("deliver").totals.delivered,
        19
    );
    for target in &good {
        let state = sb.aggregate_state::<Tally>(target).await.expect("state");
        assert!(state.is_some_and(|s| s.applied.len() == 1), "{target}");
    }
    assert!(sb
        .aggregate_state::<Tally>(REFUSED)
        .await
        .expect("state")
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_one_refused_send_fails_alone() {
    let (storage, dir) = common::sqlite().await;
    let path = dir.path().join("shardbox.db");
    let conn = diesel::SqliteConnection::establish(&path.to_string_lossy()).expect("open");
    let mut db = Database::Sqlite(conn);
    db.execute("PRAGMA busy_timeout = 10000");
    one_refused_send_fails_alone(storage, db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_refused_send_fails_alone() {
    let Some(url) = common::pg_url("group_commit::postgres_one_refused_send_fails_alone") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "refused_send");
    let storage = Arc::new(schema.connect(4).await);
    one_refused_send_fails_alone(storage, Database::Postgres(schema.raw())).await;
}

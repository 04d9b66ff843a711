//! A PostgreSQL outage seen from a running node: the server terminates the storage's
//! connections again and again for a while; sends fail meanwhile, and succeed again soon after
//! it stops, every time; nothing a send accepted is lost, doubled or reordered.
//!
//! ```text
//!  4 sender tasks ── send Record(n), n = 0, 1, 2 … per target ──► node (delivers) ──► Tally
//!  killer thread: 20 rounds of { pg_terminate_backend(our backends) every 100 ms for 3 s }
//!  after each round: every sender's sends succeed again within 2 s
//!  at the end: each target applied every n whose send returned Ok, in order, once
//! ```
//!
//! Needs `SHARDBOX_PG_URL`. The storage's connections carry an `application_name` of their
//! own (the test schema's name), so only they are terminated.

mod common;

use common::{PgSchema, Tally, TallyCommand};
use diesel::{Connection, PgConnection};
use shardbox::prelude::*;
use shardbox::storage::PostgresStorage;
use shardbox::DeliveryError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROUNDS: usize = 20;
const OUTAGE: Duration = Duration::from_secs(3);
const KILL_EVERY: Duration = Duration::from_millis(100);
/// How soon after an outage sends must succeed again.
const RECOVERY_BOUND: Duration = Duration::from_secs(2);
/// How long a round waits for recovery before it gives up on it (to measure, not to pass).
const RECOVERY_GIVE_UP: Duration = Duration::from_secs(6);
const SENDERS: usize = 4;
/// The pause between two sends of one task.
const SEND_GAP: Duration = Duration::from_millis(20);

/// Terminates every backend named `application_name`.
fn terminate(admin: &mut PgConnection, application_name: &str) {
    if let Err(e) = shardbox_storage::test_schema::terminate_backends(admin, application_name) {
        eprintln!("could not terminate backends: {e}");
    }
}

/// One send as its task saw it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    n: u64,
    ok: bool,
    done: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sends_recover_within_two_seconds_of_every_outage_and_lose_nothing() {
    let Some(url) = common::pg_url("sends_recover_within_two_seconds_of_every_outage") else {
        return;
    };
    let schema = PgSchema::new(&url, "outage");
    let tagged = format!("{url}?application_name={}", schema.name);
    let storage = PostgresStorage::connect_with(tagged, schema.options(4))
        .await
        .expect("connect");
    let shardbox = Arc::new(
        Shardbox::builder()
            .storage(storage)
            .shards(4)
            .lease_duration(Duration::from_secs(2))
            .poll_interval(Duration::from_millis(100))
            .aggregate::<Tally>()
            .build()
            .await
            .expect("build"),
    );
    let node = shardbox.start();

    let stop = Arc::new(AtomicBool::new(false));
    let logs: Vec<Arc<Mutex<Vec<Sent>>>> = (0..SENDERS).map(|_| Arc::default()).collect();
    let senders: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(task, log)| {
            let (shardbox, stop, log) = (shardbox.clone(), stop.clone(), log.clone());
            tokio::spawn(async move {
                let target = format!("t{task}");
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let sent = shardbox
                        .send::<Tally>(&target, &TallyCommand::Record(n))
                        .await;
                    let done = Instant::now();
                    if let Err(e) = &sent {
                        // A failed send says so with a typed error, never a panic or a hang.
                        assert!(
                            matches!(e, DeliveryError::Storage(_)),
                            "a send failed with {e:?}"
                        );
                    }
                    log.lock().expect("log").push(Sent {
                        n,
                        ok: sent.is_ok(),
                        done,
                    });
                    n += 1;
                    tokio::time::sleep(SEND_GAP).await;
                }
            })
        })
        .collect();

    let mut admin = PgConnection::establish(&url).expect("admin connection");
    let mut recoveries = Vec::new();
    // When every sender had a send succeed after the round's end.
    let mut firsts = Vec::new();
    for _round in 0..ROUNDS {
        let (name, admin_conn) = (schema.name.clone(), admin);
        let (back, ended) = tokio::task::spawn_blocking(move || {
            let mut admin = admin_conn;
            let start = Instant::now();
            while start.elapsed() < OUTAGE {
                terminate(&mut admin, &name);
                std::thread::sleep(KILL_EVERY);
            }
            (admin, Instant::now())
        })
        .await
        .expect("killer");
        admin = back;
        // Recovered when every sender has completed a send after the outage and none failed
        // since the time measured.
        let recovered = loop {
            let last_failure = logs
                .iter()
                .filter_map(|log| {
                    let log = log.lock().expect("log");
                    log.iter()
                        .rev()
                        .take_while(|s| s.done > ended)
                        .find(|s| !s.ok)
                        .map(|s| s.done)
                })
                .max();
            let all_ok_since = logs.iter().all(|log| {
                let log = log.lock().expect("log");
                log.last().is_some_and(|s| s.ok && s.done > ended)
            });
            if all_ok_since {
                let first_ok = logs
                    .iter()
                    .filter_map(|log| {
                        let log = log.lock().expect("log");
                        log.iter()
                            .find(|s| s.ok && s.done > ended)
                            .map(|s| s.done - ended)
                    })
                    .max()
                    .unwrap_or_default();
                firsts.push(first_ok);
                break Some(last_failure.map_or(Duration::ZERO, |f| f - ended));
            }
            if ended.elapsed() > RECOVERY_GIVE_UP {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        recoveries.push(recovered);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for sender in senders {
        sender.await.expect("sender");
    }

    let shown: Vec<String> = recoveries
        .iter()
        .map(|r| r.map_or_else(|| format!(">{RECOVERY_GIVE_UP:?}"), |d| format!("{d:.2?}")))
        .collect();
    eprintln!("recovery after each outage (last failed send after its end): {shown:?}");
    eprintln!("every sender succeeding again after: {firsts:.2?}");
    let failed: usize = logs
        .iter()
        .map(|l| l.lock().expect("log").iter().filter(|s| !s.ok).count())
        .sum();
    let total: usize = logs.iter().map(|l| l.lock().expect("log").len()).sum();
    eprintln!("{failed} of {total} sends failed");
    assert!(
        recoveries
            .iter()
            .all(|r| r.is_some_and(|d| d <= RECOVERY_BOUND)),
        "sends must succeed again within {RECOVERY_BOUND:?} of every outage: {shown:?}"
    );

    // Every accepted send is delivered once, in order; a failed one at most once (its write
    // may have committed before the connection went).
    for (task, log) in logs.iter().enumerate() {
        let log = log.lock().expect("log").clone();
        let ok: Vec<u64> = log.iter().filter(|s| s.ok).map(|s| s.n).collect();
        let target = format!("t{task}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let applied = loop {
            let applied = shardbox
                .aggregate_state::<Tally>(&target)
                .await
                .expect("state")
                .unwrap_or_default()
                .applied;
            let delivered_all = ok.iter().all(|n| applied.contains(n));
            if delivered_all || Instant::now() > deadline {
                break applied;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let missing: Vec<u64> = ok
            .iter()
            .copied()
            .filter(|n| !applied.contains(n))
            .collect();
        assert!(
            missing.is_empty(),
            "{target}: accepted but never delivered: {missing:?}"
        );
        assert!(
            applied.windows(2).all(|w| w[0] < w[1]),
            "{target}: delivered out of order or twice: {applied:?}"
        );
        let sent: std::collections::BTreeSet<u64> = log.iter().map(|s| s.n).collect();
        assert!(
            applied.iter().all(|n| sent.contains(n)),
            "{target}: delivered what was never sent"
        );
    }
    node.shutdown().await.expect("shutdown");
}

/// Regression (issue 37, defect 11): a send whose connection dies while its write is on the
/// way used to fail with "unavailable", though such a write may have committed; a caller that
/// sent again with fresh ids could double it. Now the write is classified as of unknown
/// outcome and the send path writes it again itself with the same signal id: here the
/// send's insert waits on a lock another session holds, its backend is terminated while it
/// waits, the lock is let go, and the send succeeds with its message in the Inbox once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_connection_dies_mid_write_is_written_again_once() {
    use diesel::connection::SimpleConnection;
    use diesel::RunQueryDsl;
    let Some(url) = common::pg_url("a_send_whose_connection_dies_mid_write") else {
        return;
    };
    let schema = PgSchema::new(&url, "lost_write");
    let tagged = format!("{url}?application_name={}", schema.name);
    let storage = Arc::new(
        PostgresStorage::connect_with(tagged, schema.options(2))
            .await
            .expect("connect"),
    );
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .aggregate::<Tally>()
        .build()
        .await
        .expect("build");

    // Another session (not named like the storage's) holds the shard count's row: every
    // addressed insert waits on it.
    let mut locker = schema.raw();
    locker
        .batch_execute(
            "BEGIN; SELECT value FROM shardbox_settings WHERE name = 'shard_count' FOR UPDATE",
        )
        .expect("lock the shard count");
    let send = {
        let sb = sb.clone();
        tokio::spawn(async move {
            sb.send_with::<Tally>(
                "t-1",
                &TallyCommand::Add(1),
                SendOptions::default().signal_id("lost-1"),
            )
            .await
        })
    };

    #[derive(diesel::QueryableByName)]
    struct Killed {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut admin = PgConnection::establish(&url).expect("admin connection");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // The send's backend, waiting on the lock: terminated while it waits.
        let killed: Killed = diesel::sql_query(
            "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity \
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind::<diesel::sql_types::Text, _>(&schema.name)
        .get_result(&mut admin)
        .expect("terminate");
        if killed.n > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the send never waited on the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    locker.batch_execute("ROLLBACK").expect("let the lock go");

    let receipt = tokio::time::timeout(Duration::from_secs(20), send)
        .await
        .expect("the send ends")
        .expect("task")
        .expect("written again after its connection was lost");
    assert_eq!(receipt.signal_id.0, "lost-1");
    let rows: Vec<_> = storage
        .rows()
        .await
        .expect("rows")
        .into_iter()
        .filter(|r| r.message.signal_id.0 == "lost-1")
        .collect();
    assert_eq!(rows.len(), 1, "the message is in the Inbox once");
}

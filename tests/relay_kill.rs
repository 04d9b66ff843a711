//! The outbox relay killed mid-batch: 3,000 rows in a source database's outbox (SQLite file)
//! for a target database (another file); a relay *process* copies them in batches of 50 and is
//! killed with SIGKILL part-way; two relay processes then run at once until the outbox is
//! drained.
//!
//! Checks: every row reaches the target's Inbox, once, in the outbox's id order; the two
//! relays that finish the work report no duplicate (a row copied twice would come back as
//! one: the target's recorded position, moved by compare-and-set with each copy, is what
//! keeps them from copying a row again, not the Inbox's deduplication); the outbox ends empty.
//!
//! The relays are this test binary run again with `SHARDBOX_RELAY_SOURCE` set, which makes
//! `relay_process_entry` relay until its stdin closes (in a normal run it returns at once).

mod common;

use common::cluster::{field, NodeProcess};
use shardbox::conformance::fixtures::{command, pick, secs, stage};
use shardbox::core::storage::OutboxWrite;
use shardbox::core::{InboxStore, OutboxStore, Relay, WorkRegistry};
use shardbox::storage::SqliteStorage;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROWS: usize = 3_000;
const PER_STAGE: usize = 100;
const BATCH: usize = 50;
const ENTRY: &str = "relay_process_entry";

/// A relay process's main: relays from the source file (database 0) to the target file
/// (database 1), one batch every 20 ms, printing each step, until stdin closes.
#[test]
fn relay_process_entry() {
    let Ok(source) = std::env::var("SHARDBOX_RELAY_SOURCE") else {
        return;
    };
    let target = std::env::var("SHARDBOX_RELAY_TARGET").expect("SHARDBOX_RELAY_TARGET");
    common::cluster::runtime().block_on(async {
        let source = Arc::new(SqliteStorage::open(source).await.expect("source"));
        let target = Arc::new(SqliteStorage::open(target).await.expect("target"));
        let relay = Relay::new(source, 0, target, 1, BATCH);
        let running = Arc::new(AtomicBool::new(true));
        let stop = running.clone();
        std::thread::spawn(move || {
            common::cluster::wait_for_stop_signal();
            stop.store(false, Ordering::SeqCst);
        });
        println!("SBX-READY relay");
        while running.load(Ordering::SeqCst) {
            match relay.step().await {
                Ok(step) => println!(
                    "SBX-STEP copied={} duplicates={} raced={} position={}",
                    step.copied, step.duplicates, step.raced, step.position
                ),
                Err(error) => println!("SBX-ERROR {error}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!("SBX-STOPPED relay");
    });
}

#[test]
fn a_relay_killed_mid_batch_loses_and_doubles_nothing() {
    common::cluster::runtime().block_on(relay_kill());
}

async fn relay_kill() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let source_path = dir.path().join("source.db");
    let target_path = dir.path().join("target.db");
    let source = SqliteStorage::open(&source_path).await.expect("source");
    let target = SqliteStorage::open(&target_path).await.expect("target");

    // The source's stages write ROWS rows into its outbox for database 1.
    let lease = pick(&source, 0, "node-a", secs(0)).await;
    let signals: Vec<String> = (0..ROWS).map(|n| format!("s{n:05}")).collect();
    for (i, chunk) in signals.chunks(PER_STAGE).enumerate() {
        let mut commit = stage(&lease, secs(i as i64), vec![]);
        commit.outbox = chunk
            .iter()
            .enumerate()
            .map(|(j, signal)| OutboxWrite {
                database: 1,
                write: command((j % 8) as u32, &format!("t{}", j % 40), signal),
            })
            .collect();
        source
            .commit_stage(commit)
            .await
            .expect("a stage with outbox rows");
    }
    source.release(&lease).await.expect("release");
    let last_id = source
        .outbox_page(1, 0, ROWS + 1)
        .await
        .expect("the outbox")
        .last()
        .expect("rows")
        .id;

    let env = [
        ("SHARDBOX_RELAY_SOURCE", source_path.display().to_string()),
        ("SHARDBOX_RELAY_TARGET", target_path.display().to_string()),
    ];
    let mut first = NodeProcess::spawn("relay-1", ENTRY, &env);
    first.ready();
    let deadline = Instant::now() + Duration::from_secs(60);
    let killed_at = loop {
        let position = target.relay_position(0).await.expect("position");
        if position > last_id / 10 {
            first.kill();
            break target.relay_position(0).await.expect("position");
        }
        assert!(
            Instant::now() < deadline,
            "the first relay made no progress"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert!(
        killed_at < last_id,
        "the relay finished ({killed_at} of {last_id}) before it was killed"
    );

    let mut relays: Vec<NodeProcess> = (2..=3)
        .map(|n| NodeProcess::spawn(&format!("relay-{n}"), ENTRY, &env))
        .collect();
    for r in &relays {
        r.ready();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while target.relay_position(0).await.expect("position") < last_id {
        assert!(
            Instant::now() < deadline,
            "the relays did not drain the outbox"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut copied, mut duplicates, mut raced) = (0, 0, 0);
    for r in &mut relays {
        r.tell("stop");
        let lines = r
            .lines_until("SBX-STOPPED", Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{} did not stop", r.name));
        for line in lines.iter().filter(|l| l.starts_with("SBX-STEP")) {
            copied += field(line, "copied");
            duplicates += field(line, "duplicates");
            raced += u64::from(line.contains("raced=true"));
        }
        assert!(r.stop(Duration::from_secs(30)).is_some_and(|s| s.success()));
    }

    let rows = target.rows().await.expect("the target's Inbox");
    let got: Vec<&str> = rows
        .iter()
        .map(|r| r.message.signal_id.0.as_str())
        .collect();
    let want: Vec<&str> = signals.iter().map(String::as_str).collect();
    assert_eq!(got, want, "every row once, in the outbox's order");
    assert_eq!(duplicates, 0, "a row copied twice");
    assert!(
        source
            .outbox_page(1, 0, 10)
            .await
            .expect("outbox")
            .is_empty(),
        "the outbox is trimmed"
    );
    eprintln!(
        "relay_kill: killed at position {killed_at} of {last_id}; then two relays copied \
         {copied} rows ({raced} steps lost the race to the other), 0 duplicates"
    );
    assert!(copied > 0 && (copied as usize) < ROWS, "copied {copied}");
}

//! A clean shutdown leaves no large SQLite write-ahead log behind: a node that delivered
//! thousands of messages (the WAL grows to megabytes; the background checkpoints copy it into
//! the database file but never shrink it) truncates it as it stops, while the storage is
//! still open.

mod common;

use common::{Tally, TallyCommand};
use shardbox::prelude::*;
use shardbox::storage::SqliteStorage;
use std::path::Path;
use std::time::Duration;

fn wal_bytes(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_truncates_the_wal() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("shardbox_storage=debug,shardbox_core=info")
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shardbox.db");
    let storage = SqliteStorage::open(&path).await.expect("open");
    let sb = Shardbox::builder()
        .storage(storage)
        .shards(8)
        .aggregate::<Tally>()
        .build()
        .await
        .expect("build");
    let node = sb.start();
    let ids: Vec<String> = (0..400).map(|i| format!("t-{i}")).collect();
    for round in 0..10u64 {
        let commands: Vec<(&str, TallyCommand)> = ids
            .iter()
            .map(|id| (id.as_str(), TallyCommand::Record(round)))
            .collect();
        sb.send_many::<Tally>(&commands).await.expect("send");
    }
    assert!(
        node.drain(Duration::from_secs(120)).await.expect("drain"),
        "every message delivered"
    );
    let before = wal_bytes(&path);
    assert!(
        before > 1 << 20,
        "the WAL grew past 1 MiB while the node ran: {before} bytes"
    );

    node.shutdown().await.expect("shutdown");
    let after = wal_bytes(&path);
    assert!(
        after < 64 << 10,
        "the WAL is (near) empty after the shutdown: {after} bytes (was {before})"
    );
    // The truncated log's pages are in the database file: every state is there.
    for id in [&ids[0], &ids[399]] {
        let tally: Tally = sb
            .state_of(Tally::KIND, "", id)
            .await
            .expect("read")
            .expect("state");
        assert_eq!(tally.applied, (0..10).collect::<Vec<u64>>());
    }
}

//! SQLite's writes run on one connection of their own (its page cache stays warm between
//! writes), whatever pooled connection the unit of work that writes holds. A binary of its own:
//! diesel's instrumentation, which tells the connections apart here, is process-wide.
#![cfg(feature = "sqlite")]

use diesel::connection::{Instrumentation, InstrumentationEvent};
use shardbox_conformance::fixtures::{command, messages};
use shardbox_core::sync::lock;
use shardbox_core::InboxStore;
use shardbox_storage::{SqliteOptions, SqliteStorage};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The connections (numbered as they were made) that began a write transaction.
static WRITERS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());
static MADE: AtomicUsize = AtomicUsize::new(0);

fn numbered() -> Option<Box<dyn Instrumentation>> {
    let connection = MADE.fetch_add(1, Ordering::SeqCst);
    Some(Box::new(move |event: InstrumentationEvent<'_>| {
        if let InstrumentationEvent::StartQuery { query, .. } = event {
            if query.to_string().starts_with("BEGIN IMMEDIATE") {
                lock(&WRITERS).insert(connection);
            }
        }
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_one_writer_connection() {
    diesel::connection::set_default_instrumentation(numbered).expect("instrumentation");
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = SqliteStorage::open_with(
        dir.path().join("shardbox.db"),
        SqliteOptions::default().pool_size(4),
    )
    .await
    .expect("open");
    let storage = std::sync::Arc::new(storage);
    // The migrations' transaction, on the connection that opened the file, is not counted.
    lock(&WRITERS).clear();
    let writes = (0..16).map(|i| {
        let storage = storage.clone();
        tokio::spawn(async move {
            storage
                .write(messages(vec![command(
                    i % 4,
                    &format!("t{i}"),
                    &format!("s{i}"),
                )]))
                .await
        })
    });
    for write in writes.collect::<Vec<_>>() {
        write.await.expect("task").expect("write");
    }
    let writers = lock(&WRITERS).clone();
    assert_eq!(writers.len(), 1, "write transactions ran on {writers:?}");
}

//! The statements a page costs on PostgreSQL: a batch of sends and a stage's commit write each
//! kind of row with one statement whatever the number of rows; a stage that only delivers
//! commits with one statement in all. Both are kept prepared by diesel: the stage's statement
//! marks its delivered rows through the schema's `shardbox_mark_delivered` function, whose
//! update PostgreSQL plans at each call, so the statement itself needs no new plan.
//!
//! A test binary of its own: the statements are captured by diesel's process-wide
//! instrumentation, which other tests running alongside would add to.
//!
//! Needs `SHARDBOX_PG_URL`.
#![cfg(feature = "postgres")]

mod common;

use common::{capture_statements, pg_url, taken, Schema, CACHED, ISSUED};
use shardbox_conformance::fixtures::{self, command, event, t0};
use shardbox_core::storage::WriteBatch;
use shardbox_core::InboxStore;

/// How many of `statements` contain `needle`.
fn count(statements: &[String], needle: &str) -> usize {
    statements.iter().filter(|s| s.contains(needle)).count()
}

#[tokio::test]
async fn a_page_writes_each_kind_of_row_in_one_statement() {
    let Some(url) = pg_url("a_page_writes_each_kind_of_row_in_one_statement") else {
        return;
    };
    capture_statements();
    let schema = Schema::new(&url, "pg_statements");
    // One connection, so that round two runs on the connection round one prepared.
    let storage = schema.connect(1).await;
    taken(&ISSUED);
    taken(&CACHED);

    let mut lease = fixtures::pick(&storage, 0, "node-a", t0()).await;
    taken(&ISSUED);
    taken(&CACHED);
    // Twice, so that the second round shows the statements kept (not prepared again).
    for round in 0..2 {
        let signal = |i: usize| format!("r{round}-s{i}");
        let batch: Vec<_> = (0..5)
            .map(|i| command(0, &format!("t{i}"), &signal(i)))
            .collect();
        storage
            .write(fixtures::messages(batch))
            .await
            .expect("write five");
        let page = storage
            .read_page(shardbox_core::ShardIndex(0), t0(), 10)
            .await
            .expect("read");
        assert_eq!(page.messages.len(), 5);
        let mut commit = fixtures::delivering(&lease, t0(), &page.messages);
        commit.states = (0..5)
            .map(|i| fixtures::state(fixtures::key(&format!("t{i}")), Some("{}")))
            .collect();
        commit.writes = WriteBatch {
            events: (0..5)
                .map(|i| event(&format!("r{round}-e{i}"), "booked", t0()))
                .collect(),
            messages: Vec::new(),
        };
        let mut issued = taken(&ISSUED);
        lease = storage.commit_stage(commit).await.expect("commit").lease;
        // A stage that only delivers, stores states and appends events is one statement, a
        // transaction of its own: one round trip, no BEGIN and COMMIT.
        // (The notifier's connection, which tells other nodes about writes, is not the stage's.)
        let commit_issued = taken(&ISSUED);
        let stage_statements: Vec<_> = commit_issued
            .iter()
            .filter(|s| !s.contains("pg_notify") && !s.contains("synchronous_commit"))
            .collect();
        assert_eq!(
            stage_statements.len(),
            1,
            "the stage commit in one statement (round {round}): {stage_statements:#?}"
        );
        issued.extend(commit_issued);
        let cached = taken(&CACHED);
        for (needle, what) in [
            ("INSERT INTO inbox_messages", "the five sends"),
            ("shardbox_mark_delivered(", "the delivered rows"),
            ("INSERT INTO entity_states", "the states"),
            ("INSERT INTO events", "the events"),
        ] {
            assert_eq!(
                count(&issued, needle),
                1,
                "{what} in one statement (round {round}): {issued:#?}"
            );
            if round == 0 {
                assert_eq!(count(&cached, needle), 1, "{what} prepared: {cached:#?}");
            } else {
                assert_eq!(count(&cached, needle), 0, "{what} kept: {cached:#?}");
            }
        }
    }
    // Every row is there, each state at version 2 (two rounds).
    let states = shardbox_core::storage::EntityStore::load_states(&storage, &[fixtures::key("t3")])
        .await
        .expect("states");
    assert_eq!(states[0].version, 2);
    assert_eq!(
        shardbox_core::EventStore::last_event_seq(&storage)
            .await
            .expect("events"),
        10
    );
}

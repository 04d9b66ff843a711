//! The hostile client: many tasks, many shards, many targets, duplicates — while the local
//! runner delivers. Checks: every message handled, per-target order kept, each target's state
//! equals the fold of its unique messages (no double apply), the Inbox empty at the end apart
//! from rows kept for deduplication.

mod common;

use common::{Tally, TallyCommand, TallyView};
use shardbox::core::Storage;
use shardbox::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const TASKS: usize = 8;
const TARGETS: usize = 1_000;
const SHARDS: u32 = 16;
const PER_TASK: usize = 1_250;

async fn hostile_client(storage: Arc<dyn Storage>) {
    let shardbox = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(SHARDS)
        .workers(4)
        .poll_interval(Duration::from_millis(50))
        // Every re-send must fall inside the deduplication window, however slow the machine:
        // with the default 60 s, a run slowed down by other work on the same cores re-sent
        // messages after their original's window had passed, which then (rightly) counted as
        // new messages.
        .dedup_window(Duration::from_secs(3600))
        .aggregate::<Tally>()
        .projection::<TallyView>()
        .build()
        .await
        .expect("build");
    let node = shardbox.start();

    // Each task owns the targets t with t % TASKS == task and numbers its commands to each
    // target in send order, so handling order must equal numbering order. 10% of the
    // commands are sent a second time, later, with the same signal id.
    let mut senders = Vec::new();
    for task in 0..TASKS {
        let sb = shardbox.clone();
        senders.push(tokio::spawn(async move {
            let owned: Vec<usize> = (0..TARGETS).filter(|t| t % TASKS == task).collect();
            let mut next: HashMap<usize, u64> = HashMap::new();
            let mut resend = Vec::new();
            let mut rng = (task as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for i in 0..PER_TASK {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let target = owned[(rng as usize) % owned.len()];
                let n = next.entry(target).or_insert(0);
                let signal = format!("t{task}-m{i}");
                let id = format!("tally-{target}");
                let opts = SendOptions::default().signal_id(signal.as_str());
                let receipt = sb
                    .send_with::<Tally>(&id, &TallyCommand::Record(*n), opts.clone())
                    .await
                    .expect("send");
                assert_eq!(receipt.report.written, 1, "first send is written");
                if rng % 10 == 0 {
                    resend.push((id, *n, opts));
                }
                *n += 1;
                if i % 100 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            let mut duplicates = 0;
            for (id, n, opts) in resend {
                let r = sb
                    .send_with::<Tally>(&id, &TallyCommand::Record(n), opts)
                    .await
                    .expect("resend");
                duplicates += r.report.duplicates;
            }
            (next, duplicates)
        }));
    }
    let mut expected: HashMap<usize, u64> = HashMap::new();
    let mut duplicates = 0;
    for s in senders {
        let (next, d) = s.await.expect("sender task");
        expected.extend(next);
        duplicates += d;
    }
    assert!(duplicates > 0, "the hostile client re-sent some messages");

    assert!(
        node.drain(Duration::from_secs(120)).await.expect("drain"),
        "the Inbox drained"
    );
    node.shutdown().await.expect("shutdown");

    let mut handled = 0u64;
    for t in 0..TARGETS {
        let id = format!("tally-{t}");
        let count = expected.get(&t).copied().unwrap_or(0);
        let state = shardbox
            .aggregate_state::<Tally>(&id)
            .await
            .expect("state")
            .unwrap_or_default();
        let want: Vec<u64> = (0..count).collect();
        assert_eq!(
            state.applied, want,
            "target {id}: every message once, in order"
        );
        handled += count;
        let view = shardbox
            .projection_state::<TallyView>(&id)
            .await
            .expect("view")
            .unwrap_or_default();
        assert_eq!(view.events, count, "projection of {id} saw each event once");
    }
    assert_eq!(handled, (TASKS * PER_TASK) as u64);

    let m = shardbox.metrics();
    assert_eq!(
        m.delivered,
        2 * handled,
        "commands and projection copies: {m:?}"
    );
    assert_eq!(m.write_duplicates, duplicates as u64, "{m:?}");
    assert_eq!(m.written, 2 * handled, "{m:?}");
    assert_eq!(
        (m.retries, m.dead_lettered, m.lease_losses),
        (0, 0, 0),
        "{m:?}"
    );

    let counts = storage.counts(None).await.expect("counts");
    assert_eq!(counts.pending(), 0, "nothing left to deliver: {counts:?}");
    // Commands and their events' projection copies are kept as delivered rows for the window.
    assert_eq!(counts.delivered, 2 * handled, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_hostile_client() {
    hostile_client(common::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_hostile_client() {
    let (storage, _dir) = common::sqlite().await;
    hostile_client(storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_hostile_client() {
    let Some(url) = common::pg_url("postgres_hostile_client") else {
        return;
    };
    let schema = common::PgSchema::new(&url, "hostile");
    hostile_client(std::sync::Arc::new(schema.connect(8).await)).await;
}

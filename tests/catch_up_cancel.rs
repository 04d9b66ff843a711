//! Cancelling a catch-up under live traffic, on memory, SQLite and PostgreSQL: the replay
//! stops, the parked live events are delivered, every live event exactly once and in order,
//! the job ends `cancelled`, and a new catch-up of the same targets may start and repairs the
//! partial rebuild.

mod common;

use serde::{Deserialize, Serialize};
use shardbox::core::storage::CatchUpStatus;
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{CatchUp, EventSource, Message, Projection, Shardbox, StorageError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Booking number `n` of an account.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Booked {
    n: u64,
}

impl Message for Booked {
    const TYPE: &'static str = "catch-up-cancel-test.booked";
}

/// Every booking number applied, in the order applied.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Seen(Vec<u64>);

impl Projection for Seen {
    const KIND: &'static str = "seen";
    type Event = Booked;

    async fn apply(&mut self, e: &Booked, _: &Context<'_>) -> Result<(), HandlerError> {
        self.0.push(e.n);
        Ok(())
    }
}

fn account(i: usize) -> String {
    format!("acc-{i:03}")
}

/// Bookings posted per account so far.
type Posted = BTreeMap<String, u64>;

async fn post(sb: &Shardbox, posted: &mut Posted, id: &str) {
    let n = posted.entry(id.to_owned()).or_default();
    sb.post(EventSource::external(id), &Booked { n: *n })
        .await
        .expect("post");
    *n += 1;
}

async fn cancel_under_traffic(storage: Arc<dyn Storage>) {
    let (accounts, history) = (60usize, 6_000usize);
    let sb = Shardbox::builder()
        .shared_storage(storage)
        .shards(8)
        .catch_up_page_size(10)
        .poll_interval(Duration::from_millis(50))
        .projection::<Seen>()
        .build()
        .await
        .expect("build");
    let mut posted = Posted::new();
    for start in (0..history).step_by(500) {
        let mut batch = Vec::new();
        for i in start..(start + 500).min(history) {
            let id = account(i % accounts);
            let n = posted.entry(id.clone()).or_default();
            batch.push((EventSource::external(&id), Booked { n: *n }));
            *n += 1;
        }
        sb.post_many(&batch).await.expect("post many");
    }
    let node = sb.start();
    assert!(node.drain(Duration::from_secs(300)).await.unwrap());
    let before = posted.clone();

    let job = sb.catch_up::<Seen>(CatchUp::all()).await.expect("start");
    // 4 tasks post live events all along: before, during and after the cancel.
    let posted = Arc::new(tokio::sync::Mutex::new(posted));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut posters = Vec::new();
    for t in 0..4 {
        let (sb, posted, stop) = (sb.clone(), posted.clone(), stop.clone());
        posters.push(tokio::spawn(async move {
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || k < 50 {
                let id = account((t + 4 * k) % accounts);
                post(&sb, &mut *posted.lock().await, &id).await;
                k += 1;
            }
        }));
    }
    // Cancel once the replay has taken a step, long before it can be done.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while job.progress().await.unwrap().replayed == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the replay starts");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let asked = job.cancel().await.expect("cancel");
    assert!(asked.cancel_requested, "{asked:?}");
    assert!(
        asked.status.is_running(),
        "a request, carried out by a step"
    );
    let done = job.wait(Duration::from_secs(120)).await.unwrap();
    assert_eq!(done.status, CatchUpStatus::Cancelled, "{done:?}");
    assert!(
        done.replayed < history as i64,
        "the replay stopped early: {done:?}"
    );
    assert!(done.eta.is_none() && done.cancel_requested);
    // A second cancel is refused in the library's words.
    match job.cancel().await {
        Err(DeliveryError::Storage(StorageError::CatchUpNotRunning { job: id, status })) => {
            assert_eq!((id, status.as_str()), (job.id(), "cancelled"));
        }
        other => panic!("expected CatchUpNotRunning, got {other:?}"),
    }

    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for p in posters {
        p.await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while sb.storage().counts(None).await.unwrap().pending() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "everything delivered in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Per account: the history the replay reached (a prefix, in order), then every live
    // booking exactly once and in order.
    let posted = posted.lock().await.clone();
    let (mut live_total, mut partial) = (0u64, 0usize);
    for i in 0..accounts {
        let id = account(i);
        let seen = sb
            .projection_state::<Seen>(&id)
            .await
            .unwrap()
            .unwrap_or_default()
            .0;
        let old = before[&id];
        let replayed: Vec<u64> = seen.iter().copied().filter(|n| *n < old).collect();
        let live: Vec<u64> = seen.iter().copied().filter(|n| *n >= old).collect();
        assert_eq!(
            replayed,
            (0..replayed.len() as u64).collect::<Vec<_>>(),
            "{id}: the replayed history is a prefix, in order"
        );
        assert_eq!(
            &seen[..replayed.len()],
            replayed.as_slice(),
            "{id}: history before live"
        );
        assert_eq!(
            live,
            (old..posted[&id]).collect::<Vec<_>>(),
            "{id}: every live booking once, in order"
        );
        live_total += posted[&id] - old;
        partial += usize::from((replayed.len() as u64) < old);
    }
    assert!(live_total >= 200, "live traffic ran: {live_total}");
    assert!(partial > 0, "the cancel left a partial rebuild");

    // The cancelled job no longer blocks: a new catch-up of all repairs every account.
    let again = sb.catch_up::<Seen>(CatchUp::all()).await.expect("restart");
    let finished = again.wait(Duration::from_secs(300)).await.unwrap();
    assert_eq!(finished.status, CatchUpStatus::Completed, "{finished:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while sb.storage().counts(None).await.unwrap().pending() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "settled in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..accounts {
        let id = account(i);
        let seen = sb.projection_state::<Seen>(&id).await.unwrap().unwrap();
        assert_eq!(seen.0, (0..posted[&id]).collect::<Vec<_>>(), "{id} rebuilt");
    }
    node.shutdown().await.unwrap();
}

mod memory {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cancel_under_traffic() {
        super::cancel_under_traffic(super::common::memory()).await;
    }
}

mod sqlite {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cancel_under_traffic() {
        let (storage, _dir) = super::common::sqlite().await;
        super::cancel_under_traffic(storage).await;
    }
}

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cancel_under_traffic() {
        let Some(url) = super::common::pg_url("catch_up_cancel::cancel_under_traffic") else {
            return;
        };
        let schema = super::common::PgSchema::new(&url, "cancel_under_traffic");
        super::cancel_under_traffic(std::sync::Arc::new(schema.connect(8).await)).await;
    }
}

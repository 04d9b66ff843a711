//! Blue/green rebuilds, on memory, SQLite and PostgreSQL: a new version of a read model (a
//! projection kind of its own) is built from the history beside the served one while traffic
//! flows; every read of the served version meanwhile is complete (never empty, never partial);
//! the job's completion switches the model, and the new version then equals the in-order fold
//! of every event — none lost, none applied twice across the switch. A cancelled build leaves
//! the served version as it was; a retired version's states are gone.

mod common;

use common::{Tally, TallyCommand, TallyEvent, TallyView};
use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{CatchUpStatus, StorageError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TARGETS: usize = 8;
/// Numbers each target's history holds before the build starts.
const HISTORY: u64 = 30;

/// Version 1 of the list: the numbers each tally recorded, in order.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
struct ListV1 {
    seen: Vec<u64>,
}

impl Projection for ListV1 {
    const KIND: &'static str = "bg-list";
    type Event = TallyEvent;

    async fn apply(&mut self, e: &TallyEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        if let TallyEvent::Recorded(n) = e {
            self.seen.push(*n);
        }
        Ok(())
    }
}

/// Version 2: the same numbers and their total (a new column, say).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
struct ListV2 {
    seen: Vec<u64>,
    total: u64,
}

impl Projection for ListV2 {
    const KIND: &'static str = "bg-list-v2";
    type Event = TallyEvent;

    async fn apply(&mut self, e: &TallyEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        if let TallyEvent::Recorded(n) = e {
            self.seen.push(*n);
            self.total += n;
        }
        Ok(())
    }
}

const MODEL: &str = ListV1::KIND;

async fn shardbox(storage: Arc<dyn Storage>) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(4)
        .poll_interval(Duration::from_millis(50))
        .catch_up_page_size(40)
        .aggregate::<Tally>()
        .projection::<ListV1>()
        .projection::<ListV2>()
        .projection::<TallyView>()
        .build()
        .await
        .expect("build")
}

fn target(i: usize) -> String {
    format!("bg-{i}")
}

/// Sends `Record(from..=to)` to every target, number by number.
async fn record(sb: &Shardbox, from: u64, to: u64) {
    for n in from..=to {
        for i in 0..TARGETS {
            sb.send::<Tally>(&target(i), &TallyCommand::Record(n))
                .await
                .expect("send");
        }
    }
}

/// The numbers `kind`'s state of target `i` holds (empty without a state).
async fn seen(sb: &Shardbox, kind: &str, i: usize) -> Vec<u64> {
    let id = target(i);
    if kind == ListV2::KIND {
        sb.projection_state::<ListV2>(&id)
            .await
            .expect("read")
            .map(|v| v.seen)
    } else {
        sb.projection_state::<ListV1>(&id)
            .await
            .expect("read")
            .map(|v| v.seen)
    }
    .unwrap_or_default()
}

/// Waits until `kind` holds `1..=upto` for every target.
async fn until_folded(sb: &Shardbox, kind: &str, upto: u64) {
    let want: Vec<u64> = (1..=upto).collect();
    for _ in 0..2_000 {
        let mut all = true;
        for i in 0..TARGETS {
            all &= seen(sb, kind, i).await == want;
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got: Vec<Vec<u64>> = futures_seen(sb, kind).await;
    panic!("`{kind}` is not the in-order fold of 1..={upto}: {got:?}");
}

async fn futures_seen(sb: &Shardbox, kind: &str) -> Vec<Vec<u64>> {
    let mut all = Vec::new();
    for i in 0..TARGETS {
        all.push(seen(sb, kind, i).await);
    }
    all
}

/// Sends one number after the other to every target until told to stop; counts the last
/// number sent to all.
fn traffic(
    sb: &Shardbox,
    stop: &Arc<AtomicBool>,
    last: &Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let (sb, stop, last) = (sb.clone(), stop.clone(), last.clone());
    tokio::spawn(async move {
        let mut n = HISTORY;
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            record(&sb, n, n).await;
            last.store(n, Ordering::SeqCst);
            // No pause: traffic appends events as fast as it can, faster than a step replays
            // a page (a replay that chased the store's end never finalized under it).
            tokio::task::yield_now().await;
        }
    })
}

/// The build under traffic: the served version is complete at every read, the switch comes
/// with the completion, the new version is the in-order fold of every event after it; a
/// second build of the model is refused while one runs; an old version is retired.
async fn a_version_built_under_traffic_is_switched_to_whole(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage).await;
    let node = sb.start();
    record(&sb, 1, HISTORY).await;
    until_folded(&sb, ListV1::KIND, HISTORY).await;
    assert_eq!(sb.served_kind(MODEL).await.expect("served"), ListV1::KIND);

    let (stop, last) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(HISTORY)),
    );
    let sending = traffic(&sb, &stop, &last);
    let job = sb.build_version(MODEL, ListV2::KIND).await.expect("build");
    let again = sb.build_version(MODEL, TallyView::KIND).await;
    assert!(
        matches!(
            again,
            Err(DeliveryError::Storage(StorageError::VersionRefused { .. }))
        ),
        "one build of a model at a time: {again:?}"
    );
    let building = sb.read_model_version(MODEL).await.expect("record");
    assert_eq!(building.building.as_deref(), Some(ListV2::KIND));
    assert_eq!(building.building_job, Some(job.id()));

    // Every read of the served version, while the new one is built, is complete: the whole
    // history at least, in order, never reset, never less than the read before. Reads of the
    // new version after the switch are complete too; at the switch it may hold fewer of the
    // latest numbers than the old one did (its live events parked during the replay are
    // delivered by the stages after the switch), so the count starts again at the history.
    let mut reads = 0;
    let building_since = std::time::Instant::now();
    let mut least = vec![HISTORY; TARGETS];
    let mut read_kind = ListV1::KIND.to_owned();
    loop {
        let served = sb.served_kind(MODEL).await.expect("served");
        if served != read_kind {
            least = vec![HISTORY; TARGETS];
            read_kind.clone_from(&served);
        }
        for (i, least) in least.iter_mut().enumerate() {
            let got = seen(&sb, &served, i).await;
            let k = got.len() as u64;
            assert!(
                k >= *least && got == (1..=k).collect::<Vec<_>>(),
                "a read of `{served}` for {} is not complete: {got:?} (had {least})",
                target(i)
            );
            *least = k;
        }
        reads += 1;
        let progress = job.progress().await.expect("progress");
        if progress.status.is_finished() {
            break;
        }
        assert!(
            building_since.elapsed() < Duration::from_secs(60),
            "the build did not end under traffic: {progress:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let done = job.wait(Duration::from_secs(60)).await.expect("wait");
    assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    let switched = sb.read_model_version(MODEL).await.expect("record");
    assert_eq!(
        (
            switched.served.as_str(),
            switched.previous.as_deref(),
            switched.building.as_deref()
        ),
        (ListV2::KIND, Some(ListV1::KIND), None),
        "the completion switched the model"
    );
    assert!(switched.switched_at.is_some());
    assert!(reads > 1, "the served version was read while the build ran");

    // Traffic went on across the switch: the new version holds every number once, in order.
    stop.store(true, Ordering::SeqCst);
    sending.await.expect("traffic");
    let sent = last.load(Ordering::SeqCst);
    assert!(sent > HISTORY, "numbers were sent during the build");
    until_folded(&sb, ListV2::KIND, sent).await;
    until_folded(&sb, ListV1::KIND, sent).await;
    for i in 0..TARGETS {
        let v2 = sb
            .projection_state::<ListV2>(&target(i))
            .await
            .expect("read")
            .expect("built");
        assert_eq!(v2.total, sent * (sent + 1) / 2, "v2's own column");
    }

    // The old version is retired; the served one cannot be.
    let refused = sb.retire_version(MODEL, ListV2::KIND).await;
    assert!(
        matches!(
            refused,
            Err(DeliveryError::Storage(StorageError::VersionRefused { .. }))
        ),
        "{refused:?}"
    );
    let deleted = sb
        .retire_version(MODEL, ListV1::KIND)
        .await
        .expect("retire");
    assert_eq!(deleted, TARGETS as u64);
    assert_eq!(seen(&sb, ListV1::KIND, 0).await, Vec::<u64>::new());
    assert_eq!(
        sb.read_model_version(MODEL).await.expect("record").previous,
        None
    );
    node.shutdown().await.expect("shutdown");
}

/// A build cancelled midway leaves the served version serving and untouched.
async fn a_cancelled_build_leaves_the_served_version(storage: Arc<dyn Storage>) {
    let sb = shardbox(storage).await;
    let node = sb.start();
    record(&sb, 1, HISTORY).await;
    until_folded(&sb, ListV1::KIND, HISTORY).await;
    let job = sb.build_version(MODEL, ListV2::KIND).await.expect("build");
    job.cancel().await.expect("cancel");
    let done = job.wait(Duration::from_secs(60)).await.expect("wait");
    assert_eq!(done.status, CatchUpStatus::Cancelled, "{done:?}");
    let record_after = sb.read_model_version(MODEL).await.expect("record");
    assert_eq!(
        (
            record_after.served.as_str(),
            record_after.building.as_deref(),
            record_after.previous.as_deref()
        ),
        (ListV1::KIND, None, None)
    );
    record(&sb, HISTORY + 1, HISTORY + 2).await;
    until_folded(&sb, ListV1::KIND, HISTORY + 2).await;
    // A new build may start once the cancelled one ended.
    let again = sb
        .build_version(MODEL, ListV2::KIND)
        .await
        .expect("build again");
    let done = again.wait(Duration::from_secs(60)).await.expect("wait");
    assert_eq!(done.status, CatchUpStatus::Completed, "{done:?}");
    until_folded(&sb, ListV2::KIND, HISTORY + 2).await;
    assert_eq!(sb.served_kind(MODEL).await.expect("served"), ListV2::KIND);
    node.shutdown().await.expect("shutdown");
}

common::on_every_backend!("blue_green";
    a_version_built_under_traffic_is_switched_to_whole,
    a_cancelled_build_leaves_the_served_version,
);

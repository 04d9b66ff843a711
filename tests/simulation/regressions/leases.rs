//! Leases kept by a live node with nothing scheduled to release them: after a failed release
//! of a lease kept for the linger, across a re-sharding's pause, at its announcement.

use super::super::faulty::{FaultRates, FaultyStorage, Scripted};
use super::super::model::{Audit, Ledger};
use super::super::rng::SimRng;
use super::{apply, t0};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::ManualClock;
use std::sync::Arc;
use std::time::Duration;

/// Issue 37, defect 1: a failed release of a lingering (kept) lease left the lease held with
/// nothing scheduled: no poll probes a shard leased to its own node, so a message written
/// then whose wake-up never reached the node (here every notification is dropped: a write by
/// another process) waited until the lease ran out (4 s here, 30 s by default). The failed
/// release is now retried as a failed turn is (25 ms, doubling), then the shard is served.
/// The message is written 600 ms after the failed release, so that a poll round that still
/// listed the shard as free (planned before the lease was kept) cannot serve it by chance.
pub(super) async fn failed_release_of_a_kept_lease(inner: Arc<dyn Storage>) {
    let deaf = Deaf::new(
        inner,
        Duration::from_secs(4),
        Duration::from_millis(250),
        Some(Duration::from_millis(150)),
    )
    .await;
    let (faults, sb, writer) = (&deaf.faults, &deaf.sb, &deaf.writer);
    let node = sb.start();
    let elapse = |ms| deaf.elapse(ms);
    let applied = || deaf.applied();
    // The first message is served and the drained shard's lease kept for the linger, whose
    // release then fails.
    faults.fail_next("release", Scripted::Before);
    sb.send::<Ledger>("l", &apply(1, "a")).await.expect("send");
    let mut waited = 0;
    while faults.scripted_left("release") > 0 {
        assert!(waited < 2_000, "the kept lease's release was tried");
        elapse(10).await;
        waited += 10;
    }
    assert_eq!(applied().await, vec![1]);
    // Two lease-watch rounds: the poller's list of free shards no longer holds the shard
    // (it is leased to this node), as it would not on any later round.
    for _ in 0..60 {
        elapse(10).await;
    }
    writer
        .send::<Ledger>("l", &apply(2, "a"))
        .await
        .expect("send after the failed release");
    let mut waited = 0;
    while applied().await != vec![1, 2] {
        assert!(
            waited < 1_000,
            "the message written after the failed release is delivered well before the kept \
             lease runs out (4 s): not delivered after {waited} ms"
        );
        elapse(10).await;
        waited += 10;
    }
    node.shutdown().await.expect("shutdown");
}

/// Seed 2646 of the simulation's latency invariant (issue 37): a lease kept for a retried
/// release (its release after a failed turn failed) stayed leased to its live node until it
/// ran out when a re-sharding was announced meanwhile: the retry woke the shard, and a turn
/// during the pause only released a lease kept for the linger, not one kept for a retried
/// release, and scheduled nothing. Once the pause ended no turn came (no poll probes a shard
/// leased to its own node), so a write nobody heard waited for the lease to run out, and the
/// operator waited for the lease too. A paused turn now settles that lease as well, and
/// retries it as after a failed turn while the release fails.
pub(super) async fn release_retried_across_a_reshard_pause(inner: Arc<dyn Storage>) {
    use shardbox::core::storage::{ReshardAnnouncement, WorkRegistry};
    let deaf = Deaf::new(
        inner,
        Duration::from_secs(4),
        Duration::from_millis(250),
        None,
    )
    .await;
    let (faults, clock, sb, writer) = (&deaf.faults, &deaf.clock, &deaf.sb, &deaf.writer);
    let node = sb.start();
    let elapse = |ms| deaf.elapse(ms);
    let applied = || deaf.applied();
    // The first turn's stage fails, and so does every release until the pause is over: the
    // lease is kept for a retried release.
    faults.fail_next("read_page", Scripted::Before);
    for _ in 0..1_000 {
        faults.fail_next("release", Scripted::Before);
    }
    sb.send::<Ledger>("l", &apply(1, "a")).await.expect("send");
    let operator = shardbox::NodeId("operator".into());
    let now = shardbox::Clock::now(&**clock);
    let announcement = ReshardAnnouncement {
        by: operator.clone(),
        to: 2,
        until: now + chrono::Duration::seconds(60),
    };
    faults
        .announce_reshard(&announcement, now)
        .await
        .expect("announce a re-sharding");
    for _ in 0..100 {
        elapse(10).await;
    }
    assert!(
        faults.scripted_left("release") < 1_000,
        "the kept lease's release was tried"
    );
    // The releases work again and the operator gives up.
    faults.forget_scripted("release");
    faults.withdraw_reshard(&operator).await.expect("withdraw");
    for _ in 0..60 {
        elapse(10).await;
    }
    writer
        .send::<Ledger>("l", &apply(2, "a"))
        .await
        .expect("send after the pause");
    let mut waited = 0;
    while applied().await != vec![1, 2] {
        assert!(
            waited < 1_000,
            "both messages are delivered well before the lease kept for a retried release runs \
             out (4 s after the pick-up): applied {:?} after {waited} ms",
            applied().await
        );
        elapse(10).await;
        waited += 10;
    }
    node.shutdown().await.expect("shutdown");
}

/// Seed 1406 of the simulation's latency invariant (issue 37): a lease kept for the linger,
/// whose release failed when the node heard of a re-sharding (the lease watch hands every kept
/// lease back then), stayed leased to its live node with nothing scheduled: the failed
/// release kept it for a retried release, but no retry nor turn was due to settle it. Once the
/// operator gave up and the pause ended, no poll probed the shard (leased to its own node), so
/// a write nobody heard waited until the lease ran out (1.5 s in the seed; here most of the 4 s
/// lease). The release is now retried as after a failed turn.
pub(super) async fn failed_release_of_a_kept_lease_at_a_reshard_announcement(
    inner: Arc<dyn Storage>,
) {
    use shardbox::core::storage::{ReshardAnnouncement, WorkRegistry};
    let deaf = Deaf::new(
        inner,
        Duration::from_secs(4),
        Duration::from_millis(250),
        // Longer than a lease-watch round: the announcement finds the lease kept.
        Some(Duration::from_secs(1)),
    )
    .await;
    let (faults, clock, sb, writer) = (&deaf.faults, &deaf.clock, &deaf.sb, &deaf.writer);
    let node = sb.start();
    let elapse = |ms| deaf.elapse(ms);
    let applied = || deaf.applied();
    // The first message is served and the drained shard's lease kept for the linger.
    sb.send::<Ledger>("l", &apply(1, "a")).await.expect("send");
    let mut waited = 0;
    while applied().await != vec![1] {
        assert!(waited < 1_000, "the first message is delivered");
        elapse(10).await;
        waited += 10;
    }
    // An operator announces a re-sharding; the node's release of the kept lease fails.
    faults.fail_next("release", Scripted::Before);
    let operator = shardbox::NodeId("operator".into());
    let now = shardbox::Clock::now(&**clock);
    let announcement = ReshardAnnouncement {
        by: operator.clone(),
        to: 2,
        until: now + chrono::Duration::seconds(60),
    };
    faults
        .announce_reshard(&announcement, now)
        .await
        .expect("announce a re-sharding");
    let mut waited = 0;
    while faults.scripted_left("release") > 0 {
        assert!(waited < 500, "the kept lease's release was tried");
        elapse(10).await;
        waited += 10;
    }
    // The operator gives up.
    for _ in 0..30 {
        elapse(10).await;
    }
    faults.withdraw_reshard(&operator).await.expect("withdraw");
    for _ in 0..60 {
        elapse(10).await;
    }
    writer
        .send::<Ledger>("l", &apply(2, "a"))
        .await
        .expect("send after the pause");
    let mut waited = 0;
    while applied().await != vec![1, 2] {
        assert!(
            waited < 1_000,
            "the message written after the pause is delivered well before the lease whose \
             release failed runs out (4 s after its last renewal): applied {:?} after {waited} ms",
            applied().await
        );
        elapse(10).await;
        waited += 10;
    }
    node.shutdown().await.expect("shutdown");
}

/// Seed 536 of the simulation's latency invariant (issue 37): a stage whose lease the renewal
/// had extended in the lock table failed (its commit, then the release after it), so the lease
/// was kept for a retried release — but the kept copy still carried the `lease_until` of its
/// pick-up, and the retry forgot a kept lease once that time had passed ("it is free
/// anyway"), while the lock table held it until the renewal's later time. Nothing then
/// released or served the shard: a message nobody heard waited for the lease to run out. A
/// kept lease is now released whatever its recorded time says.
pub(super) async fn a_kept_lease_renewed_past_its_recorded_time(inner: Arc<dyn Storage>) {
    let deaf = Deaf::new(
        inner,
        Duration::from_millis(900),
        Duration::from_millis(100),
        Some(Duration::ZERO),
    )
    .await;
    let (faults, clock, sb, writer) = (&deaf.faults, &deaf.clock, &deaf.sb, &deaf.writer);
    let applied = || deaf.applied();
    // The stage stops while it loads its target's state; meanwhile the clock passes the
    // lease's recorded time (the renewal, every 300 ms, keeps the lease in the lock table), so
    // that its commit renews the lease to a time later than the one recorded at the pick-up.
    let gate = faults.gate_later("load_states", 0);
    sb.send::<Ledger>("l", &apply(1, "a")).await.expect("send");
    let node = sb.start();
    gate.reached().await;
    for _ in 0..5 {
        clock.advance(chrono::Duration::milliseconds(300));
        tokio::time::sleep(Duration::from_millis(320)).await;
    }
    // Then the commit takes effect but its acknowledgement is lost, and the release after the
    // failed stage fails: the lease is kept, recorded until 900 ms after the pick-up, held in
    // the lock table until 900 ms after the commit.
    faults.fail_next("commit_stage", Scripted::After);
    faults.fail_next("release", Scripted::Before);
    gate.open();
    while faults.scripted_left("release") > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    writer
        .send::<Ledger>("l", &apply(2, "a"))
        .await
        .expect("send after the failed release");
    // The clock stands still from here: the lease in the lock table never runs out, so only
    // the retried release lets the shard be served.
    let mut waited = 0;
    while applied().await != vec![1, 2] {
        assert!(
            waited < 500,
            "served after the failed release well before the renewed lease runs out: not \
             after {waited} ms (applied {:?})",
            applied().await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 10;
    }
    node.shutdown().await.expect("shutdown");
}

/// One node and a writer it does not hear (another process that writes but serves nothing),
/// on `inner` with every notification dropped, one shard, under a manual clock: what each
/// regression of this file starts from.
struct Deaf {
    faults: FaultyStorage,
    clock: Arc<ManualClock>,
    sb: Shardbox,
    writer: Shardbox,
}

impl Deaf {
    /// The node and the writer, with these lease terms (`linger`: `None` keeps the default).
    async fn new(
        inner: Arc<dyn Storage>,
        lease: Duration,
        poll: Duration,
        linger: Option<Duration>,
    ) -> Self {
        let notifications_dropped = FaultRates {
            drop_notification: 1_000,
            ..FaultRates::default()
        };
        let faults = FaultyStorage::new(inner, SimRng::new(0), notifications_dropped);
        faults.enable(true);
        let clock = Arc::new(ManualClock::new(t0()));
        let build = |name: &str| {
            let builder = Shardbox::builder()
                .shared_storage(Arc::new(faults.clone()))
                .clock(clock.clone())
                .node_id(shardbox::NodeId(format!("node-{name}")))
                .shards(1)
                .lease_duration(lease)
                .poll_interval(poll);
            let builder = match linger {
                Some(linger) => builder.lease_linger(linger),
                None => builder,
            };
            builder.aggregate::<Ledger>().projection::<Audit>().build()
        };
        let sb = build("a").await.expect("build the node");
        let writer = build("writer").await.expect("build the writer");
        Deaf {
            faults,
            clock,
            sb,
            writer,
        }
    }

    /// Moves the clock `ms` on, and lets as much real time pass.
    async fn elapse(&self, ms: u64) {
        self.clock
            .advance(chrono::Duration::milliseconds(ms as i64));
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// The numbers the ledger `l` applied, in order.
    async fn applied(&self) -> Vec<u64> {
        self.sb
            .aggregate_state::<Ledger>("l")
            .await
            .expect("state")
            .map(|l| l.applied)
            .unwrap_or_default()
    }
}

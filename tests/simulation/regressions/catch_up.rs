//! Catch-up jobs: a start whose acknowledgement was lost, a replay page applied while another
//! node had spilled one, two ticks of one job in one stage.

use super::super::faulty::Scripted;
use super::super::model::{Applied, Audit, Ledger};
use super::{node, t0, wrap};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{CatchUpStatus, ManualClock};
use std::sync::Arc;
use std::time::Duration;

/// Seeds 47 and 154 (before the determinism fix): a catch-up whose start took effect but
/// lost its acknowledgement (so the caller got an error and no first tick was written)
/// stayed `Started` — its targets' live events parked — until a node started again. Now
/// every node looks every lease duration for running jobs that took no step for a lease
/// and writes their tick (a duplicate if they have one).
pub(super) async fn catch_up_whose_start_lost_its_ack(inner: Arc<dyn Storage>) {
    let faults = wrap(inner);
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = node(&faults, &clock).await;
    let node = sb.start();
    for n in 1..=3 {
        let event = Applied {
            source: "ext".into(),
            n,
            audit: "a".into(),
            audit_fail_first: 0,
            relay: None,
        };
        sb.post(EventSource::external("ext"), &event)
            .await
            .expect("post");
    }
    let elapse = |ms: u64| {
        clock.advance(chrono::Duration::milliseconds(ms as i64));
        tokio::time::sleep(Duration::from_millis(ms))
    };
    elapse(500).await;
    faults.fail_next("start_catch_up", Scripted::After);
    assert!(
        sb.catch_up::<Audit>(CatchUp::ids(["a"])).await.is_err(),
        "the start's acknowledgement is lost"
    );
    let running = sb.storage().running_catch_ups().await.expect("jobs");
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].status, CatchUpStatus::Started);
    let mut done = false;
    for _ in 0..60 {
        elapse(250).await;
        if sb
            .storage()
            .running_catch_ups()
            .await
            .expect("jobs")
            .is_empty()
        {
            done = true;
            break;
        }
    }
    node.shutdown().await.expect("shutdown");
    assert!(done, "the catch-up completes within 15 s without a restart");
    let seen = sb.projection_state::<Audit>("a").await.expect("state");
    let ns: Vec<u64> = seen
        .map(|a| a.seen.iter().map(|(_, n)| *n).collect())
        .unwrap_or_default();
    assert_eq!(ns, vec![1, 2, 3]);
}

/// Seeds 229, 777 and 839 (49 and 182 before the determinism fix; 237 and 952 showed it as
/// an event applied twice or missing): a projection applied a replayed event after later ones.
/// The catch-up station applies a replay page straight to the states only while none of the
/// job's replayed rows waits in the Inbox, and it cached "none waits" per job on each node.
/// Node B cached it; node A then served the job's ticks and wrote a replayed row (a handler
/// failed on it), which went into retry; B, serving the next tick, trusted its cache and
/// applied the next page directly, before that row. The cache is now valid only under the
/// lease epoch of the job's home shard it was learned under.
pub(super) async fn replay_page_after_another_node_spilled(inner: Arc<dyn Storage>) {
    let faults = wrap(inner);
    let clock = Arc::new(ManualClock::new(t0()));
    let slow_retry = FailurePolicy::new(
        8,
        Backoff::Fixed(Duration::from_secs(10)),
        ExhaustedOutcome::DeadLetter,
    );
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        nodes.push(
            Shardbox::builder()
                .shared_storage(Arc::new(faults.clone()))
                .clock(clock.clone())
                .node_id(shardbox::NodeId(format!("node-{name}")))
                .shards(1)
                .page_size(1)
                .catch_up_page_size(1)
                .lease_duration(Duration::from_secs(4))
                .kind_policy(Audit::KIND, slow_retry)
                .aggregate::<Ledger>()
                .projection::<Audit>()
                .build()
                .await
                .expect("build a node"),
        );
    }
    let (a, b) = (nodes[0].clone(), nodes[1].clone());
    let advance = |s: i64| clock.advance(chrono::Duration::seconds(s));
    for (n, fail) in [(1, 0), (2, 1), (3, 0)] {
        let event = Applied {
            source: "ext".into(),
            n,
            audit: "x".into(),
            audit_fail_first: fail,
            relay: None,
        };
        a.post(EventSource::external("ext"), &event)
            .await
            .expect("post");
    }
    a.deliver_all().await.expect("live delivery");
    advance(11);
    a.deliver_all()
        .await
        .expect("live delivery after the retry");
    let seen = |sb: Shardbox| async move {
        let state = sb.projection_state::<Audit>("x").await.expect("state");
        state
            .map(|s| s.seen.iter().map(|(_, n)| *n).collect::<Vec<u64>>())
            .unwrap_or_default()
    };
    assert_eq!(seen(a.clone()).await, vec![1, 2, 3], "live delivery");

    b.catch_up::<Audit>(CatchUp::ids(["x"]))
        .await
        .expect("start a catch-up");
    // B serves the first tick (replays event 1 directly, learning that no replayed row
    // waits) but its commit fails.
    faults.fail_next("commit_stage", Scripted::Before);
    assert!(b.deliver_all().await.is_err());
    advance(5);
    // A replays event 1, then event 2, whose handler fails: the page is written as a
    // replayed row, which fails again and goes into retry (10 s); then A's commit fails.
    faults.fail_later("commit_stage", 3, Scripted::Before);
    assert!(a.deliver_all().await.is_err());
    advance(5);
    // B serves the next tick, event 3, while event 2's replayed row waits for its retry.
    b.deliver_all().await.expect("B serves the next tick");
    advance(11);
    for _ in 0..4 {
        b.deliver_all().await.expect("finish");
        advance(1);
    }
    assert!(b
        .storage()
        .running_catch_ups()
        .await
        .expect("jobs")
        .is_empty());
    assert_eq!(
        seen(b.clone()).await,
        vec![1, 2, 3],
        "the rebuilt projection saw its events in event-store order"
    );
}

/// Seed 2912 of commit 07d8f6a (issue 37): a projection instance applied one event twice. A
/// stale tick of a catch-up job (a resumed job's tick, written from the job as it was read
/// before a step committed) and the job's own next tick were served in one stage, and each
/// took a step from the job's stored cursor: the same page was replayed twice in one commit,
/// once written as replayed rows (a row replayed before was still waiting) and once, after
/// another node had delivered that row meanwhile, applied straight to the state. Now a stage
/// takes one step per job and consumes its other ticks. Here the stale tick's step is caught
/// at that point (its look for waiting replayed rows) while the other node delivers.
pub(super) async fn two_ticks_of_one_job_in_one_stage(inner: Arc<dyn Storage>) {
    use shardbox::core::catch_up::{tick, TICK_KIND};
    use shardbox::core::storage::{InboxStore, WriteBatch};
    let faults = wrap(inner);
    let clock = Arc::new(ManualClock::new(t0()));
    let retry_soon = FailurePolicy::new(
        8,
        Backoff::Fixed(Duration::from_secs(1)),
        ExhaustedOutcome::DeadLetter,
    );
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        nodes.push(
            Shardbox::builder()
                .shared_storage(Arc::new(faults.clone()))
                .clock(clock.clone())
                .node_id(shardbox::NodeId(format!("node-{name}")))
                .shards(2)
                .catch_up_page_size(1)
                .lease_duration(Duration::from_secs(4))
                .kind_policy(Audit::KIND, retry_soon)
                .aggregate::<Ledger>()
                .projection::<Audit>()
                .build()
                .await
                .expect("build a node"),
        );
    }
    let (a, b) = (nodes[0].clone(), nodes[1].clone());
    // The job's ticks (job 1 on a fresh store) in one shard, the rebuilt instance in the other.
    let home = a.shard_of(TICK_KIND, "1");
    let audit = (0..32)
        .map(|i| format!("x{i}"))
        .find(|id| a.shard_of(Audit::KIND, id) != home)
        .expect("an instance outside the ticks' shard");
    let target = a.shard_of(Audit::KIND, &audit);
    let advance = |s: i64| clock.advance(chrono::Duration::seconds(s));
    // Event 1's handler fails on its first attempt: its replay cannot be applied straight
    // to the state and goes through the Inbox (and then into a retry).
    for (n, fail) in [(1, 1), (2, 0), (3, 0)] {
        let event = Applied {
            source: "ext".into(),
            n,
            audit: audit.clone(),
            audit_fail_first: fail,
            relay: None,
        };
        a.post(EventSource::external("ext"), &event)
            .await
            .expect("post");
    }
    a.deliver_all().await.expect("live delivery");
    advance(2);
    a.deliver_all()
        .await
        .expect("live delivery after the retry");
    let seen = |sb: Shardbox| {
        let audit = audit.clone();
        async move {
            let state = sb.projection_state::<Audit>(&audit).await.expect("state");
            state
                .map(|s| s.seen.iter().map(|(_, n)| *n).collect::<Vec<u64>>())
                .unwrap_or_default()
        }
    };
    assert_eq!(seen(a.clone()).await, vec![1, 2, 3], "live delivery");

    a.catch_up::<Audit>(CatchUp::ids([audit.clone()]))
        .await
        .expect("start a catch-up");
    let started = a.storage().running_catch_ups().await.expect("jobs");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].id, 1, "the first job of a fresh store");
    // A takes the first step (event 1, written as a replayed row) and no other.
    faults.fail_later("commit_stage", 1, Scripted::Before);
    assert!(a.deliver(home).await.is_err());
    // The replayed row's first attempt fails: it waits for its retry.
    b.deliver(target)
        .await
        .expect("the replayed row's first attempt");
    advance(2);
    // A stale tick of the job, as a resume that read the job before the first step writes it.
    let stale = a.address(tick(&started[0], shardbox::Clock::now(&*clock), None));
    faults
        .write(WriteBatch {
            events: vec![],
            messages: vec![stale],
        })
        .await
        .expect("write the stale tick");
    // A serves both ticks in one stage. The first step finds the replayed row waiting and
    // writes event 2 as a row too; the stale tick's look for waiting rows is held until B
    // has delivered the replayed row of event 1.
    let gate = faults.gate_later("has_pending_replay", 1);
    let serve = {
        let a = a.clone();
        tokio::spawn(async move { a.deliver(home).await })
    };
    tokio::pin!(serve);
    tokio::select! {
        _ = gate.reached() => {
            b.deliver(target).await.expect("B delivers the replayed row");
            gate.open();
            serve.await.expect("join").expect("A's stage");
        }
        served = &mut serve => {
            served.expect("join").expect("A's stage (it took one step)");
        }
    }
    faults.forget_gates();
    for _ in 0..20 {
        advance(1);
        a.deliver_all().await.expect("finish");
        b.deliver_all().await.expect("finish");
        if a.storage()
            .running_catch_ups()
            .await
            .expect("jobs")
            .is_empty()
        {
            break;
        }
    }
    assert!(a
        .storage()
        .running_catch_ups()
        .await
        .expect("jobs")
        .is_empty());
    assert_eq!(
        seen(b.clone()).await,
        vec![1, 2, 3],
        "the rebuilt projection saw each event once"
    );
}

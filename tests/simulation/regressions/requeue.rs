//! A requeued dead letter whose first delivery was handled but never committed.

use super::super::faulty::Scripted;
use super::super::model::Ledger;
use super::{apply, node, t0, wrap};
use shardbox::core::{Storage, EXPIRED_REASON};
use shardbox::prelude::*;
use shardbox::ManualClock;
use std::sync::Arc;
use std::time::Duration;

/// Seeds 36 and 143 (and 139, 142 before the determinism fix): a message whose first
/// delivery was handled but not committed, which then expired and was dead-lettered, was
/// lost when an operator requeued it. The live station had remembered the delivery in its
/// recent-delivery cache before the commit, so the requeued row (same key, another `seq`)
/// was taken for a duplicate of a delivery that never happened. Now a stage's deliveries are
/// remembered only after its commit (`Conveyor::after_commit`).
pub(super) async fn requeue_after_an_uncommitted_delivery(inner: Arc<dyn Storage>) {
    let faults = wrap(inner);
    let clock = Arc::new(ManualClock::new(t0()));
    let sb = node(&faults, &clock).await;
    let options = SendOptions::default()
        .signal_id("once")
        .ttl(Duration::from_secs(1));
    sb.send_with::<Ledger>("l", &apply(1, "a"), options)
        .await
        .expect("send");
    faults.fail_next("commit_stage", Scripted::Before);
    assert!(
        sb.deliver_all().await.is_err(),
        "the first stage's commit fails"
    );
    // Past the TTL and past the lease the failed stage may have kept.
    clock.advance(chrono::Duration::seconds(6));
    sb.deliver_all().await.expect("expire");
    sb.sweep_expired().await.expect("sweep");
    let dead = sb
        .dead_letters(DeadLetterFilter::all())
        .await
        .expect("dead letters");
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].letter.reason, EXPIRED_REASON);
    let requeued = sb
        .requeue_dead_letters(DeadLetterFilter::all())
        .await
        .expect("requeue");
    assert_eq!(requeued.requeued, 1, "{requeued:?}");
    sb.deliver_all()
        .await
        .expect("deliver the requeued message");
    let ledger = sb.aggregate_state::<Ledger>("l").await.expect("state");
    assert_eq!(
        ledger.map(|l| l.applied),
        Some(vec![1]),
        "the requeued message is applied"
    );
}

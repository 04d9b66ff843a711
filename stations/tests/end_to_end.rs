//! The stock stations end to end through `Delivery::deliver` on the in-memory backend with a
//! manual clock: a message failing twice is retried at the back-off times, not a millisecond
//! early, and applied once; its event reaches the projection in the next stage.

mod common;

use common::*;
use shardbox_core::storage::EntityKey;
use shardbox_core::{
    Delivery, EntityStore, Inbox, InboxStore, MessageStatus, SendOptions, ShardIndex, StageReport,
    Station, WorkRegistry, WorkerId,
};
use shardbox_stations::{Cleanup, LiveDelivery, RecentDeliveries};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn a_message_failing_twice_is_retried_at_the_backoff_times_and_applied_once() {
    let fx = Fixture::new(config().build().unwrap()).await;
    // The fixture's lease would block the worker: give it back.
    fx.storage.release(&fx.lease).await.unwrap();
    let delivery = Delivery::new(
        fx.env.clone(),
        vec![
            Arc::new(LiveDelivery::new(RecentDeliveries::new(
                1_000,
                Duration::from_secs(60),
            ))) as Arc<dyn Station>,
            Arc::new(Cleanup::new()),
        ],
    );
    let shard = ShardIndex(0);
    let worker = WorkerId(1);
    Inbox::new(fx.env.clone())
        .send::<Counter>(
            "a",
            &CounterCommand::FailUntil { attempts: 2, n: 7 },
            SendOptions::default().signal_id("cmd-1"),
        )
        .await
        .unwrap();

    // First attempt at t0 fails: retry after 1 s.
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(
        (
            report.stages,
            report.totals.retried,
            report.totals.delivered
        ),
        (1, 1, 0)
    );
    let rows = fx.storage.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].attempts, 1);
    assert_eq!(rows[0].message.deliver_after, Some(t0() + secs(1)));
    assert_eq!(
        rows[0].last_error.as_deref(),
        Some("not yet: attempt 1 of 3")
    );
    assert_eq!(
        fx.storage.next_due(shard, t0()).await.unwrap(),
        Some(t0() + secs(1))
    );

    // Not a millisecond early.
    fx.clock.advance(ms(999));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(report.stages, 0);
    assert_eq!(fx.calls().len(), 1);

    // Second attempt at t0 + 1 s fails: retry after 2 s more.
    fx.clock.advance(ms(1));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(
        (
            report.stages,
            report.totals.retried,
            report.totals.delivered
        ),
        (1, 1, 0)
    );
    let rows = fx.storage.rows();
    assert_eq!(rows[0].attempts, 2);
    assert_eq!(rows[0].message.deliver_after, Some(t0() + secs(3)));
    assert_eq!(
        rows[0].last_error.as_deref(),
        Some("not yet: attempt 2 of 3")
    );

    fx.clock.advance(ms(1_999));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(report.stages, 0);
    assert_eq!(fx.calls().len(), 2);
    assert!(fx
        .storage
        .load_states(&[counter_key("a")])
        .await
        .unwrap()
        .is_empty());

    // Third attempt at t0 + 3 s succeeds; its event reaches the projection in the next stage.
    fx.clock.advance(ms(1));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(
        report.totals,
        StageReport {
            page_len: 2,
            delivered: 2,
            fanned_out: 1,
            elapsed: report.totals.elapsed,
            ..StageReport::default()
        }
    );
    assert_eq!(report.stages, 2);
    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1]),
            ("counter".into(), "a".into(), vec![1]),
            ("counter".into(), "a".into(), vec![1]),
            ("totals".into(), "a".into(), vec![2]),
        ]
    );

    let totals_key = EntityKey {
        kind: "totals".into(),
        tenant: String::new(),
        id: "a".into(),
    };
    let states = fx
        .storage
        .load_states(&[counter_key("a"), totals_key.clone()])
        .await
        .unwrap();
    assert_eq!(states.len(), 2);
    for s in &states {
        assert_eq!(s.version, 1, "{:?} written once", s.key);
        assert_eq!(s.updated_at, t0() + secs(3));
        if s.key == totals_key {
            let totals: Totals = serde_json::from_slice(&s.state).unwrap();
            assert_eq!(
                totals,
                Totals {
                    total: 7,
                    events: 1
                }
            );
        } else {
            let c: Counter = serde_json::from_slice(&s.state).unwrap();
            assert_eq!(c, counter(&[7]));
        }
    }
    let rows = fx.storage.rows();
    assert_eq!(
        rows.iter()
            .map(|r| (r.seq, r.status, r.keep_until))
            .collect::<Vec<_>>(),
        vec![
            (1, MessageStatus::Delivered, Some(t0() + secs(63))),
            (2, MessageStatus::Delivered, Some(t0() + secs(63))),
        ]
    );
    assert!(fx.storage.dead_letters().is_empty());

    // Nothing is left to do.
    fx.clock.advance(secs(10));
    let report = delivery.deliver(shard, worker).await.unwrap();
    assert_eq!(report.stages, 0);
    assert_eq!(fx.calls().len(), 4);
}

//! `LiveDelivery`'s deduplication: a duplicate within a page, rows the `RecentDeliveries`
//! cache remembers (and the same row redelivered after a lost commit), and a zero dedup
//! window that removes delivered rows at once.

mod common;

use common::*;
use shardbox_core::storage::{RowChange, RowUpdate};
use shardbox_core::{Intent, SignalId, Station};
use shardbox_stations::{LiveDelivery, RecentDeliveries};
use std::time::Duration;

#[tokio::test]
async fn live_drops_a_duplicate_within_the_page() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let mut first = add(1, "a", 10);
    first.message.signal_id = SignalId("same".into());
    let mut again = add(2, "a", 20);
    again.message.signal_id = SignalId("same".into());
    // The same signal to another target is not a duplicate.
    let mut other_target = add(3, "b", 30);
    other_target.message.signal_id = SignalId("same".into());
    let mut c = fx.conveyor(vec![first, again, other_target]);
    live().process(&mut c).await.unwrap();

    assert_eq!(
        intents(&c),
        vec![
            Some(delivered()),
            Some(Intent::Duplicate),
            Some(delivered())
        ]
    );
    assert_eq!(
        fx.calls(),
        vec![
            ("counter".into(), "a".into(), vec![1]),
            ("counter".into(), "b".into(), vec![3]),
        ]
    );
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        counter_states(&commit),
        vec![("a".into(), counter(&[10])), ("b".into(), counter(&[30]))]
    );
    assert_eq!(
        commit.updates[1],
        RowUpdate {
            seq: 2,
            change: RowChange::Remove
        }
    );
    assert_eq!((report.delivered, report.duplicates), (2, 1));
}

#[tokio::test]
async fn live_drops_rows_the_cache_remembers_from_another_row_and_redelivers_the_same_row() {
    let fx = Fixture::new(config().build().unwrap()).await;
    let recent = RecentDeliveries::new(1_000, Duration::from_secs(60));
    let until = t0() + chrono::Duration::seconds(60);
    recent.remember(dedup_key("a", "sig-1"), 99, until);
    recent.remember(dedup_key("a", "sig-2"), 2, until);
    let station = LiveDelivery::new(recent);

    // seq 1 carries a key delivered as row 99: a duplicate. Row 2 was delivered before but
    // its commit was lost: the same row again, so it is delivered again.
    let mut c = fx.conveyor(vec![add(1, "a", 10), add(2, "a", 20)]);
    station.process(&mut c).await.unwrap();
    assert_eq!(
        intents(&c),
        vec![Some(Intent::Duplicate), Some(delivered())]
    );
    assert_eq!(fx.calls(), vec![("counter".into(), "a".into(), vec![2])]);

    // The station remembers what it delivered: another row with signal sig-2 is a duplicate,
    // row 2 itself is still redelivered.
    let mut dup = add(10, "a", 30);
    dup.message.signal_id = SignalId("sig-2".into());
    let mut c = fx.conveyor(vec![dup]);
    station.process(&mut c).await.unwrap();
    assert_eq!(intents(&c), vec![Some(Intent::Duplicate)]);

    let mut c = fx.conveyor(vec![add(2, "a", 20)]);
    station.process(&mut c).await.unwrap();
    assert_eq!(intents(&c), vec![Some(delivered())]);
}

#[tokio::test]
async fn live_removes_delivered_rows_at_once_with_a_zero_dedup_window() {
    let fx = Fixture::new(config().dedup_window(Duration::ZERO).build().unwrap()).await;
    let mut c = fx.conveyor(vec![add(1, "a", 10)]);
    live().process(&mut c).await.unwrap();

    assert_eq!(c.intent(0), Some(&Intent::Delivered { keep_until: None }));
    let (commit, report) = c.into_commit(t0() + secs(30));
    assert_eq!(
        commit.updates,
        vec![RowUpdate {
            seq: 1,
            change: RowChange::Remove
        }]
    );
    assert_eq!(counter_states(&commit), vec![("a".into(), counter(&[10]))]);
    assert_eq!(report.delivered, 1);
}

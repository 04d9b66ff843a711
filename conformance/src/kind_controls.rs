//! Kind controls: a paused kind's rows parked by stages and released by the resume, the
//! run-time settings stored and read back, and a resume racing stages that park.

use super::fixtures::*;
use shardbox_core::storage::{Inspect, RowChange, RowUpdate};
use shardbox_core::{
    Backoff, ExhaustedOutcome, FailurePolicy, KindLimits, KindSettings, ShardIndex, Storage,
};
use std::sync::Arc;
use std::time::Duration;

fn paused(seq: i64) -> RowUpdate {
    RowUpdate {
        seq,
        change: RowChange::Paused,
    }
}

/// A stage's park of a row whose kind is not paused (any more) leaves it due; while the kind
/// is paused its parked rows are not read, not due, have no due time and are still pending;
/// other kinds go on; the resume makes them due at once (whatever the reader's clock) in
/// `seq` order and says how many and where; pausing twice keeps the first time; run-time
/// settings are stored beside the pause and read back, and clearing them leaves the pause.
pub async fn a_paused_kinds_rows_are_parked_until_the_resume<S: Storage + Inspect>(store: S) {
    let shard = ShardIndex(1);
    store
        .write(messages(vec![
            command(1, "a", "a1"),
            with(command(1, "o", "o1"), |m| m.target_kind = "order".into()),
            command(1, "b", "b1"),
        ]))
        .await
        .expect("write");
    let rows = store.rows().await.expect("rows");
    let (a1, b1) = (seq_of(&rows, "a1"), seq_of(&rows, "b1"));

    let settings = order_settings();
    store
        .set_kind_settings("order", &settings, secs(1))
        .await
        .expect("set");

    // Read while `account` was paused, committed after its resume: not parked.
    commit_at(&store, 1, secs(2), vec![paused(a1)]).await;
    let page = store.read_page(shard, secs(2), 10).await.expect("read");
    assert_eq!(signals(&page.messages), ["a1", "o1", "b1"]);

    assert!(store.pause_kind("account", secs(3)).await.expect("pause"));
    assert!(
        !store.pause_kind("account", secs(4)).await.expect("pause"),
        "a paused kind is paused already"
    );
    commit_at(&store, 1, secs(5), vec![paused(a1), paused(b1)]).await;
    let page = store.read_page(shard, secs(100), 10).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["o1"],
        "a paused kind's rows are not read"
    );
    assert!(page.waiting.is_empty(), "{:?}", page.waiting);
    assert_eq!(page.next_due, None, "parked rows have no due time");
    let counts = store.counts(Some(shard)).await.expect("counts");
    assert_eq!(counts.pending(), 3, "parked rows are still pending");
    let rows = store.rows().await.expect("rows");
    let parked_row = rows.iter().find(|r| r.seq == a1).expect("a1");
    assert_eq!(
        (parked_row.attempts, parked_row.last_error.clone()),
        (0, None),
        "a parked row is untouched: no attempt, no error"
    );

    let controls = store.kind_controls().await.expect("controls");
    let kinds: Vec<_> = controls.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["account", "order"]);
    assert_eq!(
        controls[0].paused_since,
        Some(secs(3)),
        "the first pause's time"
    );
    assert_eq!(controls[0].settings, KindSettings::default());
    assert_eq!(controls[1].paused_since, None);
    assert_eq!(controls[1].settings, settings);

    let resumed = store
        .resume_kind("account", secs(50))
        .await
        .expect("resume");
    assert!(resumed.was_paused);
    assert_eq!((resumed.released, resumed.shards.clone()), (2, vec![shard]));
    // A reader whose clock is behind the operator's still finds them due.
    let page = store.read_page(shard, secs(6), 10).await.expect("read");
    assert_eq!(
        signals(&page.messages),
        ["a1", "o1", "b1"],
        "due at once, in seq order"
    );
    let again = store
        .resume_kind("account", secs(51))
        .await
        .expect("resume");
    assert_eq!((again.was_paused, again.released), (false, 0));

    clearing_settings_keeps_the_pause(&store).await;
}

/// The run-time settings the case stores for `order`: each field set.
fn order_settings() -> KindSettings {
    let policy = FailurePolicy::new(
        3,
        Backoff::Fixed(Duration::from_millis(1500)),
        ExhaustedOutcome::Block,
    );
    KindSettings {
        failure_policy: Some(policy),
        handler_timeout: Some(Duration::from_secs(9)),
        limits: KindLimits {
            max_concurrent: Some(4),
            rate_per_second: Some(12.5),
        },
    }
}

/// Settings cleared; a pause of the same kind kept apart from them.
async fn clearing_settings_keeps_the_pause<S: Storage + Inspect>(store: &S) {
    assert!(store.pause_kind("order", secs(60)).await.expect("pause"));
    store
        .set_kind_settings("order", &KindSettings::default(), secs(61))
        .await
        .expect("clear");
    let controls = store.kind_controls().await.expect("controls");
    let order = controls.iter().find(|c| c.kind == "order").expect("order");
    assert_eq!(order.settings, KindSettings::default());
    assert_eq!(
        order.paused_since,
        Some(secs(60)),
        "clearing settings keeps the pause"
    );
    assert_eq!(order.updated_at, secs(61));
}

/// A resume racing stages that park the kind's rows (each on a connection of its own) leaves
/// no row parked: a park either commits before the resume (and is released by it) or finds
/// the kind resumed (and parks nothing).
pub async fn a_resume_racing_parks_leaves_no_row_parked<S: Storage + Inspect + 'static>(store: S) {
    let store = Arc::new(store);
    let shards: u32 = 8;
    for round in 0..12 {
        let writes = (0..shards)
            .map(|s| command(s, &format!("t{round}-{s}"), &format!("r{round}-{s}")))
            .collect();
        store.write(messages(writes)).await.expect("write");
        let at = secs(10 + round);
        store.pause_kind("account", at).await.expect("pause");
        let rows = store.rows().await.expect("rows");
        let mut stages = tokio::task::JoinSet::new();
        for s in 0..shards {
            let mine: Vec<RowUpdate> = rows
                .iter()
                .filter(|r| {
                    r.shard == ShardIndex(s)
                        && r.message.signal_id.0.starts_with(&format!("r{round}-"))
                })
                .map(|r| paused(r.seq))
                .collect();
            let store = store.clone();
            stages.spawn(async move { commit_at(&*store, s, at, mine).await });
        }
        let resumer = {
            let store = store.clone();
            tokio::spawn(async move { store.resume_kind("account", at).await.expect("resume") })
        };
        while let Some(done) = stages.join_next().await {
            done.expect("stage");
        }
        resumer.await.expect("resume task");
        let parked: Vec<String> = store
            .rows()
            .await
            .expect("rows")
            .into_iter()
            .filter(|r| shardbox_core::catch_up::is_parked(r.message.deliver_after))
            .map(|r| r.message.signal_id.0)
            .collect();
        assert!(
            parked.is_empty(),
            "round {round}: rows parked after the resume: {parked:?}"
        );
    }
}

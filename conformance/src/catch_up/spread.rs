//! Catch-up cases: one database's part of a catch-up over several databases (the storage over
//! them calls these on each; see `shardbox_core::storage::CatchUpSpread`).

use super::*;
use shardbox_core::catch_up::parked_until;
use shardbox_core::storage::{EntityKey, OutboxWrite, RowChange, RowUpdate, WriteBatch};

fn live(signal: &str, target: &str) -> shardbox_core::InboxWrite {
    with(command(1, target, signal), |m| {
        m.kind = shardbox_core::MessageKind::Event;
        m.target_kind = "balances".into();
    })
}

/// `prepare_catch_up` re-fences the affected shards but the asking one, resets the targets and
/// reads the events' end; `store_positions` reads the outbox's and the Inbox's ends;
/// `has_unsettled_rows` finds a pending live row at or below a seq (not a parked one, not one
/// above) and any replayed row; `release_parked` makes the job's parked rows due, re-fences
/// and records the release.
pub async fn one_databases_part_of_a_catch_up_over_several<S: Storage + Inspect>(store: S) {
    let balances = |id: &str| EntityKey {
        kind: "balances".into(),
        tenant: String::new(),
        id: id.into(),
    };
    let fenced = pick(&store, 1, "a", secs(0)).await;
    let own = pick(&store, 3, "a", secs(0)).await;
    let mut seed = stage(&own, secs(0), vec![]);
    seed.states = vec![
        state(balances("x"), Some("1")),
        state(balances("y"), Some("2")),
    ];
    seed.writes.events = vec![
        event("ev-1", "balances.event", secs(0)),
        event("ev-2", "balances.event", secs(0)),
    ];
    seed.outbox = vec![OutboxWrite {
        database: 1,
        write: command(0, "far", "far-1"),
    }];
    store.commit_stage(seed).await.expect("seed");
    let last = store.last_event_seq().await.expect("last");

    let job = store
        .start_catch_up(spec("balances", "", ids(&["x"])), SHARDS)
        .await
        .expect("start");
    let own = pick(&store, 3, "a", secs(1)).await;
    let end = store
        .prepare_catch_up(&job.spec, Some(ShardIndex(3)))
        .await
        .expect("prepare");
    assert_eq!(end, last, "the events' end");
    let left = store
        .load_states(&[balances("x"), balances("y")])
        .await
        .expect("load");
    assert_eq!(left.len(), 1, "x reset, y kept: {left:?}");
    assert!(matches!(
        store.commit_stage(stage(&fenced, secs(1), vec![])).await,
        Err(StorageError::LeaseLost { .. })
    ));
    store
        .commit_stage(stage(&own, secs(1), vec![]))
        .await
        .expect("the asking shard is not re-fenced");

    // Positions: one outbox row; the Inbox's end follows its writes.
    store
        .write(WriteBatch {
            events: vec![],
            messages: vec![live("ev-1", "x"), live("ev-2", "x"), live("ev-3", "y")],
        })
        .await
        .expect("write");
    let rows = store.rows().await.expect("rows");
    let positions = store.store_positions().await.expect("positions");
    assert_eq!(positions.outbox_first, Some(positions.outbox_last));
    assert!(positions.outbox_last > 0);
    assert_eq!(
        positions.inbox_last,
        rows.iter().map(|r| r.seq).max().unwrap()
    );
    let (first_x, second_x) = (seq_of(&rows, "ev-1"), seq_of(&rows, "ev-2"));
    let shards = [ShardIndex(1)];
    let unsettled = |up_to: i64| store.has_unsettled_rows("balances", "", &shards, up_to);
    assert!(
        !unsettled(first_x - 1).await.expect("below"),
        "nothing at or below"
    );
    assert!(unsettled(first_x).await.expect("at"), "a pending live row");

    park_then_release(&store, &job, (first_x, second_x)).await;
}

/// Parks rows `seqs` of shard 1: parked rows are not unsettled, a replayed row is; released,
/// they are due again in seq order, the shard is re-fenced and the release recorded.
async fn park_then_release<S: Storage + Inspect>(store: &S, job: &CatchUpJob, seqs: (i64, i64)) {
    let (first_x, second_x) = seqs;
    let shards = [ShardIndex(1)];
    let unsettled = |up_to: i64| store.has_unsettled_rows("balances", "", &shards, up_to);
    // Parked rows are not unsettled; released, they are due again, in seq order.
    let lease = pick(store, 1, "b", secs(2)).await;
    let park = [first_x, second_x]
        .into_iter()
        .map(|seq| RowUpdate {
            seq,
            change: RowChange::Hold {
                until: parked_until(),
            },
        })
        .collect();
    store
        .commit_stage(stage(&lease, secs(2), park))
        .await
        .expect("park");
    assert!(
        !unsettled(second_x).await.expect("parked"),
        "parked rows are settled later"
    );
    let replayed = with(command(1, "x", "catch-up/1/event/ev-1"), |m| {
        m.kind = shardbox_core::MessageKind::CatchUp;
        m.target_kind = "balances".into();
    });
    store
        .write(messages(vec![replayed]))
        .await
        .expect("replayed row");
    assert!(
        unsettled(0).await.expect("replayed"),
        "a replayed row is unsettled"
    );

    let released = store
        .release_parked(job, Some(ShardIndex(3)))
        .await
        .expect("release");
    assert_eq!(released, 2);
    assert_eq!(
        store.released_catch_ups().await.expect("released"),
        [job.id],
        "the release is recorded"
    );
    let page = store
        .read_page(ShardIndex(1), secs(3), 10)
        .await
        .expect("page");
    assert_eq!(
        signals(&page.messages),
        ["ev-1", "ev-2", "ev-3", "catch-up/1/event/ev-1"],
        "released rows due again, in seq order"
    );
    assert!(matches!(
        store.commit_stage(stage(&lease, secs(3), vec![])).await,
        Err(StorageError::LeaseLost { .. })
    ));
}

//! A catch-up over several databases, at the storage's level: where the job and its ticks
//! live, what its start and its first step do in every database, what the replay reads, and
//! how its end releases the parked rows of every database.

use super::{placed, placement, several};
use crate::fixtures::*;
use shardbox_core::catch_up::{parked_until, TICK_KIND};
use shardbox_core::databases::DatabaseMap;
use shardbox_core::storage::{
    CatchUpJob, CatchUpSpread, CatchUpStatus, CatchUpTargets, Inspect, Lease, NewCatchUp,
    RowChange, RowUpdate, StageCommit,
};
use shardbox_core::{MessageKind, ShardIndex, ShardStrategy, Storage, StorageError};
use std::sync::Arc;

/// An account id whose target lives in `database`.
fn account_in(strategy: &Arc<dyn ShardStrategy>, map: DatabaseMap, database: u32) -> String {
    (0..)
        .map(|i| format!("c-{i}"))
        .find(|id| map.database_of(strategy.shard_of("account", id, SHARDS)) == database)
        .unwrap()
}

/// A commit of `id`'s stage at `now`: `states` and an event `event` of `id` as its source.
async fn commit_of<S: Storage>(store: &S, lease: &Lease, id: &str, event: &str, now: i64) {
    let mut commit = StageCommit::new(lease.clone(), secs(now), secs(now + 30));
    let mut e = shardbox_core::NewEvent {
        tenant: String::new(),
        ..crate::fixtures::event(event, "Opened", secs(now))
    };
    e.source.id = id.to_owned();
    commit.writes.events = vec![e];
    if now == 0 {
        commit.states = vec![state(key(id), Some("{}"))];
    }
    store.commit_stage(commit).await.expect("commit");
}

/// A catch-up over several databases: the job lives in the home database, spread over all of
/// them, and its ticks too; its start re-fences the affected shards, resets the targets and
/// records the set (each database's events' end) in every database, and a first step's
/// commit does it again if the start did not; `read_events_within` keeps to the set; its end
/// waits for the outboxes and the live rows, then each other database releases its parked
/// rows and records it, and the home commit that ends the job releases the home ones.
pub async fn several_databases_run_a_catch_up_over_all_of_them<S: Storage + Inspect>(store: S) {
    let dbs = several(&store);
    let map = dbs.map();
    store.claim_shard_count(SHARDS).await.expect("claim");
    let strategy = placement(&store);
    let ids: Vec<String> = (0..map.count())
        .map(|d| account_in(&strategy, map, d))
        .collect();
    let shard_of = |id: &str| strategy.shard_of("account", id, SHARDS);
    // A state and an event of each target, each in its database.
    for (n, id) in ids.iter().enumerate() {
        let lease = pick(&store, shard_of(id).0, "seed", secs(0)).await;
        commit_of(&store, &lease, id, &format!("before-{n}"), 0).await;
        store.release(&lease).await.expect("release");
    }
    let job = start(&store, map).await;
    let stored = store.catch_up(job.id).await.expect("read").expect("job");
    let tick = strategy.shard_of(TICK_KIND, &job.id.to_string(), SHARDS);
    assert_eq!(
        map.database_of(tick),
        0,
        "its ticks live in the home database"
    );
    let spread = stored.spread.clone().expect("spread");
    assert_eq!(
        spread.events,
        vec![1; map.count() as usize],
        "each database's end"
    );
    assert_eq!(stored.until_seq, Some(spread.until_seq()));
    let keys: Vec<_> = ids.iter().map(|id| key(id)).collect();
    assert!(
        store.load_states(&keys).await.expect("states").is_empty(),
        "reset everywhere"
    );

    // A start that did not finish: the first step's commit prepares it, re-fencing every
    // database's affected shards but its own.
    let far = (0..SHARDS)
        .find(|s| map.database_of(ShardIndex(*s)) == 1)
        .unwrap();
    let far_lease = pick(&store, far, "b", secs(1)).await;
    let lease = pick(&store, tick.0, "a", secs(1)).await;
    let mut unprepared = stored.clone();
    (unprepared.spread, unprepared.until_seq) = (Some(CatchUpSpread::new(map.count())), None);
    let mut first = StageCommit::new(lease.clone(), secs(1), secs(30));
    first.catch_ups = vec![unprepared];
    store.commit_stage(first).await.expect("first step");
    assert_eq!(
        store.catch_up(job.id).await.expect("read"),
        Some(stored.clone())
    );
    assert!(matches!(
        store
            .commit_stage(StageCommit::new(far_lease, secs(1), secs(30)))
            .await,
        Err(StorageError::LeaseLost { .. })
    ));
    store.release(&lease).await.expect("release");

    // Events after the set, each with a live row of its target, parked: not replayed.
    let parked = park_after_the_set(&store, &strategy, &ids).await;
    let replay = store
        .read_events_within(0, &spread.events, &[], None, 100)
        .await
        .expect("replay");
    let mut got: Vec<String> = replay.iter().map(|e| e.event.id.0.clone()).collect();
    got.sort();
    let want: Vec<String> = (0..ids.len()).map(|n| format!("before-{n}")).collect();
    assert_eq!(got, want, "the set, nothing after it");

    let lease = pick(&store, tick.0, "a", secs(4)).await;
    end(&store, stored, lease).await;
    for (n, shard) in parked {
        let page = store.read_page(shard, secs(5), 10).await.expect("page");
        assert_eq!(
            signals(&page.messages),
            [format!("after-{n}")],
            "released, due again"
        );
    }
    assert_eq!(
        dbs.databases()[1]
            .released_catch_ups()
            .await
            .expect("released"),
        [job.id],
        "database 1 recorded its release"
    );
}

/// Starts a catch-up of every account; checks where it is kept.
async fn start<S: Storage>(store: &S, map: DatabaseMap) -> CatchUpJob {
    let job = store
        .start_catch_up(
            NewCatchUp {
                projection_kind: "account".into(),
                tenant: String::new(),
                targets: CatchUpTargets::All,
                since: None,
                affected_shards: (0..SHARDS).map(ShardIndex).collect(),
                total_estimate: 0,
                created_at: t0(),
                version_of: None,
                databases: 1,
            },
            SHARDS,
        )
        .await
        .expect("start");
    assert_eq!(
        job.spec.databases,
        map.count(),
        "the storage sets its count"
    );
    let running = store.running_catch_ups().await.expect("jobs");
    assert_eq!(running.len(), 1);
    let dbs = several(store);
    assert!(
        dbs.databases()[1]
            .running_catch_ups()
            .await
            .expect("jobs")
            .is_empty(),
        "kept in the home database only"
    );
    job
}

/// Walks `job`'s end: the outboxes' ends, then the Inboxes' ends, then nothing left; a commit
/// under `lease` (its tick's shard) ends it.
async fn end<S: Storage>(store: &S, job: CatchUpJob, lease: Lease) {
    let mut ending = job.clone();
    ending.status = CatchUpStatus::Finalizing;
    let mut looks = 0;
    loop {
        let progress = store.spread_progress(&ending).await.expect("progress");
        ending.spread = Some(progress.spread);
        if !progress.pending {
            break;
        }
        looks += 1;
        assert!(looks < 5, "the end is reached: {ending:?}");
    }
    let spread = ending.spread.clone().unwrap();
    assert_eq!(spread.outboxes.len(), spread.databases as usize);
    assert_eq!(spread.inboxes.len(), spread.databases as usize);
    ending.status = CatchUpStatus::Completed;
    ending.finished_at = Some(secs(4));
    let mut last = StageCommit::new(lease, secs(4), secs(30));
    last.catch_ups = vec![ending];
    store.commit_stage(last).await.expect("end");
    let done = store.catch_up(job.id).await.expect("read").expect("job");
    assert_eq!(done.status, CatchUpStatus::Completed);
    assert!(done.spread.expect("spread").settling);
}

/// An event after the set for each of the first two of `ids` (databases 0 and 1), each with a
/// live row of its target, parked as a stage does: (n, the row's shard) of each.
async fn park_after_the_set<S: Storage>(
    store: &S,
    strategy: &Arc<dyn ShardStrategy>,
    ids: &[String],
) -> Vec<(usize, ShardIndex)> {
    let shard_of = |id: &str| strategy.shard_of("account", id, SHARDS);
    let mut parked = Vec::new();
    for (n, id) in ids.iter().enumerate().take(2) {
        let lease = pick(store, shard_of(id).0, "c", secs(2)).await;
        commit_of(store, &lease, id, &format!("after-{n}"), 2).await;
        let row = with(placed(strategy, SHARDS, id, &format!("after-{n}")), |m| {
            m.kind = MessageKind::Event;
        });
        store.write(messages(vec![row])).await.expect("live row");
        let page = store
            .read_page(shard_of(id), secs(3), 10)
            .await
            .expect("page");
        let park = RowUpdate {
            seq: seq_of(&page.messages, &format!("after-{n}")),
            change: RowChange::Hold {
                until: parked_until(),
            },
        };
        store
            .commit_stage(stage(&lease, secs(3), vec![park]))
            .await
            .expect("park");
        store.release(&lease).await.expect("release");
        parked.push((n, shard_of(id)));
    }
    parked
}

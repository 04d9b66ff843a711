//! Cases of a storage over several databases (`shardbox_core::databases::Databases`, found
//! by `Databases::of`): what holds per database where one database holds it for
//! the whole storage, a stage's rows for another database carried by the relays, re-sharding
//! database by database, a catch-up over all of them, and the refusal of a shard count below
//! one shard per database. Run with `conformance_suite!(several_databases: fresh)` on two or more
//! databases.

use super::fixtures::*;
use shardbox_core::databases::{DatabaseStrategy, Databases};
use shardbox_core::storage::{Inspect, ReshardSwitch, StageCommit};

mod catch_up;

pub use catch_up::several_databases_run_a_catch_up_over_all_of_them;
use shardbox_core::{
    InboxWrite, ShardIndex, ShardStrategy, StableHashStrategy, Storage, StorageError,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

fn several<S: Storage>(store: &S) -> &Databases {
    let dbs = Databases::of(store).expect("these cases run on a storage over several databases");
    assert!(dbs.map().count() >= 2, "at least two databases");
    dbs
}

/// The application's placement over the store's databases.
fn placement<S: Storage>(store: &S) -> Arc<dyn ShardStrategy> {
    DatabaseStrategy::over(Arc::new(StableHashStrategy::new()), store)
}

/// A command to `account/<id>` in its shard among `count`.
fn placed(strategy: &Arc<dyn ShardStrategy>, count: u32, id: &str, signal: &str) -> InboxWrite {
    command(strategy.shard_of("account", id, count).0, id, signal)
}

/// Seqs are unique across the databases and follow insertion order within each; a shard's
/// page is in insertion order; events are read once each, in one fixed merged order, however
/// they are paged.
pub async fn several_databases_keep_seq_order_per_database<S: Storage + Inspect>(store: S) {
    let map = several(&store).map();
    store.claim_shard_count(SHARDS).await.expect("claim");
    let strategy = placement(&store);
    let ids: Vec<String> = (0..24).map(|i| format!("a{i}")).collect();
    for round in 0..3 {
        let writes = ids
            .iter()
            .map(|id| placed(&strategy, SHARDS, id, &format!("{id}-{round}")))
            .collect();
        let mut batch = messages(writes);
        batch.events = vec![event(&format!("e{round}"), "Opened", secs(round))];
        store.write(batch).await.expect("write");
    }
    let rows = store.rows().await.expect("rows");
    assert_eq!(rows.len(), 72);
    let seqs: BTreeSet<i64> = rows.iter().map(|r| r.seq).collect();
    assert_eq!(seqs.len(), 72, "seqs are unique across databases");
    let databases: BTreeSet<u32> = rows.iter().map(|r| map.database_of(r.shard)).collect();
    assert_eq!(
        databases.len() as u32,
        map.count(),
        "every database has rows"
    );
    for d in 0..map.count() {
        let round_of = |r: &&shardbox_core::InboxMessage| {
            r.message.signal_id.0.rsplit('-').next().unwrap().to_owned()
        };
        let mine: Vec<String> = rows
            .iter()
            .filter(|r| map.database_of(r.shard) == d)
            .map(|r| round_of(&r))
            .collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted, "database {d}: seq follows insertion order");
    }
    for shard in 0..SHARDS {
        let page = store
            .read_page(ShardIndex(shard), t0(), 100)
            .await
            .expect("page");
        assert!(page.messages.iter().all(|m| m.shard == ShardIndex(shard)));
        let per_target: BTreeMap<&str, Vec<&str>> =
            page.messages.iter().fold(BTreeMap::new(), |mut acc, m| {
                acc.entry(m.message.target_id.as_str())
                    .or_default()
                    .push(m.message.signal_id.0.as_str());
                acc
            });
        for (target, signals) in per_target {
            let want: Vec<String> = (0..3).map(|r| format!("{target}-{r}")).collect();
            assert_eq!(
                signals, want,
                "shard {shard}: {target}'s rows in send order"
            );
        }
    }
    let all = store.read_events(0, &[], None, 100).await.expect("events");
    assert_eq!(all.len(), 3);
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = store.read_events(after, &[], None, 1).await.expect("page");
        let Some(last) = page.last() else { break };
        after = last.seq;
        paged.extend(page);
    }
    assert_eq!(paged, all, "one fixed merged order, however paged");
    assert_eq!(
        store.last_event_seq().await.expect("last"),
        all.last().unwrap().seq
    );
}

/// A stage's rows for another database are written in its fenced commit (a stage whose
/// lease was lost writes none), reach their shards only through the relays, in the order the
/// stage wrote them, once each however often the relays run; rows for its own database are
/// readable at once.
pub async fn several_databases_relay_a_stages_rows_in_order<S: Storage + Inspect>(store: S) {
    let dbs = several(&store);
    let map = dbs.map();
    store.claim_shard_count(SHARDS).await.expect("claim");
    let strategy = placement(&store);
    let find = |database: u32| {
        (0..)
            .map(|i| format!("t{i}"))
            .find(|id| map.database_of(strategy.shard_of("account", id, SHARDS)) == database)
            .unwrap()
    };
    let (near, far) = (find(0), find(1));
    let (near_shard, far_shard) = (
        strategy.shard_of("account", &near, SHARDS),
        strategy.shard_of("account", &far, SHARDS),
    );
    let stage_shard = (0..SHARDS)
        .find(|s| map.database_of(ShardIndex(*s)) == 0)
        .unwrap();
    let lease = pick(&store, stage_shard, "node-a", secs(1)).await;
    let mut commit = StageCommit::new(lease.clone(), secs(1), secs(30));
    commit.writes = messages(
        (0..10)
            .map(|i| placed(&strategy, SHARDS, &far, &format!("far-{i}")))
            .chain([placed(&strategy, SHARDS, &near, "near-0")])
            .collect(),
    );
    store.commit_stage(commit).await.expect("commit");
    let near_page = store
        .read_page(near_shard, secs(1), 100)
        .await
        .expect("near");
    assert_eq!(
        signals(&near_page.messages),
        ["near-0"],
        "its own database at once"
    );
    let far_page = store.read_page(far_shard, secs(1), 100).await.expect("far");
    assert!(
        far_page.messages.is_empty(),
        "another database's rows wait for the relay"
    );

    // A stage that lost its lease writes no outbox row.
    let taken = take_over(&store, stage_shard, "node-b").await;
    let mut stale = StageCommit::new(lease, secs(2), secs(30));
    stale.writes = messages(vec![placed(&strategy, SHARDS, &far, "stale")]);
    assert!(matches!(
        store.commit_stage(stale).await,
        Err(StorageError::LeaseLost { .. })
    ));
    store.release(&taken).await.expect("release");

    assert_eq!(dbs.drain_outboxes().await.expect("relay"), 10);
    assert_eq!(
        dbs.drain_outboxes().await.expect("again"),
        0,
        "nothing twice"
    );
    let round = dbs.relay_round().await;
    assert!(round.failed.is_empty() && !round.busy(), "{round:?}");
    let far_page = store.read_page(far_shard, secs(3), 100).await.expect("far");
    let want: Vec<String> = (0..10).map(|i| format!("far-{i}")).collect();
    assert_eq!(
        signals(&far_page.messages),
        want,
        "in the stage's order, once each"
    );
    assert!(far_page.messages.iter().all(|m| m.shard == far_shard));
}

/// Re-sharding switches every database's share: each row moves to its target's shard in the
/// new count, and stays in its database.
pub async fn several_databases_reshard_each_database<S: Storage + Inspect>(store: S) {
    let map = several(&store).map();
    store.claim_shard_count(SHARDS).await.expect("claim");
    let strategy = placement(&store);
    let ids: Vec<String> = (0..30).map(|i| format!("r{i}")).collect();
    let writes = ids
        .iter()
        .map(|id| placed(&strategy, SHARDS, id, &format!("{id}-1")))
        .collect();
    store.write(messages(writes)).await.expect("write");
    let before: BTreeMap<String, u32> = store
        .rows()
        .await
        .expect("rows")
        .iter()
        .map(|r| (r.message.target_id.clone(), map.database_of(r.shard)))
        .collect();
    let mut leases = Vec::new();
    for shard in 0..SHARDS {
        leases.push(pick(&store, shard, "operator", secs(1)).await);
    }
    let to = SHARDS + 3;
    let route_strategy = strategy.clone();
    store
        .reshard(ReshardSwitch {
            from: SHARDS,
            to,
            leases,
            route: Arc::new(move |kind: &str, id: &str| route_strategy.shard_of(kind, id, to)),
        })
        .await
        .expect("reshard");
    assert_eq!(store.recorded_shard_count().await.expect("count"), Some(to));
    for row in store.rows().await.expect("rows") {
        let id = &row.message.target_id;
        assert_eq!(row.shard, strategy.shard_of("account", id, to), "{id}");
        assert_eq!(
            map.database_of(row.shard),
            before[id],
            "{id} stays in its database"
        );
    }
    for shard in 0..to {
        pick(&store, shard, "node-a", secs(2)).await;
    }
}

/// A shard count that leaves a database without a shard is refused by name, and nothing is
/// recorded.
pub async fn several_databases_refuse_a_count_below_one_shard_each<S: Storage + Inspect>(store: S) {
    let n = several(&store).map().count();
    match store.claim_shard_count(n - 1).await {
        Err(e @ StorageError::Unsupported { .. }) => {
            assert!(
                e.to_string().contains(&format!("shard_count {}", n - 1)),
                "{e}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(store.recorded_shard_count().await.expect("count"), None);
    assert_eq!(store.claim_shard_count(n).await.expect("claim"), n);
}

/// A target's state and its events are kept in its own database, by the stage of its own
/// shard, and found there: states of targets of every database load together, and a source's
/// events read back in order.
pub async fn several_databases_find_targets_where_they_live<S: Storage + Inspect>(store: S) {
    let map = several(&store).map();
    store.claim_shard_count(SHARDS).await.expect("claim");
    let strategy = placement(&store);
    let ids: Vec<String> = (0..12).map(|i| format!("h{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let shard = strategy.shard_of("account", id, SHARDS);
        let lease = pick(&store, shard.0, "node-a", secs(1)).await;
        let mut commit = StageCommit::new(lease.clone(), secs(1), secs(30));
        commit.states = vec![state(key(id), Some(&format!("{{\"n\":{i}}}")))];
        commit.writes.events = (0..2)
            .map(|k| {
                let mut e = event(&format!("{id}-e{k}"), "Opened", secs(1));
                e.source.id = id.clone();
                e.tenant = String::new();
                e
            })
            .collect();
        store.commit_stage(commit).await.expect("commit");
        store.release(&lease).await.expect("release");
    }
    let databases: BTreeSet<u32> = ids
        .iter()
        .map(|id| map.database_of(strategy.shard_of("account", id, SHARDS)))
        .collect();
    assert_eq!(
        databases.len() as u32,
        map.count(),
        "targets in every database"
    );
    let keys: Vec<_> = ids.iter().map(|id| key(id)).collect();
    let states = store.load_states(&keys).await.expect("states");
    let found: BTreeSet<String> = states.iter().map(|s| s.key.id.clone()).collect();
    assert_eq!(found, ids.iter().cloned().collect(), "every state found");
    for id in &ids {
        let source = shardbox_core::EventSource {
            kind: "account".into(),
            id: id.clone(),
        };
        let events = store
            .read_source_events("", &source, 0, 10)
            .await
            .expect("source events");
        let got: Vec<&str> = events.iter().map(|e| e.event.id.0.as_str()).collect();
        assert_eq!(
            got,
            [format!("{id}-e0"), format!("{id}-e1")],
            "{id}'s stream"
        );
    }
}

/// Each database records its place in the list when the set claims its shard count; the
/// set is not itself a database of another set; a set that lists the same databases in
/// another order is refused by name before anything else is recorded.
pub async fn several_databases_record_their_places_and_refuse_another_order<
    S: Storage + Inspect,
>(
    store: S,
) {
    let dbs = several(&store);
    let n = dbs.map().count();
    store.claim_shard_count(SHARDS).await.expect("claim");
    for (d, db) in dbs.databases().iter().enumerate() {
        assert_eq!(
            db.recorded_database_place().await.expect("place"),
            Some(shardbox_core::storage::DatabasePlace {
                index: d as u32,
                of: n
            })
        );
    }
    assert_eq!(store.recorded_database_place().await.expect("set"), None);
    let mut reversed = dbs.databases().to_vec();
    reversed.reverse();
    let reordered = Databases::new(reversed).expect("a set");
    match shardbox_core::WorkRegistry::claim_shard_count(&reordered, SHARDS).await {
        Err(e @ StorageError::Unsupported { .. }) => {
            assert!(e.to_string().contains("same order"), "{e}");
        }
        other => panic!("another order must be refused, got {other:?}"),
    }
    assert_eq!(
        store.claim_shard_count(SHARDS).await.expect("again"),
        SHARDS
    );
}

//! Re-sharding cases: one announcement in force at a time, and no epoch handed out twice
//! across layouts.

use super::*;

/// A shard that a re-sharding to fewer shards dropped, and a later one made again, hands out
/// epochs above every epoch it handed out before, as every shard kept does; no lease of an
/// old layout matches a shard of the new one (issue 37: the dropped shards' epochs were
/// forgotten, and handed out a second time).
pub async fn a_shard_made_again_hands_out_no_epoch_twice<S: Storage + Inspect>(store: S) {
    store.claim_shard_count(4).await.expect("claim");
    // Every shard gets its row, then shard 3 runs ahead of the others.
    let mut handed_out = 0;
    for shard in [0, 1, 2, 3, 3, 3, 3, 3] {
        let lease = pick(&store, shard, "node-a", secs(1)).await;
        store.release(&lease).await.expect("release");
        handed_out = handed_out.max(lease.epoch.0);
    }
    let mut old_leases = Vec::new();
    for (from, to) in [(4, 2), (2, 4)] {
        let leases = hold_all(&store, from, secs(2)).await;
        old_leases.extend(leases.iter().cloned());
        handed_out = handed_out.max(leases.iter().map(|l| l.epoch.0).max().unwrap_or(0));
        store
            .reshard(ReshardSwitch {
                from,
                to,
                leases,
                route: route(to),
            })
            .await
            .unwrap_or_else(|e| panic!("switch {from} -> {to}: {e}"));
    }
    let pick_above = |shard: u32| {
        let store = &store;
        async move {
            let lease = pick(store, shard, "node-a", secs(3)).await;
            assert!(
                lease.epoch.0 > handed_out,
                "shard {shard} hands out epoch {}, not above the {handed_out} handed out before",
                lease.epoch
            );
        }
    };
    // The shards made again, then the shards kept, once no old lease matched them.
    pick_above(3).await;
    pick_above(2).await;
    for lease in old_leases.iter().filter(|l| l.shard.0 < 2) {
        assert!(
            store.renew(lease, secs(3)).await.is_err(),
            "the switch's lease of shard {} (epoch {}) matches no shard of the new layout",
            lease.shard,
            lease.epoch
        );
    }
    pick_above(0).await;
    pick_above(1).await;
}

/// One announcement is in force at a time: another operator's is returned until it runs out
/// or is withdrawn; withdrawing someone else's changes nothing; the layout shows it.
pub async fn one_reshard_announcement_is_in_force_at_a_time<S: Storage + Inspect>(store: S) {
    store.claim_shard_count(4).await.expect("claim");
    assert_eq!(store.layout().await.expect("layout").resharding, None);
    let a = ReshardAnnouncement {
        by: node("op-a"),
        to: 8,
        until: secs(10),
    };
    let b = ReshardAnnouncement {
        by: node("op-b"),
        to: 2,
        until: secs(20),
    };
    assert_eq!(store.announce_reshard(&a, secs(0)).await.expect("a"), a);
    assert_eq!(
        store.announce_reshard(&b, secs(5)).await.expect("b"),
        a,
        "a's is in force"
    );
    let renewed = ReshardAnnouncement {
        until: secs(15),
        ..a.clone()
    };
    assert_eq!(
        store
            .announce_reshard(&renewed, secs(5))
            .await
            .expect("renew"),
        renewed,
        "its operator renews it"
    );
    assert_eq!(
        store.layout().await.expect("layout").resharding,
        Some(renewed.clone())
    );
    store
        .withdraw_reshard(&node("op-b"))
        .await
        .expect("withdraw");
    assert_eq!(
        store.layout().await.expect("layout").resharding,
        Some(renewed),
        "withdrawing another's changes nothing"
    );
    assert_eq!(
        store.announce_reshard(&b, secs(16)).await.expect("b"),
        b,
        "a's ran out: b's is in force"
    );
    store
        .withdraw_reshard(&node("op-b"))
        .await
        .expect("withdraw");
    let layout = store.layout().await.expect("layout");
    assert_eq!((layout.shard_count, layout.resharding), (Some(4), None));
}

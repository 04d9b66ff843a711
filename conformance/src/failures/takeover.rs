//! Failure cases: a pick-up tells a take-over (a lease that ran out) from a free shard.

use super::*;

/// A pick-up says whether it took over a lease that expired without a release.
pub async fn pick_up_tells_a_takeover_from_a_free_shard<S: Storage + Inspect>(store: S) {
    let a = pick(&store, 6, "node-a", t0()).await;
    assert!(!a.taken_over, "never picked up before");
    store.release(&a).await.expect("release");
    let b = pick(&store, 6, "node-b", secs(1)).await;
    assert!(!b.taken_over, "released: free, not taken over");
    // node-b vanishes: its lease (until 31 s) runs out.
    let c = pick(&store, 6, "node-c", secs(31)).await;
    assert!(c.taken_over, "expired without a release");
    assert!(c.epoch > b.epoch);
    store.release(&c).await.expect("release");
    let d = pick(&store, 6, "node-a", secs(40)).await;
    assert!(!d.taken_over);
}

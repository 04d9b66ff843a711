//! Builders for the conformance cases: fixed times, messages, events, leases and commits.
//!
//! Times are whole milliseconds after a fixed instant, so that every backend stores them
//! exactly (the durable ones keep microseconds).

use chrono::{DateTime, Duration, Utc};
use shardbox_core::storage::{
    EntityKey, EntityStateWrite, RowChange, RowUpdate, StageCommit, WriteBatch,
};
use shardbox_core::{
    EventSource, InboxMessage, Lease, MessageKind, NewEvent, NewMessage, NodeId, ShardIndex,
    SignalId, Storage, WorkerId,
};
use shardbox_core::{InboxWrite, Metadata};

/// The shard count the cases address rows by when a call asks for one (no count is recorded
/// unless a case claims one, and then nothing is checked).
pub const SHARDS: u32 = 4;

/// The suite's epoch: 2023-11-14T22:13:20Z.
pub fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
}

/// `t0` plus `seconds`.
pub fn secs(seconds: i64) -> DateTime<Utc> {
    t0() + Duration::seconds(seconds)
}

/// `t0` plus `ms` milliseconds.
pub fn millis(ms: i64) -> DateTime<Utc> {
    t0() + Duration::milliseconds(ms)
}

/// A command for `account/<target_id>` in `shard`, signal `signal`, tenant "".
pub fn command(shard: u32, target_id: &str, signal: &str) -> InboxWrite {
    let mut metadata = Metadata::new();
    metadata.insert("trace".into(), format!("trace-{signal}"));
    InboxWrite {
        shard: ShardIndex(shard),
        message: NewMessage {
            signal_id: SignalId::from(signal),
            kind: MessageKind::Command,
            target_kind: "account".into(),
            target_id: target_id.into(),
            tenant: String::new(),
            payload: format!("{{\"signal\":\"{signal}\"}}").into_bytes(),
            payload_type: "AccountCommand".into(),
            payload_version: 1,
            metadata,
            received_at: t0(),
            deliver_after: None,
            expires_at: None,
        },
    }
}

/// `w` changed by `change`.
pub fn with(mut w: InboxWrite, change: impl FnOnce(&mut NewMessage)) -> InboxWrite {
    change(&mut w.message);
    w
}

/// A batch of messages only.
pub fn messages(messages: Vec<InboxWrite>) -> WriteBatch {
    WriteBatch {
        events: Vec::new(),
        messages,
    }
}

/// An event `id` of `event_type` that occurred at `occurred_at`.
pub fn event(id: &str, event_type: &str, occurred_at: DateTime<Utc>) -> NewEvent {
    let mut metadata = Metadata::new();
    metadata.insert("causation".into(), format!("cause-{id}"));
    NewEvent {
        id: SignalId::from(id),
        event_type: event_type.into(),
        source: EventSource {
            kind: "account".into(),
            id: format!("src-{id}"),
        },
        tenant: "tenant-1".into(),
        occurred_at,
        payload: format!("{{\"event\":\"{id}\"}}").into_bytes(),
        version: 1,
        metadata,
    }
}

/// A node id.
pub fn node(name: &str) -> NodeId {
    NodeId(name.into())
}

/// Picks up `shard` for `node_name` at `now` for 30 s; panics if refused.
pub async fn pick<S: Storage>(store: &S, shard: u32, node_name: &str, now: DateTime<Utc>) -> Lease {
    store
        .pick_up(
            ShardIndex(shard),
            &node(node_name),
            WorkerId(1),
            now,
            now + Duration::seconds(30),
        )
        .await
        .expect("pick_up failed")
        .unwrap_or_else(|| panic!("shard {shard} should be free for {node_name} at {now}"))
}

/// Takes `shard` over for `node_name`'s worker 2 at 31 s, until 61 s — after a lease that
/// [`pick`] gave at [`t0`] has expired; panics if refused.
pub async fn take_over<S: Storage>(store: &S, shard: u32, node_name: &str) -> Lease {
    store
        .pick_up(
            ShardIndex(shard),
            &node(node_name),
            WorkerId(2),
            secs(31),
            secs(61),
        )
        .await
        .expect("pick_up")
        .expect("the expired lease is free")
}

/// Writes commands `r1` (target `a`) and `r2` (target `b`) to shard 0 and `x1` (target `x`)
/// to shard 1, and picks shard 0 up for `node-a` at [`t0`]: the lease, shard 0's two rows and
/// shard 1's row.
pub async fn two_rows_and_one_elsewhere<S: Storage>(
    store: &S,
) -> (Lease, InboxMessage, InboxMessage, InboxMessage) {
    store
        .write(messages(vec![
            command(0, "a", "r1"),
            command(0, "b", "r2"),
            command(1, "x", "x1"),
        ]))
        .await
        .expect("write");
    let lease = pick(store, 0, "node-a", t0()).await;
    let page = store
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read");
    let other_shard = store
        .read_page(ShardIndex(1), t0(), 10)
        .await
        .expect("read");
    (
        lease,
        page.messages[0].clone(),
        page.messages[1].clone(),
        other_shard.messages[0].clone(),
    )
}

/// Asserts that no state of the targets `ids` (see [`key`]) is stored and no event appended.
pub async fn assert_no_state_nor_event<S: Storage>(store: &S, ids: &[&str]) {
    let keys: Vec<EntityKey> = ids.iter().map(|id| key(id)).collect();
    assert!(
        store.load_states(&keys).await.expect("load").is_empty(),
        "no state of {ids:?} stored"
    );
    assert_eq!(
        store.last_event_seq().await.expect("seq"),
        0,
        "no event appended"
    );
}

/// A commit of `updates` under `lease` at `now`, renewing the lease for 30 s, writing nothing
/// else.
pub fn stage(lease: &Lease, now: DateTime<Utc>, updates: Vec<RowUpdate>) -> StageCommit {
    let mut commit = StageCommit::new(lease.clone(), now, now + Duration::seconds(30));
    commit.updates = updates;
    commit
}

/// A commit under `lease` at `now` that delivers every one of `rows`, kept until `now`.
pub fn delivering(lease: &Lease, now: DateTime<Utc>, rows: &[InboxMessage]) -> StageCommit {
    stage(
        lease,
        now,
        rows.iter().map(|m| delivered(m.seq, now)).collect(),
    )
}

/// Row `seq` delivered, kept until `keep_until`.
pub fn delivered(seq: i64, keep_until: DateTime<Utc>) -> RowUpdate {
    RowUpdate {
        seq,
        change: RowChange::Delivered { keep_until },
    }
}

/// The key of `account/<id>` in tenant "".
pub fn key(id: &str) -> EntityKey {
    EntityKey {
        kind: "account".into(),
        tenant: String::new(),
        id: id.into(),
    }
}

/// A state write of `state` (or a delete) for `key`.
pub fn state(key: EntityKey, state: Option<&str>) -> EntityStateWrite {
    EntityStateWrite {
        key,
        state: state.map(|s| s.as_bytes().to_vec()),
        state_version: 1,
    }
}

/// The `seq` of the row of `signal` among `rows` (a page read); panics if it is not there.
pub fn seq_of(rows: &[InboxMessage], signal: &str) -> i64 {
    rows.iter()
        .find(|m| m.message.signal_id.0 == signal)
        .map(|m| m.seq)
        .expect("row of the page")
}

/// The signal ids of `rows`, in order.
pub fn signals(rows: &[InboxMessage]) -> Vec<String> {
    rows.iter().map(|r| r.message.signal_id.0.clone()).collect()
}

/// The store's `seq` of each stored event among `ids`, by id.
pub async fn event_seqs_by_id<S: shardbox_core::EventStore + ?Sized>(
    store: &S,
    ids: &[&str],
) -> std::collections::HashMap<String, i64> {
    store
        .event_seqs(&ids.iter().map(|n| (*n).into()).collect::<Vec<_>>())
        .await
        .expect("seqs")
        .into_iter()
        .map(|(id, seq)| (id.0, seq))
        .collect()
}

/// Commits `updates` at `now` under a fresh pick-up of `shard` by `node-a` and releases it.
pub async fn commit_at<S: Storage>(
    store: &S,
    shard: u32,
    now: DateTime<Utc>,
    updates: Vec<RowUpdate>,
) {
    let lease = pick(store, shard, "node-a", now).await;
    store
        .commit_stage(stage(&lease, now, updates))
        .await
        .expect("commit");
    store.release(&lease).await.expect("release");
}

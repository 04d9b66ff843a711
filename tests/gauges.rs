//! The gauges a running node sets through the `metrics` facade, read from a seeded SQLite
//! database into a recorder of the test's own: inbox depth per state, lag per shard and
//! overall, leases held, dead letters, blocked targets; and a help text for every metric.

mod common;

use metrics::{
    Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use serde::{Deserialize, Serialize};
use shardbox::core::{
    describe_metrics, publish_kind_controls, GaugeSample, KindControls, NodeId, ShardIndex,
    WorkerId,
};
use shardbox::prelude::*;
use shardbox::{Backoff, ExhaustedOutcome, FailurePolicy, StorageReads};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the recorder saw: gauges by `name{label=value,…}`, and the described names.
#[derive(Default)]
struct Seen {
    gauges: Mutex<BTreeMap<String, f64>>,
    described: Mutex<BTreeSet<String>>,
}

struct GaugeCell {
    key: String,
    seen: Arc<Seen>,
}

impl GaugeFn for GaugeCell {
    fn increment(&self, value: f64) {
        *self
            .seen
            .gauges
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default() += value;
    }
    fn decrement(&self, value: f64) {
        self.increment(-value);
    }
    fn set(&self, value: f64) {
        self.seen
            .gauges
            .lock()
            .unwrap()
            .insert(self.key.clone(), value);
    }
}

struct TestRecorder(Arc<Seen>);

impl TestRecorder {
    fn describe(&self, key: KeyName, help: SharedString) {
        assert!(!help.is_empty(), "{} has a help text", key.as_str());
        self.0
            .described
            .lock()
            .unwrap()
            .insert(key.as_str().to_owned());
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, help: SharedString) {
        self.describe(key, help);
    }
    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, help: SharedString) {
        self.describe(key, help);
    }
    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, help: SharedString) {
        self.describe(key, help);
    }
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut labels: Vec<String> = key
            .labels()
            .filter(|l| l.key() != "node")
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        Gauge::from_arc(Arc::new(GaugeCell {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            seen: self.0.clone(),
        }))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Cmd {
    Ok,
    Poison,
}
impl Message for Cmd {
    const TYPE: &'static str = "gauges-test.cmd";
}
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Done;
impl Message for Done {
    const TYPE: &'static str = "gauges-test.done";
}

macro_rules! kind {
    ($name:ident, $kind:literal) => {
        #[derive(Debug, Default, Serialize, Deserialize)]
        struct $name;
        impl Aggregate for $name {
            const KIND: &'static str = $kind;
            type Command = Cmd;
            type Event = Done;
            async fn handle(&self, c: &Cmd, _: &Context<'_>) -> Result<Vec<Done>, HandlerError> {
                match c {
                    Cmd::Ok => Ok(vec![Done]),
                    Cmd::Poison => Err(HandlerError::new("poison pill")),
                }
            }
            fn apply(&mut self, _: &Done) {}
        }
    };
}
kind!(Ledger, "ledger");
kind!(Vault, "vault");

fn once(outcome: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy::new(1, Backoff::Fixed(Duration::from_secs(1)), outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gauges_show_a_seeded_database() {
    let (storage, _dir) = common::sqlite().await;
    let node = NodeId("gauges-node".into());
    let sb = Shardbox::builder()
        .shared_storage(storage.clone())
        .shards(4)
        .node_id(node.clone())
        .kind_policy(Ledger::KIND, once(ExhaustedOutcome::DeadLetter))
        .kind_policy(Vault::KIND, once(ExhaustedOutcome::Block))
        .aggregate::<Ledger>()
        .aggregate::<Vault>()
        .build()
        .await
        .expect("build");
    // ledger/l-1 dead-lettered; vault/v-1 blocked with one message parked behind it;
    // ledger/l-2 delayed by an hour; ledger/l-3 due.
    sb.send::<Ledger>("l-1", &Cmd::Poison).await.expect("send");
    sb.send::<Vault>("v-1", &Cmd::Poison).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    sb.send::<Vault>("v-1", &Cmd::Ok).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    sb.send_with::<Ledger>(
        "l-2",
        &Cmd::Ok,
        SendOptions::default().delay(Duration::from_secs(3600)),
    )
    .await
    .expect("send");
    sb.send::<Ledger>("l-3", &Cmd::Ok).await.expect("send");
    // The node holds one lease (another node's would not count).
    let now = chrono::Utc::now();
    let lease_until = now + chrono::TimeDelta::minutes(1);
    storage
        .pick_up(ShardIndex(2), &node, WorkerId(0), now, lease_until)
        .await
        .expect("pick up")
        .expect("free");
    storage
        .pick_up(
            ShardIndex(3),
            &NodeId("other".into()),
            WorkerId(0),
            now,
            lease_until,
        )
        .await
        .expect("pick up")
        .expect("free");

    // Read ten seconds later: ledger/l-3 has waited that long.
    let later = now + chrono::TimeDelta::seconds(10);
    let sample = GaugeSample::read(&StorageReads::new(storage.clone()), &node, 4, later)
        .await
        .expect("read");
    // One kind paused, one paused and resumed: 1 and 0.
    sb.pause_kind(Ledger::KIND).await.expect("pause");
    sb.pause_kind(Vault::KIND).await.expect("pause");
    sb.resume_kind(Vault::KIND).await.expect("resume");
    let kinds = KindControls::new(sb.kind_controls().await.expect("controls"));
    let seen = Arc::new(Seen::default());
    metrics::with_local_recorder(&TestRecorder(seen.clone()), || {
        describe_metrics();
        sample.publish(&node);
        publish_kind_controls(&kinds, &node);
    });

    let gauges = seen.gauges.lock().unwrap().clone();
    let gauge = |key: &str| -> f64 {
        *gauges
            .get(key)
            .unwrap_or_else(|| panic!("{key} is set: {gauges:#?}"))
    };
    assert_eq!(gauge("shardbox_inbox_depth{state=due}"), 1.0, "ledger/l-3");
    assert_eq!(
        gauge("shardbox_inbox_depth{state=delayed}"),
        1.0,
        "ledger/l-2"
    );
    assert_eq!(
        gauge("shardbox_inbox_depth{state=parked}"),
        1.0,
        "behind v-1"
    );
    assert_eq!(gauge("shardbox_inbox_depth{state=blocked}"), 1.0);
    assert_eq!(gauge("shardbox_inbox_depth{state=retrying}"), 0.0);
    assert_eq!(gauge("shardbox_dead_letters{}"), 1.0);
    assert_eq!(gauge("shardbox_blocked_targets{}"), 1.0);
    assert_eq!(
        gauge("shardbox_leases_held{}"),
        1.0,
        "shard 2, not other's 3"
    );
    assert_eq!(gauge("shardbox_catch_ups_running{}"), 0.0);
    assert_eq!(gauge("shardbox_kind_paused{kind=ledger}"), 1.0);
    assert_eq!(gauge("shardbox_kind_paused{kind=vault}"), 0.0, "resumed");
    let lag = gauge("shardbox_lag_seconds{}");
    assert!((10.0..60.0).contains(&lag), "l-3 waited 10 s: {lag}");
    let lagging: Vec<f64> = (0..4)
        .map(|s| gauge(&format!("shardbox_shard_lag_seconds{{shard={s}}}")))
        .filter(|l| *l > 0.0)
        .collect();
    assert_eq!(lagging, vec![lag], "one shard lags: l-3's");

    let described = seen.described.lock().unwrap().clone();
    for name in gauges
        .keys()
        .map(|k| k.split('{').next().unwrap_or_default())
    {
        assert!(described.contains(name), "{name} is described");
    }
    for name in [
        "shardbox_delivered_total",
        "shardbox_dead_lettered_total",
        "shardbox_lease_losses_total",
        "shardbox_stage_seconds",
    ] {
        assert!(described.contains(name), "{name} is described");
    }
    assert_eq!(described.len(), 31, "20 counters, 10 gauges, 1 histogram");
}

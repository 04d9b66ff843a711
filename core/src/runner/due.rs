//! Timers that wake a shard when its next delayed row becomes due.
//!
//! ```text
//!  worker leaves shard S ─► t = next due (the last page read's, or an earlier retry or
//!                            hold its own stages wrote after it) ─► DueTimers::schedule(S, t)
//!                                                 │ one timer per shard, the earliest wins
//!                            at t (by the delivery's clock) ─► DeliveryEnv::notify([S])
//!                                                 ─► the runner's observer wakes a worker
//! ```
//!
//! Without it a scheduled message, a retry or a held row would wait for the next poll, up to
//! `poll_interval` late. The timers only notify: whoever observes writes (the node runner)
//! decides whether and where the shard is served, exactly as for a local write. They are
//! bounded by the shard count and cancelled when the delivery is asked to stop.

use crate::model::ids::ShardIndex;
use crate::sync::lock;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Longest single sleep: a timer re-reads the clock at least this often, so that a clock
/// that jumps (a test's manual clock, a corrected system clock) is followed.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Whom a timer wakes: the clock it follows and where it says that a shard is due (the
/// delivery environment, which forgets the timer and tells the shard's observers).
pub(crate) trait DueSink: Send + Sync + 'static {
    /// The delivery's time.
    fn now(&self) -> DateTime<Utc>;
    /// The timer of `shard` set for `at` fired.
    fn due(&self, shard: ShardIndex, at: DateTime<Utc>);
}

/// A pending wake-up: when, and the task that will do it.
type Timer = (DateTime<Utc>, JoinHandle<()>);

/// At most one pending wake-up per shard.
#[derive(Default)]
pub(crate) struct DueTimers {
    timers: Mutex<HashMap<ShardIndex, Timer>>,
}

impl DueTimers {
    fn lock(&self) -> MutexGuard<'_, HashMap<ShardIndex, Timer>> {
        // Each critical section is one map operation: a panic cannot leave it half done.
        lock(&self.timers)
    }

    /// Wakes `shard` at `at`, unless a timer for it fires no later. Needs a tokio runtime
    /// (does nothing outside one).
    pub(crate) fn schedule<S: DueSink>(&self, sink: &Arc<S>, shard: ShardIndex, at: DateTime<Utc>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut timers = self.lock();
        if let Some((pending, task)) = timers.get(&shard) {
            if *pending <= at && !task.is_finished() {
                return;
            }
            task.abort();
        }
        let weak: Weak<dyn DueSink> = Arc::downgrade(sink) as Weak<dyn DueSink>;
        // In the caller's span (the worker's): the timer's log line names the node.
        let task = runtime.spawn(fire(weak, shard, at).in_current_span());
        timers.insert(shard, (at, task));
    }

    /// Cancels every pending wake-up (the delivery stops).
    pub(crate) fn cancel_all(&self) {
        for (_, (_, task)) in self.lock().drain() {
            task.abort();
        }
    }

    /// Forgets the timer of `shard` if it is the one due at `at` (it fired).
    pub(crate) fn fired(&self, shard: ShardIndex, at: DateTime<Utc>) {
        let mut timers = self.lock();
        if timers
            .get(&shard)
            .is_some_and(|(pending, _)| *pending == at)
        {
            timers.remove(&shard);
        }
    }

    /// The pending wake-ups, by shard (for tests).
    #[cfg(test)]
    fn pending(&self) -> Vec<(ShardIndex, DateTime<Utc>)> {
        let mut v: Vec<_> = self.lock().iter().map(|(s, (at, _))| (*s, *at)).collect();
        v.sort();
        v
    }
}

async fn fire(sink: Weak<dyn DueSink>, shard: ShardIndex, at: DateTime<Utc>) {
    loop {
        let Some(strong) = sink.upgrade() else { return };
        let left = (at - strong.now()).to_std().unwrap_or(Duration::ZERO);
        drop(strong);
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(MAX_SLEEP)).await;
    }
    if let Some(sink) = sink.upgrade() {
        tracing::trace!(%shard, %at, "delayed rows due: waking the shard");
        sink.due(shard, at);
    }
}

#[cfg(test)]
mod tests {
    use crate::entity::registry::EntityRegistry;
    use crate::memory::MemoryStorage;
    use crate::model::clock::ManualClock;
    use crate::model::config::DeliveryConfig;
    use crate::model::ids::ShardIndex;
    use crate::model::strategy::StableHashStrategy;
    use crate::runner::env::DeliveryEnv;
    use crate::storage::observer::ShardObserver;
    use crate::telemetry::monitor::NoopMonitor;
    use chrono::{DateTime, Utc};
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Woken(Mutex<Vec<ShardIndex>>);

    impl ShardObserver for Woken {
        fn on_write(&self, shards: &[ShardIndex]) {
            self.0.lock().unwrap().extend_from_slice(shards);
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    fn env(clock: Arc<ManualClock>) -> (Arc<DeliveryEnv>, Arc<Woken>) {
        let env = Arc::new(DeliveryEnv::new(
            Arc::new(EntityRegistry::new(Arc::new(StableHashStrategy::new()), 4)),
            Arc::new(MemoryStorage::new()),
            DeliveryConfig::builder().shard_count(4).build().unwrap(),
            Arc::new(NoopMonitor),
            clock,
        ));
        let woken = Arc::new(Woken::default());
        env.observe(woken.clone());
        (env, woken)
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_is_woken_when_its_row_is_due_and_not_before() {
        let clock = Arc::new(ManualClock::new(t0()));
        let (env, woken) = env(clock.clone());
        let at = t0() + chrono::Duration::seconds(30);
        env.due_timers.schedule(&env, ShardIndex(2), at);
        // A later time for the same shard does not replace the earlier timer.
        env.due_timers
            .schedule(&env, ShardIndex(2), at + chrono::Duration::seconds(5));
        assert_eq!(env.due_timers.pending(), vec![(ShardIndex(2), at)]);

        tokio::time::sleep(std::time::Duration::from_secs(29)).await;
        clock.advance(chrono::Duration::seconds(29));
        assert!(woken.0.lock().unwrap().is_empty(), "not before it is due");

        clock.advance(chrono::Duration::seconds(1));
        tokio::time::sleep(std::time::Duration::from_millis(1_001)).await;
        assert_eq!(*woken.0.lock().unwrap(), vec![ShardIndex(2)]);
        assert!(
            env.due_timers.pending().is_empty(),
            "a fired timer is forgotten"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_time_replaces_the_timer_and_stop_cancels_all() {
        let clock = Arc::new(ManualClock::new(t0()));
        let (env, woken) = env(clock.clone());
        env.due_timers
            .schedule(&env, ShardIndex(1), t0() + chrono::Duration::seconds(60));
        env.due_timers
            .schedule(&env, ShardIndex(1), t0() + chrono::Duration::seconds(10));
        env.due_timers
            .schedule(&env, ShardIndex(3), t0() + chrono::Duration::seconds(20));
        assert_eq!(
            env.due_timers.pending(),
            vec![
                (ShardIndex(1), t0() + chrono::Duration::seconds(10)),
                (ShardIndex(3), t0() + chrono::Duration::seconds(20)),
            ]
        );
        clock.advance(chrono::Duration::seconds(10));
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        assert_eq!(*woken.0.lock().unwrap(), vec![ShardIndex(1)]);
        env.request_stop();
        clock.advance(chrono::Duration::seconds(60));
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        assert_eq!(
            *woken.0.lock().unwrap(),
            vec![ShardIndex(1)],
            "cancelled timers never fire"
        );
    }
}

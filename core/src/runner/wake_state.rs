//! Which shards need a worker: a small state machine per shard, so that a burst of writes to
//! one shard queues it once, and a write that arrives while the shard is being served makes
//! the serving worker look again instead of being lost.
//!
//! ```text
//!          wake                start              finish (not dirty)
//!   Idle ───────► Queued ─────────────► Running ──────────────────► Idle
//!                   ▲                      │ wake
//!                   │  finish (dirty)      ▼
//!                   └──────────────── RunningDirty
//!
//!   Running / RunningDirty ── finish_held_elsewhere ──► Idle   (another node holds the shard)
//! ```

use crate::model::ids::ShardIndex;
use crate::sync::lock;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WakeState {
    Idle,
    Queued,
    Running,
    RunningDirty,
}

/// The wake-up state of every shard of a node.
#[derive(Debug)]
pub struct ShardWakeState {
    states: Mutex<Vec<WakeState>>,
}

impl ShardWakeState {
    /// All `shard_count` shards idle.
    pub fn new(shard_count: u32) -> Self {
        ShardWakeState {
            states: Mutex::new(vec![WakeState::Idle; shard_count as usize]),
        }
    }

    /// Makes room for shards up to `shard_count` (the Inbox was re-sharded to more); the new
    /// ones are idle. Never shrinks: shards beyond the count are never woken again.
    pub fn grow_to(&self, shard_count: u32) {
        let mut states = lock(&self.states);
        if states.len() < shard_count as usize {
            states.resize(shard_count as usize, WakeState::Idle);
        }
    }

    fn with<R>(&self, shard: ShardIndex, f: impl FnOnce(&mut WakeState) -> R) -> Option<R> {
        let mut states = lock(&self.states);
        states.get_mut(shard.0 as usize).map(f)
    }

    /// The shard has work. Returns true when the caller must put it on the queue.
    pub fn wake(&self, shard: ShardIndex) -> bool {
        self.with(shard, |s| match *s {
            WakeState::Idle => {
                *s = WakeState::Queued;
                true
            }
            WakeState::Running => {
                *s = WakeState::RunningDirty;
                false
            }
            WakeState::Queued | WakeState::RunningDirty => false,
        })
        .unwrap_or(false)
    }

    /// A worker took the shard off the queue. Returns false if it is not queued (stale).
    pub fn start(&self, shard: ShardIndex) -> bool {
        self.with(shard, |s| {
            if *s == WakeState::Queued {
                *s = WakeState::Running;
                true
            } else {
                false
            }
        })
        .unwrap_or(false)
    }

    /// The worker is done with the shard. Returns true when the caller must queue it again
    /// (it was woken while running).
    pub fn finish(&self, shard: ShardIndex) -> bool {
        self.with(shard, |s| match *s {
            WakeState::RunningDirty => {
                *s = WakeState::Queued;
                true
            }
            _ => {
                *s = WakeState::Idle;
                false
            }
        })
        .unwrap_or(false)
    }

    /// The worker found the shard held by another node and leaves it to that node: back to
    /// idle, forgetting wakes that came meanwhile (the holder hears the same writes).
    pub fn finish_held_elsewhere(&self, shard: ShardIndex) {
        self.with(shard, |s| *s = WakeState::Idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: ShardIndex = ShardIndex(1);

    #[test]
    fn a_burst_of_wakes_queues_once() {
        let w = ShardWakeState::new(4);
        assert!(w.wake(S));
        assert!(!w.wake(S));
        assert!(!w.wake(S));
        assert!(w.start(S));
        assert!(!w.start(S), "a stale queue entry is skipped");
        assert!(!w.finish(S));
        assert!(w.wake(S), "idle again after finish");
    }

    #[test]
    fn a_wake_while_running_requeues_after_finish() {
        let w = ShardWakeState::new(4);
        assert!(w.wake(S));
        assert!(w.start(S));
        assert!(!w.wake(S), "running: not queued twice");
        assert!(w.finish(S), "woken while running: queue again");
        assert!(w.start(S));
        assert!(!w.finish(S));
    }

    #[test]
    fn a_shard_left_to_its_holder_forgets_wakes_that_came_meanwhile() {
        let w = ShardWakeState::new(4);
        assert!(w.wake(S));
        assert!(w.start(S));
        assert!(!w.wake(S));
        w.finish_held_elsewhere(S);
        assert!(!w.start(S), "not queued: the dirty wake was dropped");
        assert!(w.wake(S), "idle: the next wake queues it");
    }

    #[test]
    fn unknown_shards_are_ignored() {
        let w = ShardWakeState::new(2);
        assert!(!w.wake(ShardIndex(7)));
        assert!(!w.start(ShardIndex(7)));
        assert!(!w.finish(ShardIndex(7)));
    }
}

//! [`KindGate`]: the limits of one entity kind's handler calls on a node — at most N at once,
//! at most R started per second — waited for before each call, outside its timeout.
//!
//! ```text
//!  call ─► rate: take the next free start slot (slots 1/R apart), sleep until it
//!       ─► concurrency: wait until fewer than N calls of the kind run, then run
//!       ─► the pass is dropped when the call ends: the next waiting call may start
//! ```
//!
//! A call waits where it stands: its target's later messages are behind it in the same batch
//! (one target's messages run one after another), so a limit delays a target, never reorders
//! it. The limits can change while calls wait ([`KindGate::set_limits`]): a lower concurrency
//! lets no new call start until the running ones are under it; a new rate applies from the
//! next slot taken.

use crate::sync::lock;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The limits of one kind's calls on this node (see the module docs).
#[derive(Debug)]
pub struct KindGate {
    state: Mutex<GateState>,
    /// Woken when a call ends or the limits change.
    freed: Notify,
}

#[derive(Debug)]
struct GateState {
    max_concurrent: Option<u32>,
    /// Seconds between two call starts (1 / this node's rate), if rate-limited.
    spacing: Option<Duration>,
    running: u32,
    /// The earliest start of the next rate slot.
    next_slot: Option<Instant>,
}

/// A call's right to run under a [`KindGate`]: dropping it lets the next call start.
#[derive(Debug)]
pub struct GatePass<'a> {
    gate: &'a KindGate,
}

impl Drop for GatePass<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.gate.state);
        state.running = state.running.saturating_sub(1);
        drop(state);
        self.gate.freed.notify_waiters();
    }
}

impl KindGate {
    /// A gate letting at most `max_concurrent` calls run at once and at most `rate_per_second`
    /// start per second (each `None`: no limit of that sort).
    pub fn new(max_concurrent: Option<u32>, rate_per_second: Option<f64>) -> Self {
        KindGate {
            state: Mutex::new(GateState {
                max_concurrent,
                spacing: spacing(rate_per_second),
                running: 0,
                next_slot: None,
            }),
            freed: Notify::new(),
        }
    }

    /// Changes the limits; calls waiting see them at once.
    pub fn set_limits(&self, max_concurrent: Option<u32>, rate_per_second: Option<f64>) {
        let mut state = lock(&self.state);
        state.max_concurrent = max_concurrent;
        state.spacing = spacing(rate_per_second);
        drop(state);
        self.freed.notify_waiters();
    }

    /// Calls running under the gate now.
    pub fn running(&self) -> u32 {
        lock(&self.state).running
    }

    /// Waits for this call's start slot and for room under the concurrency limit.
    pub async fn enter(&self) -> GatePass<'_> {
        let slot = {
            let mut state = lock(&self.state);
            state.spacing.map(|spacing| {
                let now = Instant::now();
                let slot = state.next_slot.map_or(now, |next| next.max(now));
                state.next_slot = Some(slot + spacing);
                slot
            })
        };
        if let Some(slot) = slot {
            tokio::time::sleep_until(slot).await;
        }
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so that a call ending between the check and the
            // wait still wakes this one.
            freed.as_mut().enable();
            {
                let mut state = lock(&self.state);
                if state.max_concurrent.is_none_or(|max| state.running < max) {
                    state.running += 1;
                    return GatePass { gate: self };
                }
            }
            freed.await;
        }
    }
}

fn spacing(rate_per_second: Option<f64>) -> Option<Duration> {
    rate_per_second
        .filter(|r| r.is_finite() && *r > 0.0)
        .map(|r| Duration::from_secs_f64(1.0 / r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn never_more_calls_than_the_limit_run_at_once() {
        let gate = Arc::new(KindGate::new(Some(3), None));
        let peak = Arc::new(AtomicU32::new(0));
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let (gate, peak) = (gate.clone(), peak.clone());
            calls.spawn(async move {
                let _pass = gate.enter().await;
                peak.fetch_max(gate.running(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            });
        }
        while calls.join_next().await.is_some() {}
        assert_eq!(peak.load(Ordering::SeqCst), 3);
        assert_eq!(gate.running(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_start_at_the_rate_evenly_spaced() {
        let gate = KindGate::new(None, Some(20.0));
        let start = Instant::now();
        let mut starts = Vec::new();
        for _ in 0..5 {
            let _pass = gate.enter().await;
            starts.push(start.elapsed());
        }
        let millis: Vec<u128> = starts.iter().map(|d| d.as_millis()).collect();
        assert_eq!(millis, [0, 50, 100, 150, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lower_limit_holds_new_calls_until_the_running_ones_are_under_it() {
        let gate = Arc::new(KindGate::new(Some(2), None));
        let a = gate.enter().await;
        let b = gate.enter().await;
        gate.set_limits(Some(1), None);
        drop(a);
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _pass = gate.enter().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !waiting.is_finished(),
            "a call started with 1 running under a limit of 1"
        );
        drop(b);
        waiting.await.unwrap();
        gate.set_limits(None, None);
        let _c = gate.enter().await;
        let _d = gate.enter().await;
        assert_eq!(gate.running(), 2);
    }
}

//! What a run does besides the traffic, at fixed fractions of it: node restarts at 25 %, 60 %
//! and 85 %, one re-sharding to twice the shards at 45 %, and a catch-up of ten view ids every
//! tenth of the run (one at a time); and what came of them.

use super::fleet::Fleet;
use super::mix;
use super::model::View;
use crate::args::Args;
use shardbox::prelude::*;
use shardbox::ReshardReport;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The run's events, each started when its time comes and collected when it ends.
pub(super) struct Events {
    /// The shard count the nodes restart with: the re-sharding's target once it is done.
    shards: Arc<AtomicU32>,
    reshard: Option<JoinHandle<Result<ReshardReport, String>>>,
    /// Re-shardings that ended (at most one).
    pub(super) resharded: u64,
    catching_up: Option<JoinHandle<Result<bool, String>>>,
    /// Catch-ups that completed, and those that did not.
    pub(super) catch_ups: u64,
    pub(super) catch_up_failures: u64,
    catch_up_k: usize,
    restart_k: usize,
}

impl Events {
    pub(super) fn new(shards: u32) -> Self {
        Events {
            shards: Arc::new(AtomicU32::new(shards)),
            reshard: None,
            resharded: 0,
            catching_up: None,
            catch_ups: 0,
            catch_up_failures: 0,
            catch_up_k: 0,
            restart_k: 0,
        }
    }

    /// At `frac` of the run: every event whose time came is started or collected, each
    /// noted in `note`.
    pub(super) async fn at(
        &mut self,
        frac: f64,
        a: &Args,
        producer: &Shardbox,
        fleet: &mut Fleet,
        note: &mut Vec<String>,
    ) {
        self.restart_if_due(frac, a, fleet, note).await;
        self.reshard_if_due(frac, a, producer, note);
        self.collect_reshard(note).await;
        self.collect_catch_up(note).await;
        self.catch_up_if_due(frac, a, producer, note);
    }

    /// Node restarts at a quarter, 60 % and 85 % of the run.
    async fn restart_if_due(
        &mut self,
        frac: f64,
        a: &Args,
        fleet: &mut Fleet,
        note: &mut Vec<String>,
    ) {
        if self.restart_k < 3 && frac >= [0.25, 0.60, 0.85][self.restart_k] {
            let shards_now = self.shards.load(Ordering::SeqCst);
            match fleet
                .restart(self.restart_k, Duration::from_secs(2), shards_now)
                .await
            {
                Ok(()) => note.push(format!("restart node {}", self.restart_k % a.nodes)),
                Err(e) => note.push(format!("restart failed: {e}")),
            }
            self.restart_k += 1;
        }
    }

    /// One re-sharding to twice the shards at 45 %, in a task of its own.
    fn reshard_if_due(&mut self, frac: f64, a: &Args, producer: &Shardbox, note: &mut Vec<String>) {
        if self.reshard.is_none() && frac >= 0.45 {
            let (sb, shards, to) = (producer.clone(), self.shards.clone(), a.shards * 2);
            self.reshard = Some(tokio::spawn(async move {
                let r = sb.reshard(to).await.map_err(|e| e.to_string())?;
                shards.store(to, Ordering::SeqCst);
                Ok::<_, String>(r)
            }));
            note.push(format!("reshard {} -> {} started", a.shards, a.shards * 2));
        }
    }

    /// The re-sharding's outcome, once it finished.
    async fn collect_reshard(&mut self, note: &mut Vec<String>) {
        if let Some(task) = self
            .reshard
            .as_mut()
            .filter(|t| t.is_finished() && self.resharded == 0)
        {
            match task.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(r) => note.push(format!(
                    "resharded: {} rows moved, switch {:.0} ms",
                    r.moves.inbox_moved,
                    r.switched_in.as_secs_f64() * 1e3
                )),
                Err(e) => note.push(format!("reshard failed: {e}")),
            }
            self.resharded = 1;
        }
    }

    /// The running catch-up's outcome, once it finished.
    async fn collect_catch_up(&mut self, note: &mut Vec<String>) {
        if self.catching_up.as_ref().is_some_and(|c| c.is_finished()) {
            if let Some(c) = self.catching_up.take() {
                match c.await.map_err(|e| e.to_string()).and_then(|r| r) {
                    Ok(true) => self.catch_ups += 1,
                    Ok(false) => self.catch_up_failures += 1,
                    Err(e) => {
                        self.catch_up_failures += 1;
                        note.push(format!("catch-up failed: {e}"));
                    }
                }
            }
        }
    }

    /// A catch-up of ten view ids every tenth of the run, one at a time.
    fn catch_up_if_due(
        &mut self,
        frac: f64,
        a: &Args,
        producer: &Shardbox,
        note: &mut Vec<String>,
    ) {
        if self.catching_up.is_none() && frac >= 0.1 * (self.catch_up_k + 1) as f64 && frac < 0.95 {
            self.catching_up = Some(tokio::spawn(catch_up(
                producer.clone(),
                self.catch_up_k,
                a.targets,
            )));
            note.push(format!("catch-up {}", self.catch_up_k + 1));
            self.catch_up_k += 1;
        }
    }

    /// After the traffic: the running catch-up and the re-sharding awaited.
    pub(super) async fn finish(&mut self) -> Result<(), String> {
        if let Some(c) = self.catching_up.take() {
            match c.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(true) => self.catch_ups += 1,
                _ => self.catch_up_failures += 1,
            }
        }
        if let Some(task) = self.reshard.take().filter(|_| self.resharded == 0) {
            task.await.map_err(|e| e.to_string())??;
        }
        Ok(())
    }
}

/// A catch-up of ten view ids (the `k`-th ten), awaited: whether it completed.
async fn catch_up(sb: Shardbox, k: usize, targets: usize) -> Result<bool, String> {
    let ids: Vec<String> = (0..10)
        .map(|j| mix::target((k * 10 + j) % targets))
        .collect();
    let job = sb
        .catch_up::<View>(CatchUp::ids(ids))
        .await
        .map_err(|e| e.to_string())?;
    let done = job
        .wait(Duration::from_secs(600))
        .await
        .map_err(|e| e.to_string())?;
    Ok(done.status == shardbox::core::storage::CatchUpStatus::Completed)
}

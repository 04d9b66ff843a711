//! One simulated run: nodes on a fault-injecting storage, a random workload and operator, a
//! settling phase without faults, then the invariants.
//!
//! ```text
//!  seed ─► SimRng ─┬─ configuration (workers, page size, linger, fault rates)
//!                  ├─ FaultyStorage (its own stream)
//!                  └─ steps: sends (bursts, delayed, TTL, transient, poison; some
//!                     joining a relay flow, some awaited by their sender's outcome_with),
//!                     posts, unblocks, dead-letter requeues, catch-ups and their cancel,
//!                     a re-sharding, node restarts, early lease expiry, terminated
//!                     PostgreSQL backends, time steps (ManualClock + paused tokio clock)
//!  settle: faults off, poison healed, blocked targets requeued, a cancelled rebuild
//!          repaired, time runs until idle; every sample checks the latency invariant
//!  check:  invariants::check over the API's view (states, dead letters, events, sinks,
//!          outcomes read, log)
//! ```
//!
//! On PostgreSQL (`Backend::Postgres`, a fresh test schema per seed) the backend's own
//! `LISTEN`/`NOTIFY` carries the wake-ups (the fault plan drops some), and a step terminates
//! every backend of the run's connections (pool and listeners) with `pg_terminate_backend`.
//! A restart of the server is left out: the server is shared with other tests and sessions.
//!
//! The framework's clock is a `ManualClock` and tokio's clock is paused: the driver moves
//! both by the same step, except for an early lease expiry, which moves only the framework's
//! clock past every lease while the nodes' tasks (heartbeats included) stand still.

use super::faulty::{FaultCounts, FaultRates, FaultyStorage};
use super::invariants::{self, Oracle, OutcomeRead, Sent};
use super::latency::{self, Incarnations, LatencyWatch};
use super::model::{forget_healed, heal, Applied, Apply, Audit, Gate, Ledger, Relay, Sink};
use super::rng::SimRng;
use chrono::{DateTime, Utc};
use shardbox::core::memory::MemoryStorage;
use shardbox::core::{MessageStatus, Storage};
use shardbox::prelude::*;
use shardbox::{
    Clock, ManualClock, Node, NodeId, OutcomeWait, ReshardOptions, SendReceipt, SqliteOptions,
};
use std::sync::Arc;
use std::time::Duration;

/// The backend under the fault wrapper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Sqlite,
    /// A fresh schema of `SHARDBOX_PG_URL` per run.
    Postgres,
}

impl Backend {
    fn tag(self) -> &'static str {
        match self {
            Backend::Memory => "m",
            Backend::Sqlite => "q",
            Backend::Postgres => "p",
        }
    }
}

/// What one run did and found.
#[derive(Debug, Default)]
pub struct RunReport {
    pub faults: FaultCounts,
    pub sends: usize,
    pub posts: usize,
    pub restarts: usize,
    pub lease_expiries: usize,
    pub catch_ups: usize,
    pub unblocks: usize,
    pub requeues: usize,
    pub reshards: usize,
    /// Re-shardings that returned Ok.
    pub reshards_done: usize,
    pub cancels: usize,
    pub terminations: usize,
    pub outcomes_read: usize,
    pub latency_samples: usize,
    /// The longest wait the latency invariant saw in the run.
    pub worst_wait: Duration,
    pub commits: usize,
    pub violations: Vec<String>,
    /// Every pick-up and commit as the storage saw it, then the end state: two runs of one
    /// seed on memory must produce the same trace.
    pub trace: Vec<String>,
}

const NODES: usize = 2;
const LEASE: Duration = Duration::from_secs(4);
const POLL: Duration = Duration::from_millis(250);
/// The settle phase samples every 100 ms, for at most 200 s.
const SETTLE_SAMPLE: Duration = Duration::from_millis(100);
const SETTLE_ROUNDS: usize = 2_000;

/// Runs `seed` on `backend` on a fresh paused current-thread runtime.
pub fn run(seed: u64, backend: Backend) -> RunReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(simulate(seed, backend))
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_900_000_000, 0).expect("a valid start time")
}

/// An outcome awaited by a sender: the command's index in `Oracle::sent` and the wait.
type Waiter = (
    usize,
    tokio::task::JoinHandle<Result<CommandOutcome, DeliveryError>>,
);

struct Sim {
    rng: SimRng,
    clock: Arc<ManualClock>,
    faults: FaultyStorage,
    boxes: Vec<Shardbox>,
    nodes: Vec<Option<Node>>,
    incarnations: Incarnations,
    oracle: Oracle,
    report: RunReport,
    prefix: String,
    /// Whether one writer orders events across sources (not PostgreSQL's concurrent commits:
    /// see `invariants::check`).
    across_sources: bool,
    /// Receipts of accepted commands, by index in `Oracle::sent`.
    receipts: Vec<(usize, SendReceipt)>,
    waiters: Vec<Waiter>,
    reshard: Option<tokio::task::JoinHandle<Result<shardbox::ReshardReport, DeliveryError>>>,
    /// The PostgreSQL URL and the `application_name` of the run's connections.
    pg: Option<(String, String)>,
}

async fn simulate(seed: u64, backend: Backend) -> RunReport {
    forget_healed();
    let mut rng = SimRng::new(seed);
    let memory = Arc::new(MemoryStorage::new());
    let mut _dir = None;
    let mut _schema = None;
    let mut pg = None;
    let inner: Arc<dyn Storage> = match backend {
        Backend::Memory => memory.clone(),
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("tempdir");
            let options = SqliteOptions::default().checkpoint_interval(None);
            let s = SqliteStorage::open_with(dir.path().join("sim.db"), options)
                .await
                .expect("open SQLite");
            _dir = Some(dir);
            Arc::new(s)
        }
        Backend::Postgres => {
            let url =
                std::env::var("SHARDBOX_PG_URL").expect("SHARDBOX_PG_URL for Backend::Postgres");
            let schema = crate::common::PgSchema::new(&url, &format!("sim_{seed}"));
            // The run's connections carry the schema's name, so that a step can terminate
            // them and nobody else's.
            let sep = if url.contains('?') { '&' } else { '?' };
            let tagged = format!("{url}{sep}application_name={}", schema.name);
            let s = shardbox::PostgresStorage::connect_with(tagged, schema.options(3))
                .await
                .expect("connect to SHARDBOX_PG_URL");
            pg = Some((url, schema.name.clone()));
            _schema = Some(schema);
            Arc::new(s)
        }
    };
    let rates = FaultRates {
        fail_before: rng.range(0, 60),
        fail_after: rng.range(0, 60),
        delay: rng.range(0, 120),
        max_delay_ms: rng.range(50, 3_000),
        // One run in five drops every notification: the nodes find each other's writes by
        // polling alone.
        drop_notification: if rng.chance(200) {
            1_000
        } else {
            rng.range(0, 300)
        },
    };
    let faults = FaultyStorage::new(inner, rng.fork(), rates);
    let clock = Arc::new(ManualClock::new(t0()));
    let workers = rng.range(1, 2) as usize;
    let page_size = rng.range(2, 8) as usize;
    let linger = Duration::from_millis([0, 0, 300][rng.below(3) as usize]);
    let mut boxes = Vec::new();
    for i in 0..NODES {
        boxes.push(build(&faults, &clock, i, workers, page_size, linger).await);
    }
    let mut sim = Sim {
        rng,
        clock,
        faults,
        boxes,
        nodes: (0..NODES).map(|_| None).collect(),
        incarnations: Incarnations(vec![None; NODES]),
        oracle: Oracle::default(),
        report: RunReport::default(),
        prefix: format!("s{seed}{}", backend.tag()),
        across_sources: backend != Backend::Postgres,
        receipts: Vec::new(),
        waiters: Vec::new(),
        reshard: None,
        pg,
    };
    for i in 0..NODES {
        sim.start_node(i);
    }
    sim.faults.enable(true);
    let steps = sim.rng.range(40, 90);
    for _ in 0..steps {
        sim.step().await;
    }
    sim.faults.enable(false);
    let mut watch = LatencyWatch::new(latency::bound(POLL, linger));
    let settled = sim.settle(&mut watch).await;
    sim.report.latency_samples = watch.samples;
    sim.report.worst_wait = watch.worst.0;
    sim.report.violations.append(&mut watch.violations());
    // The outcomes the senders awaited (each wait ends by its timeout), then one more read of
    // every accepted command's outcome, now that everything is decided.
    for (i, waiter) in std::mem::take(&mut sim.waiters) {
        let read = match waiter.await {
            Ok(r) => r,
            Err(e) => panic!("an outcome waiter panicked: {e}"),
        };
        sim.oracle.outcomes.push(OutcomeRead {
            sent: i,
            settled: false,
            read: read.map_err(|e| e.to_string()),
        });
    }
    for (i, receipt) in std::mem::take(&mut sim.receipts) {
        let read = sim.boxes[0]
            .outcome_with(&receipt, OutcomeWait::timeout(Duration::from_secs(1)))
            .await;
        sim.oracle.outcomes.push(OutcomeRead {
            sent: i,
            settled: true,
            read: read.map_err(|e| e.to_string()),
        });
    }
    sim.report.outcomes_read = sim.oracle.outcomes.len();
    sim.report.reshards_done = sim.oracle.reshards.iter().filter(|r| r.is_ok()).count();
    for i in 0..NODES {
        if let Some(node) = sim.nodes[i].take() {
            if let Err(e) = node.shutdown().await {
                sim.report.violations.push(format!("shutdown failed: {e}"));
            }
        }
    }
    if let Err(why) = settled {
        sim.report.violations.push(why);
        if backend == Backend::Memory {
            // What is left, row by row, to reduce a failing seed.
            for m in memory
                .rows()
                .iter()
                .filter(|m| m.status != MessageStatus::Delivered)
            {
                sim.report.violations.push(format!(
                    "  left: seq {} shard {} {:?} {:?} {}/{} due {:?} attempts {}",
                    m.seq,
                    m.shard,
                    m.status,
                    m.message.kind,
                    m.message.target_kind,
                    m.message.target_id,
                    m.message.deliver_after,
                    m.attempts
                ));
            }
        }
    }
    let mut violations = invariants::check(
        &sim.boxes[0],
        &sim.faults,
        &sim.oracle,
        &sim.prefix,
        // PostgreSQL: concurrent producers may commit in another order than their event
        // `seq`s (docs/entities.md, "Order across streams"): only each producer's order.
        backend != Backend::Postgres,
    )
    .await;
    sim.report.trace = sim.faults.trace();
    sim.report
        .trace
        .extend(invariants::end_state(&sim.boxes[0], &sim.oracle, &sim.prefix).await);
    sim.report.violations.append(&mut violations);
    sim.report.faults = sim.faults.counts();
    sim.faults.forget_listeners();
    sim.report.commits = sim.faults.commits().len();
    sim.report
}

async fn build(
    faults: &FaultyStorage,
    clock: &Arc<ManualClock>,
    node: usize,
    workers: usize,
    page_size: usize,
    linger: Duration,
) -> Shardbox {
    let backoff = Backoff::Exponential {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
    };
    Shardbox::builder()
        .shared_storage(Arc::new(faults.clone()))
        .clock(clock.clone())
        .node_id(NodeId(format!("node-{node}")))
        .shards(4)
        .workers(workers)
        .page_size(page_size)
        .catch_up_page_size(5)
        .lease_duration(LEASE)
        .poll_interval(POLL)
        .lease_linger(linger)
        .dedup_window(Duration::from_secs(3_600))
        .ttl_sweep_interval(Duration::from_secs(1))
        .dead_letter_expired(true)
        .failure_policy(FailurePolicy::new(3, backoff, ExhaustedOutcome::DeadLetter))
        .kind_policy(
            Gate::KIND,
            FailurePolicy::new(3, backoff, ExhaustedOutcome::Block),
        )
        .kind_policy(
            Audit::KIND,
            FailurePolicy::new(8, backoff, ExhaustedOutcome::DeadLetter),
        )
        .aggregate::<Ledger>()
        .aggregate::<Gate>()
        .aggregate::<Sink>()
        .projection::<Audit>()
        .process_manager::<Relay>()
        .build()
        .await
        .expect("build a node")
}

impl Sim {
    /// Moves both clocks by `ms`.
    async fn elapse(&self, ms: u64) {
        self.clock
            .advance(chrono::Duration::milliseconds(ms as i64));
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// Starts node `i`: its pick-ups from now on are its current incarnation's.
    fn start_node(&mut self, i: usize) {
        self.incarnations.0[i] = Some(self.faults.pick_ups());
        self.nodes[i] = Some(self.boxes[i].start());
    }

    /// A live node's Shardbox (the operator and the senders use any node).
    fn any_box(&mut self) -> Shardbox {
        let live: Vec<usize> = (0..NODES).filter(|i| self.nodes[*i].is_some()).collect();
        let pick = if live.is_empty() {
            self.rng.below(NODES as u64) as usize
        } else {
            live[self.rng.below(live.len() as u64) as usize]
        };
        self.boxes[pick].clone()
    }

    async fn step(&mut self) {
        match self.rng.below(100) {
            0..=39 => self.send_burst().await,
            40..=51 => self.post().await,
            52..=57 => self.unblock().await,
            58..=62 => self.requeue().await,
            63..=65 => self.catch_up().await,
            66..=69 => self.restart().await,
            70..=72 => {
                // Every lease ends now, while its holder's tasks stand still.
                self.report.lease_expiries += 1;
                self.clock.advance(
                    chrono::Duration::from_std(LEASE).unwrap_or_default()
                        + chrono::Duration::seconds(1),
                );
            }
            73..=74 => self.reshard(),
            75..=76 => self.cancel_catch_up().await,
            77..=78 if self.pg.is_some() => self.terminate_backends().await,
            _ => {
                let ms = self.rng.range(10, 900);
                self.elapse(ms).await;
            }
        }
        let ms = self.rng.range(5, 120);
        self.elapse(ms).await;
    }

    async fn send_burst(&mut self) {
        let count = self.rng.range(1, 3);
        let mut used = Vec::new();
        let mut tasks = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..count {
            let gate = self.rng.chance(300);
            let target = if gate {
                format!("{}-G{}", self.prefix, self.rng.below(3))
            } else {
                format!("{}-L{}", self.prefix, self.rng.below(5))
            };
            if used.contains(&target) {
                continue;
            }
            used.push(target.clone());
            let n = self.oracle.next_n();
            let poison = self.rng.chance(if gate { 80 } else { 60 });
            let delay = self
                .rng
                .chance(120)
                .then(|| Duration::from_millis(self.rng.range(100, 3_000)));
            let ttl = self
                .rng
                .chance(100)
                .then(|| Duration::from_millis(self.rng.range(50, 2_000)));
            let command = Apply {
                n,
                fail_first: if self.rng.chance(200) {
                    self.rng.range(1, 2) as u32
                } else {
                    0
                },
                poison,
                audit: format!("{}-A{}", self.prefix, self.rng.below(3)),
                audit_fail_first: u32::from(self.rng.chance(100)),
                relay: self.relay(),
            };
            let signal = format!("{}-m{n}", self.prefix);
            // Some senders await the outcome (for up to 20 s: some time out).
            let wait = self
                .rng
                .chance(400)
                .then(|| Duration::from_millis(self.rng.range(200, 20_000)));
            waits.push(wait);
            let sb = self.any_box();
            let mut sent = Sent {
                kind: if gate { Gate::KIND } else { Ledger::KIND },
                target: target.clone(),
                n,
                signal: signal.clone(),
                accepted: false,
                ordered: delay.is_none() && (gate || !poison),
                poison,
                ttl: ttl.is_some(),
                note: format!(
                    "poison {poison}, fail_first {}, delay {delay:?}, ttl {ttl:?}",
                    command.fail_first
                ),
            };
            tasks.push(tokio::spawn(async move {
                let mut receipt = None;
                for _ in 0..3 {
                    let mut options = SendOptions::default().signal_id(signal.clone());
                    if let Some(d) = delay {
                        options = options.delay(d);
                    }
                    if let Some(t) = ttl {
                        options = options.ttl(t);
                    }
                    let r = if gate {
                        sb.send_with::<Gate>(&target, &command, options).await
                    } else {
                        sb.send_with::<Ledger>(&target, &command, options).await
                    };
                    sent.note.push_str(if r.is_ok() { ", ok" } else { ", err" });
                    if let Ok(r) = r {
                        sent.accepted = true;
                        receipt = Some(r);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (sent, receipt)
            }));
        }
        for (task, wait) in tasks.into_iter().zip(waits) {
            let (sent, receipt) = task.await.expect("a send task");
            self.report.sends += 1;
            let i = self.oracle.sent.len();
            self.oracle.sent.push(sent);
            let Some(receipt) = receipt else { continue };
            if let Some(timeout) = wait {
                let sb = self.any_box();
                let r = receipt.clone();
                self.waiters.push((
                    i,
                    tokio::spawn(async move {
                        sb.outcome_with(&r, OutcomeWait::timeout(timeout)).await
                    }),
                ));
            }
            self.receipts.push((i, receipt));
        }
    }

    /// The relay flow an event joins, if any (one in three).
    fn relay(&mut self) -> Option<String> {
        self.rng
            .chance(333)
            .then(|| format!("{}-R{}", self.prefix, self.rng.below(2)))
    }

    async fn post(&mut self) {
        let n = self.oracle.next_n();
        let source = format!("{}-ext", self.prefix);
        let event = Applied {
            source: source.clone(),
            n,
            audit: format!("{}-A{}", self.prefix, self.rng.below(3)),
            audit_fail_first: u32::from(self.rng.chance(100)),
            relay: self.relay(),
        };
        let signal = format!("{}-p{n}", self.prefix);
        let sb = self.any_box();
        let mut accepted = false;
        for _ in 0..3 {
            let options = SendOptions::default().signal_id(signal.clone());
            if sb
                .post_with(EventSource::external(source.clone()), &event, options)
                .await
                .is_ok()
            {
                accepted = true;
                break;
            }
        }
        self.report.posts += 1;
        self.oracle.posted.push((n, accepted));
    }

    async fn unblock(&mut self) {
        let sb = self.any_box();
        let Ok(blocked) = sb.blocked_targets().await else {
            return;
        };
        if blocked.is_empty() {
            return;
        }
        let b = &blocked[self.rng.below(blocked.len() as u64) as usize];
        if self.rng.chance(800) {
            heal(&b.signal_id.0);
        }
        let action = match self.rng.below(100) {
            0..=69 => Unblock::Requeue,
            70..=84 => Unblock::Drop,
            _ => Unblock::DeadLetter,
        };
        if action == Unblock::Drop {
            // Recorded before the call: a lost acknowledgement may have dropped it.
            self.oracle.dropped.insert(b.signal_id.0.clone());
        }
        self.report.unblocks += 1;
        let _ = sb.unblock(&b.target, action).await;
    }

    async fn requeue(&mut self) {
        let sb = self.any_box();
        let Ok(dead) = sb.dead_letters(DeadLetterFilter::all()).await else {
            return;
        };
        let chosen: Vec<_> = dead.iter().filter(|_| self.rng.chance(500)).collect();
        if chosen.is_empty() {
            return;
        }
        for d in &chosen {
            let signal = d.letter.original.message.signal_id.0.clone();
            heal(&signal);
            // A requeued message joins its target again after later ones: not in send order.
            self.oracle.requeued.insert(signal);
        }
        self.report.requeues += chosen.len();
        let ids = chosen.iter().map(|d| d.id);
        let _ = sb.requeue_dead_letters(DeadLetterFilter::ids(ids)).await;
    }

    async fn catch_up(&mut self) {
        let sb = self.any_box();
        let request = if self.rng.chance(500) {
            CatchUp::all()
        } else {
            CatchUp::ids([format!("{}-A{}", self.prefix, self.rng.below(3))])
        };
        self.report.catch_ups += 1;
        let _ = sb.catch_up::<Audit>(request).await;
    }

    /// An operator cancels a running catch-up (the settle phase repairs the partial rebuild
    /// with a new catch-up of every instance).
    async fn cancel_catch_up(&mut self) {
        let sb = self.any_box();
        let Ok(running) = sb.storage().running_catch_ups().await else {
            return;
        };
        if running.is_empty() {
            return;
        }
        let job = &running[self.rng.below(running.len() as u64) as usize];
        // Recorded before the call: a lost acknowledgement may have cancelled it.
        self.oracle.cancelled.push(job.id);
        self.report.cancels += 1;
        let _ = sb.cancel_catch_up(job.id).await;
    }

    /// An operator re-shards while the nodes run (one at a time; it runs beside the steps,
    /// waiting for the nodes to hand their shards over). The nodes were built with 4 shards.
    fn reshard(&mut self) {
        if self.reshard.as_ref().is_some_and(|r| !r.is_finished()) {
            return;
        }
        let to = [2, 3, 5, 8][self.rng.below(4) as usize];
        let sb = self.any_box();
        self.report.reshards += 1;
        self.reshard = Some(tokio::spawn(async move {
            let options = ReshardOptions {
                timeout: Duration::from_secs(20),
            };
            sb.reshard_with(to, &options).await
        }));
    }

    /// Terminates every PostgreSQL backend of the run (the pool's connections and the nodes'
    /// listeners), as a server that drops its connections would.
    async fn terminate_backends(&mut self) {
        let Some((url, name)) = self.pg.clone() else {
            return;
        };
        self.report.terminations += 1;
        let killed = tokio::task::spawn_blocking(move || {
            use diesel::Connection;
            let mut admin = diesel::PgConnection::establish(&url).map_err(|e| e.to_string())?;
            shardbox::storage::test_schema::terminate_backends(&mut admin, &name)
                .map_err(|e| e.to_string())
        })
        .await
        .expect("the terminate task");
        if let Err(e) = killed {
            eprintln!("could not terminate the run's backends: {e}");
        }
    }

    async fn restart(&mut self) {
        let i = self.rng.below(NODES as u64) as usize;
        match self.nodes[i].take() {
            Some(node) => {
                self.report.restarts += 1;
                self.incarnations.0[i] = None;
                let _ = node.shutdown().await;
                // Down for a while (the other node takes its shards), or back at once.
                if self.rng.chance(500) {
                    self.start_node(i);
                }
            }
            None => self.start_node(i),
        }
    }

    /// Without faults: heals every poison command, requeues blocked targets, restarts
    /// stopped nodes, waits for a re-sharding in progress, repairs the rebuilds that were
    /// cancelled (after checking what they left), and lets time run until nothing is pending,
    /// sampling the latency invariant every `SETTLE_SAMPLE`.
    async fn settle(&mut self, watch: &mut LatencyWatch) -> Result<(), String> {
        for s in &self.oracle.sent {
            if s.poison {
                heal(&s.signal);
            }
        }
        for i in 0..NODES {
            if self.nodes[i].is_none() {
                self.start_node(i);
            }
        }
        if std::env::var("SHARDBOX_SIM_LOG").is_ok() {
            tracing::info!(now = %self.clock.now(), "the settle phase starts: faults off");
        }
        let sb = self.boxes[0].clone();
        let mut last = String::new();
        let mut repaired = self.oracle.cancelled.is_empty();
        // A read that fails (a pooled connection a terminated backend left dead) is tried
        // again next round: only a settle phase that never succeeds is a violation.
        macro_rules! or_next_round {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => {
                        last = format!("a settle-phase call failed: {e}");
                        self.elapse(SETTLE_SAMPLE.as_millis() as u64).await;
                        continue;
                    }
                }
            };
        }
        for _ in 0..SETTLE_ROUNDS {
            let blocked = or_next_round!(sb.blocked_targets().await);
            for b in &blocked {
                // One that fails is still blocked next round, and requeued then.
                let _ = sb.unblock(&b.target, Unblock::Requeue).await;
            }
            if self.reshard.as_ref().is_some_and(|r| r.is_finished()) {
                if let Some(r) = self.reshard.take() {
                    let report = r.await.expect("the re-sharding task");
                    self.oracle
                        .reshards
                        .push(report.map(|r| (r.from, r.to)).map_err(|e| e.to_string()));
                }
            }
            let counts = or_next_round!(sb.storage().counts(None).await);
            let running = or_next_round!(sb.storage().running_catch_ups().await);
            or_next_round!(
                watch
                    .sample(
                        &self.faults,
                        &self.incarnations,
                        self.clock.now(),
                        self.reshard.is_some(),
                        !running.is_empty(),
                    )
                    .await
            );
            if counts.pending() == 0
                && counts.blocked == 0
                && running.is_empty()
                && self.reshard.is_none()
            {
                if repaired {
                    return Ok(());
                }
                // Every cancelled job has ended: what it left is checked, then repaired.
                let left = or_next_round!(
                    invariants::check_cancelled_rebuilds(
                        &sb,
                        &self.oracle,
                        &self.prefix,
                        self.across_sources
                    )
                    .await
                );
                or_next_round!(sb.catch_up::<Audit>(CatchUp::all()).await);
                self.report.violations.extend(left);
                repaired = true;
            }
            last = format!(
                "{counts:?}, running catch-ups {:?}, re-sharding {}",
                running.iter().map(|j| (j.id, j.status)).collect::<Vec<_>>(),
                self.reshard.is_some()
            );
            self.elapse(SETTLE_SAMPLE.as_millis() as u64).await;
        }
        Err(format!(
            "no loss (liveness): the Inbox did not settle within {} s without faults: {last}",
            (SETTLE_SAMPLE * SETTLE_ROUNDS as u32).as_secs()
        ))
    }
}

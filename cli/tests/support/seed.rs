//! A database seeded through the library with what an operator must see:
//!
//! ```text
//!  ledger/l-1, l-2, l-3   delivered (kept for the one-hour dedup window)
//!  ledger/l-9             a Flaky command, dead-lettered while its ledger refuses it;
//!                         accepted after a requeue once the Gate opens
//!  vault/v-1              blocked by a poison command, one message parked behind it
//!  ledger/l-4             delayed by an hour
//!  ledger/l-5             due (nobody delivers while only the admin server runs)
//! ```

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use shardbox::{Backoff, ExhaustedOutcome, FailurePolicy, NodeId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The seed's expected totals.
pub const DELIVERED: u64 = 3;
/// Dead letters after seeding.
pub const DEAD_LETTERS: u64 = 1;
/// Blocked targets after seeding.
pub const BLOCKED: u64 = 1;
/// Shards configured (all served once by the seeding node).
pub const SHARDS: u32 = 4;
/// The seeding node.
pub const NODE: &str = "admin-seed-node";

/// The ledger's commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Cmd {
    /// Always accepted.
    Ok,
    /// Accepted only while the Gate is open.
    Flaky,
    /// Never accepted.
    Poison,
}
impl Message for Cmd {
    const TYPE: &'static str = "admin-test.cmd";
}

/// What a ledger records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied;
impl Message for Applied {
    const TYPE: &'static str = "admin-test.applied";
}

/// Whether Flaky commands are accepted (a service, so that tests in parallel do not share it).
#[derive(Debug, Default)]
pub struct Gate(pub AtomicBool);

async fn handle(c: &Cmd, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
    match c {
        Cmd::Ok => Ok(vec![Applied]),
        Cmd::Flaky if cx.service::<Gate>()?.0.load(Ordering::SeqCst) => Ok(vec![Applied]),
        Cmd::Flaky => Err(HandlerError::new("ledger closed")),
        Cmd::Poison => Err(HandlerError::new("poison pill")),
    }
}

/// Dead-letters what it refuses; counts what it applied.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// Commands applied.
    pub applied: u32,
}
impl Aggregate for Ledger {
    const KIND: &'static str = "ledger";
    type Command = Cmd;
    type Event = Applied;
    async fn handle(&self, c: &Cmd, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
        handle(c, cx).await
    }
    fn apply(&mut self, _: &Applied) {
        self.applied += 1;
    }
}

/// Blocks on what it refuses.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Vault;
impl Aggregate for Vault {
    const KIND: &'static str = "vault";
    type Command = Cmd;
    type Event = Applied;
    async fn handle(&self, c: &Cmd, cx: &Context<'_>) -> Result<Vec<Applied>, HandlerError> {
        handle(c, cx).await
    }
    fn apply(&mut self, _: &Applied) {}
}

fn once(outcome: ExhaustedOutcome) -> FailurePolicy {
    FailurePolicy::new(1, Backoff::Fixed(Duration::from_secs(1)), outcome)
}

/// An application over `storage` with `gate`, as every node of these tests builds it.
pub async fn app(storage: Arc<dyn Storage>, gate: Arc<Gate>, node: &str) -> Shardbox {
    Shardbox::builder()
        .shared_storage(storage)
        .shards(SHARDS)
        .dedup_window(Duration::from_secs(3600))
        .poll_interval(Duration::from_millis(50))
        .node_id(NodeId(node.into()))
        .service(gate)
        .kind_policy(Ledger::KIND, once(ExhaustedOutcome::DeadLetter))
        .kind_policy(Vault::KIND, once(ExhaustedOutcome::Block))
        .aggregate::<Ledger>()
        .aggregate::<Vault>()
        .build()
        .await
        .expect("build")
}

/// Seeds `storage` (see the module doc); returns the application and its closed gate.
pub async fn seed(storage: Arc<dyn Storage>) -> (Shardbox, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let sb = app(storage, gate.clone(), NODE).await;
    for id in ["l-1", "l-2", "l-3"] {
        sb.send::<Ledger>(id, &Cmd::Ok).await.expect("send");
    }
    sb.send::<Ledger>("l-9", &Cmd::Flaky).await.expect("send");
    sb.send::<Vault>("v-1", &Cmd::Poison).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    sb.send::<Vault>("v-1", &Cmd::Ok).await.expect("send");
    sb.deliver_all().await.expect("deliver");
    sb.send_with::<Ledger>(
        "l-4",
        &Cmd::Ok,
        SendOptions::default().delay(Duration::from_secs(3600)),
    )
    .await
    .expect("send");
    sb.send::<Ledger>("l-5", &Cmd::Ok).await.expect("send");
    (sb, gate)
}

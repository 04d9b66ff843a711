//! Bank: accounts (an aggregate) emit events; a balance projection follows them. Then the
//! projection's logic changes — interest is now credited on deposits — and a catch-up rebuilds
//! every balance from the event history while new traffic keeps flowing, with a progress bar.
//! At the end every rebuilt balance is checked against a fold of the full history.
//!
//! Run with `cargo run --release --example bank` (SQLite file `shardbox-bank.db`, recreated on
//! each run; pass another path, or `:memory:`, as the first argument).

use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::storage::SqliteStorage;
use shardbox::{CatchUp, CatchUpHandle};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Which projection logic is deployed: false = v1 (plain balance), true = v2 (1% interest on
/// every deposit). Flipping it stands for deploying a new version of the projection.
static LOGIC_V2: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Account {
    balance: i64,
}

#[derive(Debug, Serialize, Deserialize)]
enum AccountCommand {
    Deposit(i64),
    Withdraw(i64),
}

impl Message for AccountCommand {
    const TYPE: &'static str = "bank.account.command";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum AccountEvent {
    Deposited(i64),
    Withdrew(i64),
    Refused(i64),
}

impl Message for AccountEvent {
    const TYPE: &'static str = "bank.account.event";
}

impl Aggregate for Account {
    const KIND: &'static str = "account";
    type Command = AccountCommand;
    type Event = AccountEvent;

    async fn handle(
        &self,
        c: &AccountCommand,
        _: &Context<'_>,
    ) -> Result<Vec<AccountEvent>, HandlerError> {
        Ok(vec![match *c {
            AccountCommand::Deposit(n) => AccountEvent::Deposited(n),
            AccountCommand::Withdraw(n) if n <= self.balance => AccountEvent::Withdrew(n),
            AccountCommand::Withdraw(n) => AccountEvent::Refused(n),
        }])
    }

    fn apply(&mut self, e: &AccountEvent) {
        match *e {
            AccountEvent::Deposited(n) => self.balance += n,
            AccountEvent::Withdrew(n) => self.balance -= n,
            AccountEvent::Refused(_) => {}
        }
    }
}

/// The read model: a balance per account, by the deployed logic.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Balance {
    cents: i64,
}

impl Balance {
    fn step(&mut self, e: &AccountEvent, v2: bool) {
        match *e {
            AccountEvent::Deposited(n) if v2 => self.cents += n + n / 100,
            AccountEvent::Deposited(n) => self.cents += n,
            AccountEvent::Withdrew(n) => self.cents -= n,
            AccountEvent::Refused(_) => {}
        }
    }
}

impl Projection for Balance {
    const KIND: &'static str = "balance";
    type Event = AccountEvent;

    async fn apply(&mut self, e: &AccountEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        self.step(e, LOGIC_V2.load(Ordering::SeqCst));
        Ok(())
    }
}

const ACCOUNTS: usize = 200;

async fn traffic(sb: &Shardbox, from: usize, to: usize) -> Result<(), shardbox::DeliveryError> {
    for i in from..to {
        let id = format!("acc-{:03}", i % ACCOUNTS);
        let command = if i % 3 == 2 {
            AccountCommand::Withdraw((i % 70) as i64 * 100)
        } else {
            AccountCommand::Deposit((i % 50) as i64 * 100 + 100)
        };
        sb.send::<Account>(&id, &command).await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "shardbox-bank.db".into());
    let builder = if path == ":memory:" {
        Shardbox::builder().memory()
    } else {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
        Shardbox::builder().storage(SqliteStorage::open(&path).await?)
    };
    let sb = builder
        .shards(16)
        .catch_up_page_size(500)
        .poll_interval(Duration::from_millis(100))
        .aggregate::<Account>()
        .projection::<Balance>()
        .build()
        .await?;
    let node = sb.start();

    println!("v1 projection live: 6,000 commands to {ACCOUNTS} accounts…");
    traffic(&sb, 0, 6_000).await?;
    node.drain(Duration::from_secs(120)).await?;

    println!("deploying v2 projection logic (1% interest on deposits) and catching up…");
    LOGIC_V2.store(true, Ordering::SeqCst);
    let job = sb.catch_up::<Balance>(CatchUp::all()).await?;
    let live = {
        let sb = sb.clone();
        tokio::spawn(async move { traffic(&sb, 6_000, 7_500).await })
    };
    show_progress(&job).await?;
    live.await??;
    // Held live events are due again a poll interval later: wait until nothing is pending.
    while sb.storage().counts(None).await?.pending() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await?;

    let checked = check_balances(&sb).await?;
    let p = job.progress().await?;
    println!(
        "catch-up {:?}: {} events replayed; {checked} balances equal a v2 fold of their full history",
        p.status, p.replayed
    );
    Ok(())
}

/// Shows the catch-up's progress as a bar until it completes.
async fn show_progress(job: &CatchUpHandle) -> Result<(), Box<dyn std::error::Error>> {
    let first = job.progress().await?;
    let bar = ProgressBar::new(first.total_estimate.max(1) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} events  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    loop {
        let p = job.progress().await?;
        bar.set_length(p.total_estimate.max(p.replayed).max(1) as u64);
        bar.set_position(p.replayed as u64);
        bar.set_message(format!(
            "{:?}, {:.0} events/s, ETA {:.1}s",
            p.status,
            p.rate,
            p.eta.map_or(0.0, |d| d.as_secs_f64())
        ));
        if p.status == shardbox::core::storage::CatchUpStatus::Completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bar.finish();
    Ok(())
}

/// Checks every rebuilt balance against a v2 fold of its account's full history; returns how
/// many were checked.
async fn check_balances(sb: &Shardbox) -> Result<usize, Box<dyn std::error::Error>> {
    // The history, read back from the event store in seq order and folded with v2 logic.
    let mut want: BTreeMap<String, Balance> = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = sb
            .storage()
            .read_events(after, &[AccountEvent::TYPE.to_owned()], None, 1_000)
            .await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for stored in &page {
            let e: AccountEvent = serde_json::from_slice(&stored.event.payload)?;
            want.entry(stored.event.source.id.clone())
                .or_default()
                .step(&e, true);
        }
    }
    let mut checked = 0;
    for (id, want) in &want {
        let got = sb
            .projection_state::<Balance>(id)
            .await?
            .unwrap_or_default();
        if &got != want {
            return Err(format!("{id}: rebuilt {got:?}, history folds to {want:?}").into());
        }
        checked += 1;
    }
    Ok(checked)
}

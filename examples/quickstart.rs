//! Quickstart: an account aggregate and a balance projection, delivered by one local node.
//!
//! Run with `cargo run --release --example quickstart`. It writes `shardbox-quickstart.db`
//! (SQLite) in the current directory; pass another path as the first argument, or `:memory:`
//! for no file at all.

use serde::{Deserialize, Serialize};
use shardbox::core::{StageInfo, StageReport};
use shardbox::prelude::*;
use shardbox::storage::SqliteStorage;
use shardbox::DeliveryMonitor;
use std::time::Duration;

/// An account: the aggregate that decides.
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
    const TYPE: &'static str = "quickstart.account.command";
}

#[derive(Debug, Serialize, Deserialize)]
enum AccountEvent {
    Deposited(i64),
    Withdrew(i64),
    WithdrawalRefused { asked: i64, balance: i64 },
}

impl Message for AccountEvent {
    const TYPE: &'static str = "quickstart.account.event";
}

impl Aggregate for Account {
    const KIND: &'static str = "account";
    type Command = AccountCommand;
    type Event = AccountEvent;

    async fn handle(
        &self,
        command: &AccountCommand,
        _: &Context<'_>,
    ) -> Result<Vec<AccountEvent>, HandlerError> {
        Ok(vec![match *command {
            AccountCommand::Deposit(n) => AccountEvent::Deposited(n),
            AccountCommand::Withdraw(n) if n <= self.balance => AccountEvent::Withdrew(n),
            AccountCommand::Withdraw(n) => AccountEvent::WithdrawalRefused {
                asked: n,
                balance: self.balance,
            },
        }])
    }

    fn apply(&mut self, event: &AccountEvent) {
        match *event {
            AccountEvent::Deposited(n) => self.balance += n,
            AccountEvent::Withdrew(n) => self.balance -= n,
            AccountEvent::WithdrawalRefused { .. } => {}
        }
    }
}

/// A read model following the account events: balance and number of operations.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Statement {
    balance: i64,
    operations: u32,
    refused: u32,
}

impl Projection for Statement {
    const KIND: &'static str = "statement";
    type Event = AccountEvent;

    async fn apply(&mut self, event: &AccountEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        match *event {
            AccountEvent::Deposited(n) => self.balance += n,
            AccountEvent::Withdrew(n) => self.balance -= n,
            AccountEvent::WithdrawalRefused { .. } => self.refused += 1,
        }
        self.operations += 1;
        Ok(())
    }
}

/// Prints each committed stage.
struct PrintStages;

impl DeliveryMonitor for PrintStages {
    fn on_stage_finished(&self, stage: &StageInfo, report: &StageReport) {
        println!(
            "  stage: shard {:>2} epoch {:>3}: {} delivered, {} duplicates, {} fanned out",
            stage.shard.0, stage.epoch.0, report.delivered, report.duplicates, report.fanned_out
        );
    }
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
        .unwrap_or_else(|| "shardbox-quickstart.db".into());
    let builder = if path == ":memory:" {
        println!("storage: in memory (nothing is kept)");
        Shardbox::builder().memory()
    } else {
        println!(
            "storage: SQLite file {path} (state accumulates across runs; delete it to start over)"
        );
        Shardbox::builder().storage(SqliteStorage::open(&path).await?)
    };
    let builder = builder
        .shards(8)
        .dedup_window(Duration::from_secs(60))
        .monitor(PrintStages)
        .aggregate::<Account>()
        .projection::<Statement>();
    let shardbox = builder.build().await?;
    let node = shardbox.start();

    println!("sending commands to 3 accounts…");
    let ops = [
        ("alice", AccountCommand::Deposit(100)),
        ("bob", AccountCommand::Deposit(50)),
        ("alice", AccountCommand::Withdraw(30)),
        ("carol", AccountCommand::Withdraw(10)),
        ("bob", AccountCommand::Withdraw(70)),
        ("carol", AccountCommand::Deposit(25)),
    ];
    for (id, command) in &ops {
        shardbox.send::<Account>(id, command).await?;
    }
    // The same signal twice: delivered once.
    let once = SendOptions::default().signal_id("bonus-2026-alice");
    shardbox
        .send_with::<Account>("alice", &AccountCommand::Deposit(5), once.clone())
        .await?;
    let again = shardbox
        .send_with::<Account>("alice", &AccountCommand::Deposit(5), once)
        .await?;
    println!(
        "re-sent signal bonus-2026-alice: {} duplicate(s) ignored",
        again.report.duplicates
    );

    if !node.drain(Duration::from_secs(10)).await? {
        return Err("messages still pending after 10 s".into());
    }
    node.shutdown().await?;

    println!("\nstate after delivery:");
    for id in ["alice", "bob", "carol"] {
        let account = shardbox
            .aggregate_state::<Account>(id)
            .await?
            .unwrap_or_default();
        let statement = shardbox
            .projection_state::<Statement>(id)
            .await?
            .unwrap_or_default();
        println!(
            "  {id:<6} balance {:>4} | statement: balance {:>4}, {} operations, {} refused",
            account.balance, statement.balance, statement.operations, statement.refused
        );
        if account.balance != statement.balance {
            return Err(format!("{id}: projection disagrees with the aggregate").into());
        }
    }
    Ok(())
}

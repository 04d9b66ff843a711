// The hidden part of the docs' Rust snippets (see `doc_pages` in src/lib.rs): an account
// aggregate and a balance projection, as in examples/quickstart.rs. Included by snippets with
// `include!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/snippets/bank.rs"))`.

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Account {
    pub balance: i64,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum AccountCommand {
    Deposit(i64),
    Withdraw(i64),
}

impl Message for AccountCommand {
    const TYPE: &'static str = "docs.account.command";
}

#[derive(Debug, Serialize, Deserialize)]
pub enum AccountEvent {
    Deposited(i64),
    Withdrew(i64),
}

impl Message for AccountEvent {
    const TYPE: &'static str = "docs.account.event";
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
            AccountCommand::Withdraw(_) => return Err(HandlerError::permanent("overdrawn")),
        }])
    }

    fn apply(&mut self, event: &AccountEvent) {
        match *event {
            AccountEvent::Deposited(n) => self.balance += n,
            AccountEvent::Withdrew(n) => self.balance -= n,
        }
    }
}

/// A read model of the account events.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Balance {
    pub balance: i64,
}

impl Projection for Balance {
    const KIND: &'static str = "balance";
    type Event = AccountEvent;

    async fn apply(&mut self, event: &AccountEvent, _: &Context<'_>) -> Result<(), HandlerError> {
        match *event {
            AccountEvent::Deposited(n) => self.balance += n,
            AccountEvent::Withdrew(n) => self.balance -= n,
        }
        Ok(())
    }
}

/// An application with both, on the memory backend.
pub async fn bank() -> Shardbox {
    Shardbox::builder()
        .storage(shardbox::core::memory::MemoryStorage::new())
        .aggregate::<Account>()
        .projection::<Balance>()
        .build()
        .await
        .expect("build")
}

//! The kinds the `databases` workload drives, and its plan of which deposit goes where: an
//! account aggregate, and a mirror projection that a fraction of deposits are copied to, in
//! another database than their account's.

use serde::{Deserialize, Serialize};
use shardbox::core::databases::Databases;
use shardbox::core::Storage;
use shardbox::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

pub static DEPOSITS: AtomicU64 = AtomicU64::new(0);
pub static COPIES: AtomicU64 = AtomicU64::new(0);

/// An account: counts its deposits.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Account {
    pub count: u64,
}

/// A deposit; `to` names the mirror its event is copied to, if any.
#[derive(Debug, Serialize, Deserialize)]
pub struct Deposit {
    pub to: Option<String>,
}

impl Message for Deposit {
    const TYPE: &'static str = "bench.deposit";
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Deposited {
    pub to: Option<String>,
}

impl Message for Deposited {
    const TYPE: &'static str = "bench.deposited";
}

impl Aggregate for Account {
    const KIND: &'static str = "db-account";
    type Command = Deposit;
    type Event = Deposited;

    async fn handle(&self, c: &Deposit, _: &Context<'_>) -> Result<Vec<Deposited>, HandlerError> {
        DEPOSITS.fetch_add(1, Ordering::Relaxed);
        Ok(vec![Deposited { to: c.to.clone() }])
    }

    fn apply(&mut self, _: &Deposited) {
        self.count += 1;
    }
}

/// A mirror: counts the deposits copied to it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Mirror {
    pub copies: u64,
}

impl Projection for Mirror {
    const KIND: &'static str = "db-mirror";
    type Event = Deposited;

    fn route(event: &Deposited, _: &shardbox::core::EventSource) -> Vec<String> {
        event.to.iter().cloned().collect()
    }

    async fn apply(&mut self, _: &Deposited, _: &Context<'_>) -> Result<(), HandlerError> {
        COPIES.fetch_add(1, Ordering::Relaxed);
        self.copies += 1;
        Ok(())
    }
}

/// What one run measured.
pub struct Plan {
    pub accounts: Vec<String>,
    /// Per database, mirrors that live there.
    mirrors_by_db: Vec<Vec<String>>,
    account_db: Vec<u32>,
    per_mille: u64,
}

impl Plan {
    pub fn new(storage: &dyn Storage, targets: usize, fraction: f64) -> Plan {
        let accounts: Vec<String> = (0..targets).map(|t| format!("a-{t}")).collect();
        let n = Databases::of(storage).map_or(1, |d| d.map().count()) as usize;
        let db_of = |kind: &str, id: &str| {
            Databases::of(storage).map_or(0, |d| d.database_of_target(kind, id))
        };
        let account_db = accounts.iter().map(|a| db_of(Account::KIND, a)).collect();
        let mut mirrors_by_db = vec![Vec::new(); n];
        for m in 0..targets.max(n * 4) {
            let id = format!("m-{m}");
            mirrors_by_db[db_of(Mirror::KIND, &id) as usize].push(id);
        }
        Plan {
            accounts,
            mirrors_by_db,
            account_db,
            per_mille: (fraction * 1000.0).round() as u64,
        }
    }

    /// Deposit `i`: (account, mirror in another database when there is one, if forwarded).
    pub fn deposit(&self, i: usize) -> (&str, Option<String>) {
        let t = i % self.accounts.len();
        // A fixed, well spread choice of which deposits cross (Knuth's multiplicative hash).
        let forwarded = (i as u64).wrapping_mul(2_654_435_761) % 1000 < self.per_mille;
        let to = forwarded.then(|| {
            let n = self.mirrors_by_db.len();
            let other = (self.account_db[t] as usize + 1 + i % n.max(2).saturating_sub(1)) % n;
            let mirrors = &self.mirrors_by_db[other];
            mirrors[i % mirrors.len()].clone()
        });
        (&self.accounts[t], to)
    }
}

//! Telling the other nodes about writes: after a transaction that wrote inbox rows commits,
//! its shards go to this storage's notifier thread, which sends them with `pg_notify` on a
//! pooled connection, coalescing whatever arrives while it sends.
//!
//! ```text
//!  write / stage commit ─► COMMIT ─► Notifier::written(shards)   (a set insert, no I/O)
//!  notifier thread: wait for shards ─► take them all ─► SELECT pg_notify(channel, '<origin>;3,17,40')
//!  stage commit with command outcomes ─► Notifier::decided(shard) ─► '<origin>;!3' (same thread)
//! ```
//!
//! Why not `pg_notify` inside the writing transaction: PostgreSQL serialises the commits of
//! all transactions that notify (a database-wide lock held through the commit's WAL flush), so
//! one notification per write takes group commit away from every writer. Measured with 8
//! concurrent single-row writers (debug build, PostgreSQL 15): about 1,100 writes/s without
//! notifications or with this notifier, about 680/s with `pg_notify` in every transaction.
//! After the commit, one notification carries the shards of every write that committed while
//! the previous one was being sent. A notification is still sent only for committed rows; one
//! lost to a crash between commit and send delays its rows until the next poll, like any
//! missed notification.

use super::listen::channel_sql;
use crate::checkout::Manager;
use crate::error::Failure;
use crate::redact::DbName;
use diesel::r2d2::Pool;
use diesel::sql_types::Text;
use diesel::{PgConnection, RunQueryDsl};
use shardbox_core::storage::listener::{origin_payloads, outcome_payloads};
use shardbox_core::sync::lock;
use shardbox_core::ShardIndex;
use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Largest notification payload sent; PostgreSQL's limit is 8000 bytes.
const MAX_PAYLOAD: usize = 7900;

#[derive(Default)]
struct Pending {
    shards: BTreeSet<u32>,
    /// Shards whose stages committed command outcomes (sent marked, see
    /// `listener::outcome_payloads`).
    outcomes: BTreeSet<u32>,
    closed: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A set of shard numbers and a flag: consistent whatever panicked while holding it.
        lock(&self.pending)
    }
}

/// The sending side of a storage's notifications; stops its thread when dropped.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

impl Notifier {
    /// Starts the notifier thread of a pool of the database named `database`.
    pub(crate) fn start(
        pool: Pool<Manager<PgConnection>>,
        database: DbName,
        origin: Arc<str>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("shardbox-notify".into())
            .spawn(move || run(&thread_shared, &pool, &database, &origin))?;
        Ok(Notifier { shared })
    }

    /// Rows were committed to `shards`: tell the other nodes soon.
    pub(crate) fn written(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        self.shared.lock().shards.extend(shards.iter().map(|s| s.0));
        self.shared.wake.notify_one();
    }
}

impl Notifier {
    /// Stages of `shards` committed command outcomes: tell the other nodes' waiting senders
    /// soon.
    pub(crate) fn decided(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        self.shared
            .lock()
            .outcomes
            .extend(shards.iter().map(|s| s.0));
        self.shared.wake.notify_one();
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

fn run(shared: &Shared, pool: &Pool<Manager<PgConnection>>, database: &DbName, origin: &str) {
    loop {
        let (shards, outcomes): (Vec<ShardIndex>, Vec<ShardIndex>) = {
            let mut pending = shared.lock();
            while pending.shards.is_empty() && pending.outcomes.is_empty() && !pending.closed {
                pending = shared.wake.wait(pending).unwrap_or_else(|p| p.into_inner());
            }
            if pending.shards.is_empty() && pending.outcomes.is_empty() {
                return;
            }
            let take = |set: &mut BTreeSet<u32>| -> Vec<ShardIndex> {
                std::mem::take(set).into_iter().map(ShardIndex).collect()
            };
            (take(&mut pending.shards), take(&mut pending.outcomes))
        };
        let mut payloads = origin_payloads(origin, &shards, MAX_PAYLOAD);
        payloads.extend(outcome_payloads(origin, &outcomes, MAX_PAYLOAD));
        if let Err(error) = send(pool, payloads) {
            // Only a delay: the other nodes' pollers find the rows.
            let error = database.scrub(&error);
            tracing::debug!(%database, %error, shards = shards.len(), "could not notify other nodes of writes");
        }
    }
}

fn send(pool: &Pool<Manager<PgConnection>>, payloads: Vec<String>) -> Result<(), String> {
    let mut conn = pool.get().map_err(|e| e.to_string())?;
    // Each payload on its own (no transaction around them, two round trips fewer): a
    // notification is a hint, and one that fails only delays its rows until a poll.
    let outcome = payloads
        .into_iter()
        .try_for_each(|payload| -> Result<(), Failure> {
            diesel::sql_query(concat!("SELECT pg_notify(", channel_sql!(), ", $1)"))
                .bind::<Text, _>(payload)
                .execute(&mut **conn)?;
            Ok(())
        });
    // A connection that lost its server here must not go back to the writers.
    conn.settle(&outcome);
    outcome.map_err(|e| match e {
        Failure::Db(e) => e.to_string(),
        Failure::Storage(e) => e.to_string(),
    })
}

//! Background WAL checkpoints: copying the write-ahead log back into the database file off
//! the commit path.
//!
//! ```text
//!  writers ─► commit appends pages to shardbox.db-wal (no checkpoint: autocheckpoint is only a
//!             safety net far above what the thread lets the WAL reach)
//!  thread  ─► every interval: PRAGMA wal_checkpoint(PASSIVE) on its own connection
//!             (copies committed pages into the database file and syncs it, never waiting
//!             for readers or the writer); stops when the storage is dropped
//!  node stop ─► PRAGMA wal_checkpoint(TRUNCATE) on a pooled connection: the WAL copied
//!              and cut to zero bytes (see `SqliteStorage::node_stopped_backend`)
//! ```
//!
//! SQLite's default runs a checkpoint inside the commit that pushes the WAL past 1,000 pages:
//! that writer then copies and syncs while holding the write lock, so every other writer (and
//! the latency of their messages) waits for it, and hot pages rewritten by many commits are
//! copied again at every checkpoint. On its own thread the checkpoint runs beside the writer,
//! and pages rewritten between two checkpoints are copied once.

use super::options::Pragmas;
use crate::error::Failure;
use diesel::connection::Connection;
use diesel::sql_types::Integer;
use diesel::{QueryableByName, RunQueryDsl, SqliteConnection};
use shardbox_core::sync::lock;
use shardbox_core::Cause;
use shardbox_core::StorageError;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The row `PRAGMA wal_checkpoint` returns.
#[derive(QueryableByName)]
pub(crate) struct CheckpointRow {
    /// 1 when another checkpoint held the checkpointer lock.
    #[diesel(sql_type = Integer)]
    pub(crate) busy: i32,
    /// Pages in the WAL.
    #[diesel(sql_type = Integer)]
    pub(crate) log: i32,
    /// Pages of the WAL now in the database file.
    #[diesel(sql_type = Integer)]
    pub(crate) checkpointed: i32,
}

/// How often a truncating checkpoint is tried while it finds the database busy, and the
/// pause between tries: the background thread's checkpoint holds the checkpointer lock for a
/// few milliseconds, and a TRUNCATE that meets it returns busy at once (SQLite invokes no busy
/// handler for that lock).
const TRUNCATE_TRIES: u32 = 50;
const TRUNCATE_PAUSE: Duration = Duration::from_millis(20);

/// `PRAGMA wal_checkpoint(TRUNCATE)` on `conn`: copies the whole WAL into the database file
/// (waiting, within the busy timeout, for readers and the writer) and truncates it to zero
/// bytes; tried again while busy, up to a second. For a node's stop, not for the running
/// system (it waits where PASSIVE does not). The last row says whether it succeeded.
pub(crate) fn truncate(conn: &mut SqliteConnection) -> Result<CheckpointRow, Failure> {
    let mut tries = 1;
    loop {
        let row = diesel::sql_query("PRAGMA wal_checkpoint(TRUNCATE)")
            .get_result::<CheckpointRow>(conn)?;
        if row.busy == 0 || tries >= TRUNCATE_TRIES {
            return Ok(row);
        }
        tries += 1;
        std::thread::sleep(TRUNCATE_PAUSE);
    }
}

/// A thread running passive checkpoints every interval until dropped.
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread; it opens a connection of its own to `url` at its first checkpoint
    /// (so that opening the storage never waits for it) and retries the connection at every
    /// interval while it fails.
    pub(crate) fn start(
        url: &str,
        database: &str,
        interval: Duration,
        pragmas: Pragmas,
    ) -> Result<Self, StorageError> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = stop.clone();
        let target = Target {
            url: url.to_owned(),
            database: database.to_owned(),
            pragmas,
        };
        let interval = interval.max(Duration::from_millis(1));
        let thread = std::thread::Builder::new()
            .name("shardbox-sqlite-checkpoint".into())
            .spawn(move || run(&target, interval, &signal))
            .map_err(|e| StorageError::Unavailable {
                database: database.to_owned(),
                reason: format!("could not start the checkpoint thread: {e}"),
                advice: "",
                source: Some(Cause::new(e)),
            })?;
        Ok(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }
}

/// The database the thread checkpoints.
struct Target {
    url: String,
    database: String,
    /// The pooled connections' pragmas (busy timeout first).
    pragmas: Pragmas,
}

impl Target {
    fn connect(&self) -> Result<SqliteConnection, String> {
        let mut conn = SqliteConnection::establish(&self.url).map_err(|e| e.to_string())?;
        self.pragmas.apply(&mut conn).map_err(|e| e.to_string())?;
        Ok(conn)
    }

    /// One passive checkpoint, connecting first if needed.
    fn checkpoint(&self, conn: &mut Option<SqliteConnection>) -> Result<CheckpointRow, String> {
        if conn.is_none() {
            *conn = Some(self.connect()?);
        }
        let Some(c) = conn.as_mut() else {
            return Err("no connection".into());
        };
        diesel::sql_query("PRAGMA wal_checkpoint(PASSIVE)")
            .get_result::<CheckpointRow>(c)
            .map_err(|e| {
                // A fresh connection at the next try.
                *conn = None;
                e.to_string()
            })
    }
}

/// The thread's loop: wait an interval (or the stop), checkpoint, repeat.
fn run(target: &Target, interval: Duration, stop: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = stop;
    let database = &target.database;
    let mut conn = None;
    let mut failing = false;
    loop {
        {
            let guard = lock(stopped);
            let (guard, _) = wake
                .wait_timeout_while(guard, interval, |stopped| !*stopped)
                .unwrap_or_else(|p| p.into_inner());
            if *guard {
                return;
            }
        }
        match target.checkpoint(&mut conn) {
            Ok(row) => {
                if failing {
                    tracing::info!(%database, "WAL checkpoints work again");
                    failing = false;
                }
                tracing::trace!(
                    %database,
                    busy = row.busy,
                    wal_pages = row.log,
                    checkpointed = row.checkpointed,
                    "WAL checkpoint"
                );
            }
            // Logged once per outage: the writers' safety-net autocheckpoint still bounds the
            // WAL meanwhile.
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%database, %error, "WAL checkpoint failed; retrying every interval");
            }
            Err(_) => {}
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *lock(stopped) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            // A checkpoint in progress finishes first (it copies at most what the interval
            // let accumulate).
            let _ = thread.join();
        }
    }
}

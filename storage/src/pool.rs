//! Running blocking diesel work off the async runtime.
//!
//! ```text
//!  async caller ──► spawn_blocking { checkout ─► transaction ─► queries } ──► Result
//! ```
//!
//! Every unit of work is one closure run on tokio's blocking pool: the pool checkout, the
//! transaction and its queries happen together there, so no runtime worker thread ever waits
//! on the database. [`Db`] pairs the r2d2 pool with the database's [`DbName`] (its printable
//! name, which every error carries, and the password to keep out of them), and reports every
//! unit of work's outcome to its connection (see [`crate::checkout`]).
//!
//! **At most one blocking thread per pooled connection.** A unit of work takes a permit
//! (one per connection the pool may open) before it goes to the blocking pool; the others
//! wait for one as tasks, not as threads. Before, every unit in flight had a thread of its
//! own, most of them parked in the pool's checkout (or, on SQLite, at the writer's turn):
//! a burst of storage calls — a slow commit, a restart, a busy host — made tokio start that
//! many threads, and under steady traffic tokio hands work to its idle threads in turn, so
//! none ever idled long enough (10 s) to end. The thread count only rose (from 49 to 87 in
//! five minutes of the `soak` workload on SQLite), and with it the memory glibc keeps for
//! the threads' allocations: the soak's RSS rose by 43–72 MiB an hour while the live heap
//! stayed at 16–20 MiB (issue 37).

use crate::checkout::Manager;
use crate::error::{classify_connect, Failure};
use crate::redact::DbName;
use diesel::r2d2::{Builder, HandleError, Pool, R2D2Connection};
use shardbox_core::StorageError;
use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

thread_local! {
    /// The writer gate of the database whose unit of work runs on this thread, if it has one
    /// (see [`Db::gate_writers`] and [`gated`]): a [`WriterGate`] of the database's
    /// connection type.
    static WRITER_GATE: RefCell<Option<Arc<dyn Any + Send + Sync>>> = const { RefCell::new(None) };
}

/// Sets this thread's writer gate for one unit of work, and clears it when dropped (blocking
/// threads are reused by other units).
struct GateScope;

impl GateScope {
    fn enter(gate: Option<Arc<dyn Any + Send + Sync>>) -> Self {
        WRITER_GATE.with(|g| *g.borrow_mut() = gate);
        GateScope
    }
}

impl Drop for GateScope {
    fn drop(&mut self) {
        WRITER_GATE.with(|g| *g.borrow_mut() = None);
    }
}

/// Opens the writer's connection (with the settings of the pool's connections).
pub(crate) type Connect<C> = Box<dyn Fn() -> Result<C, StorageError> + Send + Sync>;

/// The one connection a database's write transactions run on, in turn (see
/// [`Db::gate_writers`]).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // only SQLite gates its writers
pub(crate) struct WriterGate<C> {
    /// The connection, opened at the first write and again after one left it broken.
    writer: Mutex<Option<C>>,
    connect: Connect<C>,
}

impl<C: R2D2Connection> WriterGate<C> {
    /// Runs `write` on the writer connection, holding it.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // only SQLite gates its writers
    fn run<T>(&self, write: impl FnOnce(&mut C) -> Result<T, Failure>) -> Result<T, Failure> {
        let mut slot = self.writer.lock().unwrap_or_else(|poisoned| {
            // A writer panicked, maybe inside its transaction: its connection is not used
            // again.
            self.writer.clear_poison();
            let mut slot = poisoned.into_inner();
            *slot = None;
            slot
        });
        let conn = match &mut *slot {
            Some(conn) => conn,
            empty => empty.insert((self.connect)()?),
        };
        let result = write(conn);
        // A transaction that could not be rolled back leaves the connection unusable, and so
        // does a failure that lost it.
        if conn.is_broken() || result.as_ref().is_err_and(Failure::lost_connection) {
            *slot = None;
        }
        result
    }
}

/// Runs `write` (a write transaction): on the writer connection of the current unit of
/// work's database if it has one (waiting for its turn), else on `conn`. A nested call, or
/// one inside the writer's own work, finds the gate taken and runs on `conn` at once.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // only SQLite gates its writers
pub(crate) fn gated<C: R2D2Connection + 'static, T>(
    conn: &mut C,
    write: impl FnOnce(&mut C) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let Some(gate) = WRITER_GATE.with(|g| g.borrow_mut().take()) else {
        return write(conn);
    };
    let result = match gate.downcast_ref::<WriterGate<C>>() {
        Some(writer) => writer.run(write),
        None => write(conn),
    };
    WRITER_GATE.with(|g| *g.borrow_mut() = Some(gate));
    result
}

/// The longest wait for a connection (or for SQLite's lock): a day.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// An r2d2 pool builder with the values r2d2 would panic on clamped (at least one connection,
/// no more idle connections than connections, a positive checkout timeout), reporting the
/// pool's background connection failures through `tracing`. Connections idle for a while are
/// checked (pinged) at checkout, so that connections a restarted server dropped are replaced,
/// not handed out (see [`crate::checkout`]).
pub(crate) fn pool_builder<C: R2D2Connection + Send + 'static>(
    database: &DbName,
    size: u32,
    min_idle: Option<u32>,
    connection_timeout: Duration,
) -> Builder<Manager<C>> {
    let size = size.max(1);
    Pool::builder()
        .max_size(size)
        .min_idle(min_idle.map(|idle| idle.min(size)))
        // r2d2 adds the timeout to `Instant::now()`, which panics on a huge one: a wait of
        // more than a day is taken as a day.
        .connection_timeout(connection_timeout.clamp(Duration::from_millis(1), MAX_WAIT))
        .test_on_check_out(true)
        .error_handler(Box::new(TracePoolErrors {
            database: database.clone(),
        }))
}

/// Logs the failures r2d2 meets while opening connections in the background, scrubbed of
/// the password (libpq quotes pieces of a malformed URL).
#[derive(Debug)]
struct TracePoolErrors {
    database: DbName,
}

impl HandleError<diesel::r2d2::Error> for TracePoolErrors {
    fn handle_error(&self, error: diesel::r2d2::Error) {
        let error = self.database.scrub(&error.to_string());
        tracing::warn!(database = %self.database, %error, "could not open a pooled connection");
    }
}

/// A connection pool and the name of the database behind it.
pub(crate) struct Db<C: R2D2Connection + Send + 'static> {
    pool: Pool<Manager<C>>,
    name: DbName,
    writers: Option<Arc<WriterGate<C>>>,
    /// One permit per connection the pool may open: a unit of work holds one while it
    /// occupies a blocking thread (see the module doc).
    threads: Arc<Semaphore>,
}

impl<C: R2D2Connection + Send + 'static> Db<C> {
    pub(crate) fn new(pool: Pool<Manager<C>>, name: DbName) -> Self {
        let threads = Arc::new(Semaphore::new(pool.max_size() as usize));
        Db {
            pool,
            name,
            writers: None,
            threads,
        }
    }

    /// Makes this database's write transactions take turns on one connection of their own,
    /// opened by `connect` (see [`gated`]). For SQLite, which runs one writer at a time
    /// anyway:
    /// - a writer waiting for the turn starts the moment the last one commits, where one that
    ///   finds SQLite's write lock taken waits in its busy handler, which sleeps 1, 2, 5,
    ///   10… ms between tries;
    /// - the writer's page cache stays warm. A connection drops its whole cache when it
    ///   starts a transaction after another connection wrote, so writes spread over the pool
    ///   each began by reading their B-tree pages again.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // only SQLite gates its writers
    pub(crate) fn gate_writers(mut self, connect: Connect<C>) -> Self {
        self.writers = Some(Arc::new(WriterGate {
            writer: Mutex::new(None),
            connect,
        }));
        self
    }

    /// The database: file path, or URL with the password redacted.
    pub(crate) fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The database's name and secrets.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn db_name(&self) -> &DbName {
        &self.name
    }

    /// Pool statistics, for `Debug`.
    pub(crate) fn state(&self) -> diesel::r2d2::State {
        self.pool.state()
    }

    /// Runs `work` with a pooled connection on the blocking thread pool.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut C) -> Result<T, Failure> + Send + 'static,
    {
        // Waits for a thread's permit as long as a checkout may wait for a connection; past
        // that, the unit goes on without one and the checkout's own timeout answers.
        let permit = tokio::time::timeout(
            self.pool.connection_timeout(),
            self.threads.clone().acquire_owned(),
        )
        .await
        .ok()
        .and_then(Result::ok);
        let pool = self.pool.clone();
        let name = self.name.clone();
        let writers = self.writers.clone();
        blocking(move || {
            // Held until the unit ends, even if its caller stops waiting for it.
            let _permit = permit;
            let mut conn = pool.get().map_err(|e| classify_connect(e, &name))?;
            let _gate = GateScope::enter(writers.map(|w| w as Arc<dyn Any + Send + Sync>));
            let outcome = work(&mut conn);
            conn.settle(&outcome);
            outcome.map_err(|f| f.into_storage_error(&name))
        })
        .await
    }
}

/// Runs `work` on tokio's blocking thread pool; a typed error (never a panic) outside a tokio
/// runtime or when the task cannot complete.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StorageError> + Send + 'static,
{
    let handle = tokio::runtime::Handle::try_current().map_err(|e| {
        StorageError::Task(format!(
            "shardbox storage must be used inside a tokio runtime: {e}"
        ))
    })?;
    handle
        .spawn_blocking(work)
        .await
        .map_err(|e| StorageError::Task(e.to_string()))?
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, SqliteConnection};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Issue 37 (the soak's RSS): 48 units of work at once on a pool of 2 connections ran on
    /// 48 blocking threads, 46 of them parked in the checkout; tokio kept such threads while
    /// steady work reached each of them within its keep-alive, so the count rose with every
    /// burst. Now units wait for a connection's permit as tasks: a handful of threads serve
    /// them all, whatever the burst.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn units_of_work_occupy_no_more_blocking_threads_than_connections() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("threads.db").to_string_lossy().into_owned();
        let name = DbName::path(path.clone());
        let pool = pool_builder(&name, 2, None, Duration::from_secs(60))
            .build(Manager::<SqliteConnection>::new(path))
            .expect("a pool");
        let db = Arc::new(Db::new(pool, name));
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let units: Vec<_> = (0..48)
            .map(|_| {
                let (db, threads) = (db.clone(), threads.clone());
                tokio::spawn(async move {
                    db.run(move |conn| {
                        threads
                            .lock()
                            .expect("not poisoned")
                            .insert(std::thread::current().id());
                        std::thread::sleep(Duration::from_millis(10));
                        conn.batch_execute("SELECT 1").map_err(Failure::from)
                    })
                    .await
                })
            })
            .collect();
        for unit in units {
            unit.await.expect("the unit's task").expect("the unit");
        }
        let used = threads.lock().expect("not poisoned").len();
        // Two at a time; a unit may start on a fresh thread while the last one's is still
        // on its way back to the idle list: a few more, never one per unit.
        assert!(used <= 8, "48 units of work ran on {used} blocking threads");
    }

    /// A writer gate over a SQLite file in `dir`, counting the connections it opens.
    fn gate(
        dir: &tempfile::TempDir,
        opened: &Arc<AtomicUsize>,
    ) -> Arc<WriterGate<SqliteConnection>> {
        let url = dir.path().join("gate.db").to_string_lossy().into_owned();
        let opened = Arc::clone(opened);
        Arc::new(WriterGate {
            writer: Mutex::new(None),
            connect: Box::new(move || {
                opened.fetch_add(1, Ordering::SeqCst);
                let mut conn = SqliteConnection::establish(&url)
                    .map_err(|e| StorageError::Task(e.to_string()))?;
                conn.batch_execute("CREATE TABLE IF NOT EXISTS t (v INTEGER)")
                    .map_err(|e| StorageError::Task(e.to_string()))?;
                Ok(conn)
            }),
        })
    }

    /// Runs one write the way a unit of work does: inside the gate's scope, on `conn`.
    fn write(
        gate: &Arc<WriterGate<SqliteConnection>>,
        conn: &mut SqliteConnection,
        work: impl FnOnce(&mut SqliteConnection) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let _scope = GateScope::enter(Some(Arc::clone(gate) as Arc<dyn Any + Send + Sync>));
        gated(conn, work)
    }

    #[test]
    fn writes_run_on_one_connection_opened_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opened = Arc::new(AtomicUsize::new(0));
        let gate = gate(&dir, &opened);
        let mut pooled = SqliteConnection::establish(":memory:").expect("memory");
        for v in 0..3 {
            write(&gate, &mut pooled, |conn| {
                conn.batch_execute(&format!("INSERT INTO t VALUES ({v})"))?;
                Ok(())
            })
            .expect("write");
        }
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        // The rows are in the file, not on the connection the unit held.
        assert!(
            pooled.batch_execute("SELECT v FROM t").is_err(),
            "no table in :memory:"
        );
        // Outside a unit's scope, a write runs on the connection given.
        gated(&mut pooled, |conn| {
            Ok(conn.batch_execute("CREATE TABLE here (v INTEGER)")?)
        })
        .expect("ungated");
        pooled
            .batch_execute("SELECT v FROM here")
            .expect("written here");
    }

    #[test]
    fn a_writer_that_panicked_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opened = Arc::new(AtomicUsize::new(0));
        let gate = gate(&dir, &opened);
        let mut pooled = SqliteConnection::establish(":memory:").expect("memory");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write(&gate, &mut pooled, |conn| {
                conn.batch_execute("BEGIN; INSERT INTO t VALUES (1)")?;
                panic!("a writer fails inside its transaction");
            })
        }));
        assert!(panicked.is_err());
        // A fresh connection, outside the abandoned transaction: it can write (the old one
        // would refuse a second BEGIN) and sees nothing of the abandoned insert.
        write(&gate, &mut pooled, |conn| {
            conn.batch_execute("BEGIN; INSERT INTO t VALUES (2); COMMIT")?;
            Ok(())
        })
        .expect("the next write");
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }
}

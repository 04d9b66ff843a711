//! Running blocking diesel work off the async runtime.
//!
//! ```text
//!  async caller ──► spawn_blocking { checkout ─► transaction ─► queries } ──► Result
//! ```
//!
//! Every unit of work is one closure run on tokio's blocking pool: the pool checkout, the
//! transaction and its queries happen together there, so no runtime worker thread ever waits
//! on the database. [`Db`] pairs the r2d2 pool with the database's printable name, which every
//! error carries.

use crate::checkout::Manager;
use crate::error::{classify_connect, Failure};
use diesel::r2d2::{Builder, HandleError, Pool, R2D2Connection};
use shardbox_core::StorageError;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

thread_local! {
    /// The writer gate of the database whose unit of work runs on this thread, if it has one
    /// (see [`Db::gate_writers`] and [`gated`]).
    static WRITER_GATE: RefCell<Option<Arc<Mutex<()>>>> = const { RefCell::new(None) };
}

/// Sets this thread's writer gate for one unit of work, and clears it when dropped (blocking
/// threads are reused by other units).
struct GateScope;

impl GateScope {
    fn enter(gate: Option<Arc<Mutex<()>>>) -> Self {
        WRITER_GATE.with(|g| *g.borrow_mut() = gate);
        GateScope
    }
}

impl Drop for GateScope {
    fn drop(&mut self) {
        WRITER_GATE.with(|g| *g.borrow_mut() = None);
    }
}

/// Runs `write` (a write transaction) holding the writer gate of the current unit of work's
/// database, if it has one. A nested call finds the gate taken and runs at once.
pub(crate) fn gated<T>(write: impl FnOnce() -> T) -> T {
    let Some(gate) = WRITER_GATE.with(|g| g.borrow_mut().take()) else {
        return write();
    };
    let result = {
        // The guarded value is `()`: a panic in another writer leaves nothing inconsistent.
        let _held = gate.lock().unwrap_or_else(|p| p.into_inner());
        write()
    };
    WRITER_GATE.with(|g| *g.borrow_mut() = Some(gate));
    result
}

/// An r2d2 pool builder with the values r2d2 would panic on clamped (at least one connection,
/// no more idle connections than connections, a positive checkout timeout), reporting the
/// pool's background connection failures through `tracing`. Connections idle for a while are
/// checked (pinged) at checkout, so that connections a restarted server dropped are replaced,
/// not handed out (see [`crate::checkout`]).
pub(crate) fn pool_builder<C: R2D2Connection + Send + 'static>(
    database: &str,
    size: u32,
    min_idle: Option<u32>,
    connection_timeout: Duration,
) -> Builder<Manager<C>> {
    let size = size.max(1);
    Pool::builder()
        .max_size(size)
        .min_idle(min_idle.map(|idle| idle.min(size)))
        .connection_timeout(connection_timeout.max(Duration::from_millis(1)))
        .test_on_check_out(true)
        .error_handler(Box::new(TracePoolErrors {
            database: database.to_owned(),
        }))
}

/// Logs the failures r2d2 meets while opening connections in the background.
#[derive(Debug)]
struct TracePoolErrors {
    database: String,
}

impl HandleError<diesel::r2d2::Error> for TracePoolErrors {
    fn handle_error(&self, error: diesel::r2d2::Error) {
        tracing::warn!(database = %self.database, %error, "could not open a pooled connection");
    }
}

/// A connection pool and the name of the database behind it.
pub(crate) struct Db<C: R2D2Connection + Send + 'static> {
    pool: Pool<Manager<C>>,
    name: Arc<str>,
    writers: Option<Arc<Mutex<()>>>,
}

impl<C: R2D2Connection + Send + 'static> Db<C> {
    pub(crate) fn new(pool: Pool<Manager<C>>, name: impl Into<Arc<str>>) -> Self {
        Db {
            pool,
            name: name.into(),
            writers: None,
        }
    }

    /// Makes this pool's write transactions take turns on an in-process mutex before they
    /// ask the database for its write lock (see [`gated`]). For SQLite, which runs one writer
    /// at a time anyway: a writer that finds the lock taken waits in SQLite's busy handler,
    /// which sleeps 1, 2, 5, 10… ms between tries, while a writer waiting on the mutex starts
    /// the moment the last one commits.
    pub(crate) fn gate_writers(mut self) -> Self {
        self.writers = Some(Arc::new(Mutex::new(())));
        self
    }

    /// The database: file path, or URL with the password redacted.
    pub(crate) fn name(&self) -> &str {
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
        let pool = self.pool.clone();
        let name = Arc::clone(&self.name);
        let writers = self.writers.clone();
        blocking(move || {
            let mut conn = pool
                .get()
                .map_err(|e| classify_connect(e.to_string(), &name))?;
            let _gate = GateScope::enter(writers);
            work(&mut conn).map_err(|f| f.into_storage_error(&name))
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

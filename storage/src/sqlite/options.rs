//! SQLite settings: the options a user chooses and the pragmas every pooled connection gets.

use crate::checkout::Pooled;
use crate::migrate::MigrationMode;
use diesel::connection::SimpleConnection;
use diesel::r2d2::CustomizeConnection;
use diesel::SqliteConnection;
use shardbox_core::ExponentialBackoff;
use std::time::Duration;

/// How to open a SQLite database.
///
/// ```
/// use shardbox_storage::SqliteOptions;
/// use std::time::Duration;
/// let options = SqliteOptions::default()
///     .pool_size(4)
///     .busy_timeout(Duration::from_secs(30));
/// assert_eq!(options.pool_size, 4);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Connections in the pool; see [`SqliteOptions::pool_size`].
    pub pool_size: u32,
    /// See [`SqliteOptions::busy_timeout`].
    pub busy_timeout: Duration,
    /// See [`SqliteOptions::connection_timeout`].
    pub connection_timeout: Duration,
    /// See [`SqliteOptions::migrations`].
    pub migrations: MigrationMode,
    /// See [`SqliteOptions::checkpoint_interval`].
    pub checkpoint_interval: Option<Duration>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            pool_size: 8,
            busy_timeout: Duration::from_secs(10),
            connection_timeout: Duration::from_secs(30),
            migrations: MigrationMode::Apply,
            checkpoint_interval: Some(Duration::from_millis(100)),
        }
    }
}

impl SqliteOptions {
    /// Connections in the pool (default 8, at least 1). SQLite runs one writer at a time;
    /// more connections serve concurrent readers.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long a writer waits for the database lock held by another writer before failing
    /// with "database is locked" (default 10 s; `PRAGMA busy_timeout`).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How long a unit of work waits for a free pooled connection (default 30 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Whether opening may migrate the schema (default [`MigrationMode::Apply`]).
    pub fn migrations(mut self, mode: MigrationMode) -> Self {
        self.migrations = mode;
        self
    }

    /// How often a background thread copies the write-ahead log into the database file
    /// (default every 100 ms). Commits then never checkpoint themselves unless the WAL grows
    /// past 10,000 pages (about 40 MiB) between two runs of the thread. `None` leaves
    /// checkpoints to SQLite's default: inside the commit that takes the WAL past 1,000
    /// pages, holding the write lock while it copies and syncs (see docs/storage.md).
    pub fn checkpoint_interval(mut self, interval: Option<Duration>) -> Self {
        self.checkpoint_interval = interval;
        self
    }
}

/// WAL pages past which a commit checkpoints itself when a background thread checkpoints:
/// a safety net the thread keeps the WAL far below.
pub(crate) const SAFETY_NET_PAGES: u32 = 10_000;
/// SQLite's own default of `wal_autocheckpoint`, used without the background thread.
pub(crate) const SQLITE_DEFAULT_PAGES: u32 = 1_000;
/// `journal_size_limit`: the WAL file is cut back to this size (64 MiB) when it restarts,
/// so a burst that grew it does not keep the disk space.
const WAL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

/// The pause between two tries of the switch to WAL while the file is locked: 1 ms, doubling,
/// at most 50 ms — short, since the other connection's switch takes a moment, and polite
/// enough not to spin against it.
const WAL_SWITCH_PAUSE: ExponentialBackoff =
    ExponentialBackoff::new(Duration::from_millis(1), Duration::from_millis(50));

/// The pragmas set on every connection when the pool opens it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pragmas {
    pub(crate) busy_timeout: Duration,
    /// `wal_autocheckpoint`: WAL pages after which a commit checkpoints.
    pub(crate) autocheckpoint: u32,
}

impl Pragmas {
    /// Applies the pragmas. `busy_timeout` comes first, and the switch to WAL is retried
    /// for up to that long: SQLite answers "database is locked" at once, without its busy
    /// handler, when the switch meets another connection of a file not yet in WAL mode (two
    /// processes opening a new file together).
    pub(crate) fn apply(&self, conn: &mut SqliteConnection) -> diesel::QueryResult<()> {
        let ms = u64::try_from(self.busy_timeout.as_millis()).unwrap_or(u64::MAX);
        let ms = ms.min(i32::MAX as u64);
        conn.batch_execute(&format!("PRAGMA busy_timeout = {ms};"))?;
        // A huge timeout must not overflow the deadline (it would panic): at most a day.
        let deadline = std::time::Instant::now() + self.busy_timeout.min(crate::pool::MAX_WAIT);
        let mut locked = 0u32;
        loop {
            match conn.batch_execute("PRAGMA journal_mode = WAL;") {
                Err(e) if is_locked(&e) && std::time::Instant::now() < deadline => {
                    locked = locked.saturating_add(1);
                    std::thread::sleep(WAL_SWITCH_PAUSE.delay(locked));
                }
                done => break done?,
            }
        }
        conn.batch_execute(&format!(
            "PRAGMA synchronous = NORMAL;
             PRAGMA foreign_keys = ON;
             PRAGMA temp_store = MEMORY;
             PRAGMA wal_autocheckpoint = {};
             PRAGMA journal_size_limit = {WAL_SIZE_LIMIT};",
            self.autocheckpoint
        ))
    }
}

/// Whether `error` is SQLite's "database is locked" (`SQLITE_BUSY`).
fn is_locked(error: &diesel::result::Error) -> bool {
    matches!(error, diesel::result::Error::DatabaseError(_, info) if info.message().contains("locked"))
}

impl CustomizeConnection<Pooled<SqliteConnection>, diesel::r2d2::Error> for Pragmas {
    fn on_acquire(&self, conn: &mut Pooled<SqliteConnection>) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wal_switch_pauses_double_from_1_ms_to_50_ms() {
        let pauses: Vec<u128> = (1..=8)
            .map(|n| WAL_SWITCH_PAUSE.delay(n).as_millis())
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 50, 50]);
    }
}

//! Hearing other nodes' writes on PostgreSQL: `LISTEN` on a dedicated connection for the
//! notifications every write sends after its commit (see the `notify` module).
//!
//! ```text
//!  listener thread: connect ─► search_path, application_name ─► LISTEN "<channel>"
//!                   ─► on_missed_writes (writes made while not listening were not heard)
//!    every TICK          read the notification queue (non-blocking) ─► on_write(shards)
//!    every HEALTH_CHECK  of silence: SELECT 1
//!    error ─► disconnected ─► wait (100 ms, doubling up to 5 s) ─► connect again
//! ```
//!
//! The channel is per schema — `shardbox_shards:<schema>`, or the schema's md5 when the name
//! would pass PostgreSQL's 63-byte identifier limit — so applications and test runs that
//! share a database in different schemas do not wake each other. Writers and the listener
//! compute it with the same SQL expression from `current_schema()`, so they always agree.
//!
//! diesel exposes libpq's notification queue only as a non-blocking read
//! (`PgConnection::notifications_iter`), not the socket to wait on, so the listener runs on
//! a thread of its own (never on an async runtime worker) and reads every [`TICK`]: at most
//! that much latency, for a non-blocking `recv` per tick. This module is not the part that
//! guarantees delivery: the runner's poller is, so a lost notification only delays a message.

use super::options::{quote_identifier, SearchPath};
use diesel::connection::{Connection, SimpleConnection};
use diesel::dsl::sql;
use diesel::sql_types::Text;
use diesel::{PgConnection, RunQueryDsl};
use shardbox_core::listener::{parse_shards, ListenerControl};
use shardbox_core::{ListenerHandle, NodeId, ShardObserver, StorageError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the listener reads its connection's notification queue.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// After this long without a notification, the listener checks its connection.
const HEALTH_CHECK: Duration = Duration::from_secs(2);

/// The channel of the connection's schema, as SQL (see the module docs).
macro_rules! channel_sql {
    () => {
        "(SELECT 'shardbox_shards:' || CASE WHEN octet_length(s) <= 47 THEN s ELSE md5(s) END \
         FROM (SELECT COALESCE(current_schema(), '') AS s) AS cs)"
    };
}
pub(crate) use channel_sql;

/// The delay before the next connection attempt: doubles from `min` to `max` while attempts
/// fail, back to `min` after a success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReconnectDelay {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl ReconnectDelay {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        let max = max.max(min);
        ReconnectDelay {
            min,
            max,
            next: min,
        }
    }

    /// The delay before the next attempt; the one after will be twice as long (capped).
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// A connection succeeded.
    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}

/// Where the listener connects: the pool's URL and schema.
pub(crate) struct ListenTarget {
    /// The URL (with its password: never logged).
    pub(crate) url: String,
    /// The schema, as for the pool.
    pub(crate) schema: Option<String>,
    /// The URL with the password redacted, for logs.
    pub(crate) database: String,
}

/// Starts the listening thread of `node`.
pub(crate) fn start(
    target: ListenTarget,
    node: &NodeId,
    shard_count: u32,
    observer: Arc<dyn ShardObserver>,
) -> Result<ListenerHandle, StorageError> {
    let (handle, control) = ListenerHandle::new(node);
    std::thread::Builder::new()
        .name("shardbox-listen".into())
        .spawn(move || run(target, shard_count, observer, control))
        .map_err(|e| StorageError::Task(format!("could not start the listener thread: {e}")))?;
    Ok(handle)
}

fn run(
    target: ListenTarget,
    shard_count: u32,
    observer: Arc<dyn ShardObserver>,
    control: ListenerControl,
) {
    let span = tracing::info_span!("listener", node = %control.node(), database = %target.database);
    let _entered = span.enter();
    let mut delay = ReconnectDelay::new(Duration::from_millis(100), Duration::from_secs(5));
    while !control.is_stopped() {
        match open(&target, control.node()) {
            Ok((mut conn, channel)) => {
                control.connected();
                delay.reset();
                tracing::info!(%channel, "listening for other nodes' writes");
                observer.on_missed_writes();
                match pump(&mut conn, shard_count, observer.as_ref(), &control) {
                    Ok(()) => break,
                    Err(reason) => {
                        control.disconnected();
                        tracing::warn!(%reason, "listen connection lost; polling meanwhile, reconnecting");
                    }
                }
            }
            Err(reason) => {
                tracing::warn!(%reason, "could not listen for other nodes' writes; polling meanwhile, retrying");
            }
        }
        let until = Instant::now() + delay.next_delay();
        while Instant::now() < until && !control.is_stopped() {
            std::thread::sleep(TICK.max(Duration::from_millis(20)));
        }
    }
    tracing::debug!("listener stopped");
}

/// A dedicated connection listening on the schema's channel, and the channel's name.
fn open(target: &ListenTarget, node: &str) -> Result<(PgConnection, String), String> {
    let mut conn = PgConnection::establish(&target.url).map_err(|e| e.to_string())?;
    let listen = |conn: &mut PgConnection| -> diesel::QueryResult<String> {
        SearchPath {
            schema: target.schema.clone(),
        }
        .apply(conn)?;
        // Names the connection in pg_stat_activity, for operators (and tests).
        diesel::sql_query("SELECT set_config('application_name', $1, false)")
            .bind::<Text, _>(format!("shardbox-listen {node}"))
            .execute(conn)?;
        let channel: String = diesel::select(sql::<Text>(channel_sql!())).get_result(conn)?;
        conn.batch_execute(&format!("LISTEN {}", quote_identifier(&channel)))?;
        Ok(channel)
    };
    let channel = listen(&mut conn).map_err(|e| e.to_string())?;
    Ok((conn, channel))
}

/// Hands notifications to `observer` until stopped (`Ok`) or the connection fails (`Err`).
fn pump(
    conn: &mut PgConnection,
    shard_count: u32,
    observer: &dyn ShardObserver,
    control: &ListenerControl,
) -> Result<(), String> {
    let mut checked = Instant::now();
    let mut shards = Vec::new();
    loop {
        if control.is_stopped() {
            return Ok(());
        }
        let mut heard = 0;
        for notification in conn.notifications_iter() {
            let notification = notification.map_err(|e| e.to_string())?;
            heard += 1;
            if !parse_shards(&notification.payload, shard_count, &mut shards) {
                tracing::debug!(payload = %notification.payload, "ignored what is not a shard of this node in a notification");
            }
        }
        if heard > 0 {
            control.notified(heard);
            shards.sort_unstable();
            shards.dedup();
            observer.on_write(&shards);
            shards.clear();
            checked = Instant::now();
        } else if checked.elapsed() >= HEALTH_CHECK {
            diesel::sql_query("SELECT 1")
                .execute(conn)
                .map_err(|e| e.to_string())?;
            checked = Instant::now();
        }
        std::thread::sleep(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delays_double_up_to_the_cap_and_reset_after_a_success() {
        let ms = Duration::from_millis;
        let mut d = ReconnectDelay::new(ms(100), ms(500));
        let delays: Vec<_> = (0..5).map(|_| d.next_delay()).collect();
        assert_eq!(delays, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        d.reset();
        assert_eq!(d.next_delay(), ms(100));
        assert_eq!(
            ReconnectDelay::new(ms(10), ms(1)).next_delay(),
            ms(10),
            "a cap below the minimum is raised to it"
        );
    }
}

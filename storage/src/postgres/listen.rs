//! Hearing other nodes' writes on PostgreSQL: `LISTEN` on a dedicated connection for the
//! notifications every write sends after its commit (see the `notify` module).
//!
//! ```text
//!  listener thread: connect ─► search_path, application_name ─► LISTEN "<channel>"
//!                   ─► on_missed_writes (writes made while not listening were not heard)
//!    every TICK          read the notification queue (non-blocking) ─► on_write(shards),
//!                        skipping this instance's own writes (see OwnEcho)
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
use crate::redact::DbName;
use diesel::connection::{Connection, SimpleConnection};
use diesel::dsl::sql;
use diesel::sql_types::Text;
use diesel::{PgConnection, RunQueryDsl};
use shardbox_core::storage::listener::{
    new_origin, outcome_shards, parse_shards, split_origin, ListenerControl,
};
use shardbox_core::sync::lock;
use shardbox_core::{
    ExponentialBackoff, ListenerHandle, NodeId, ShardIndex, ShardObserver, StorageError,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often the listener reads its connection's notification queue: a message sent by
/// another node waits for it half a tick on average. At 5 ms, the two-node `latency`
/// benchmark's p50 was 6.0–6.6 ms; at 1 ms 4.7–4.9 ms (p99 24.6–28.4 → 20.4–23.3 ms), for
/// about 2 % more CPU (three runs each, back to back).
pub(crate) const TICK: Duration = Duration::from_millis(1);

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
/// fail, back to `min` after a success. The listener's count of failures since it last
/// connected; the delays are the shared [`ExponentialBackoff`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReconnectDelay {
    backoff: ExponentialBackoff,
    failures: u32,
}

impl ReconnectDelay {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        // A cap below the minimum is raised to it: the listener never retries faster than
        // `min` (the shared back-off would let the cap win).
        ReconnectDelay {
            backoff: ExponentialBackoff::new(min, max.max(min)),
            failures: 0,
        }
    }

    /// The delay before the next attempt; the one after will be twice as long (capped).
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.backoff.delay(self.failures)
    }

    /// A connection succeeded.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A storage instance's own writes: heard by its listeners in process, not by notification.
///
/// A write's notification comes back to the writing process's own listener a millisecond or
/// so after the commit. The node that wrote has usually woken those shards already
/// (`Delivery::notify`), so the echo was a second wake and a page read that found nothing
/// (about a quarter of all page reads in the two-node `latency` benchmark). Each instance
/// therefore names its notifications with an origin of its own; after a commit it wakes the
/// observers of its own running listeners at once (whoever made the write: a node, another
/// node sharing the instance, or a direct `Storage` call), and its listeners skip the
/// instance's notifications when they arrive.
#[derive(Clone)]
pub(crate) struct OwnEcho {
    origin: Arc<str>,
    local: Arc<Mutex<LocalObservers>>,
    registered: Arc<AtomicU64>,
}

impl std::fmt::Debug for OwnEcho {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnEcho")
            .field("origin", &self.origin)
            .field("listeners", &self.lock().len())
            .finish()
    }
}

impl OwnEcho {
    /// A fresh origin, no listeners.
    pub(crate) fn new() -> Self {
        OwnEcho {
            origin: Arc::from(new_origin()),
            local: Arc::new(Mutex::new(Vec::new())),
            registered: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The origin the instance's notifications carry.
    pub(crate) fn origin(&self) -> Arc<str> {
        self.origin.clone()
    }

    /// Rows were committed to `shards` through this instance: wakes its listeners' observers
    /// now, as the notification would a moment later.
    pub(crate) fn written(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        let observers: Vec<_> = self.lock().iter().map(|(_, o)| o.clone()).collect();
        for observer in observers {
            observer.on_write(shards);
        }
    }

    /// Stages of `shards` committed command outcomes through this instance: tells its
    /// listeners' observers now, as the notification would a moment later.
    pub(crate) fn decided(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        let observers: Vec<_> = self.lock().iter().map(|(_, o)| o.clone()).collect();
        for observer in observers {
            observer.on_outcomes(shards);
        }
    }

    /// Whether a notification from `origin` is this instance's own (its listeners heard the
    /// write in process already).
    fn is_own(&self, origin: Option<&str>) -> bool {
        origin == Some(&*self.origin)
    }

    /// Registers a listener's observer for as long as the guard lives.
    fn enter(&self, observer: Arc<dyn ShardObserver>) -> LocalListener {
        let id = self.registered.fetch_add(1, Ordering::SeqCst);
        self.lock().push((id, observer));
        LocalListener {
            echo: self.clone(),
            id,
        }
    }

    fn lock(&self) -> MutexGuard<'_, LocalObservers> {
        // A list of observers: consistent whatever panicked while holding it.
        lock(&self.local)
    }
}

/// The observers of an instance's running listeners, by registration number.
type LocalObservers = Vec<(u64, Arc<dyn ShardObserver>)>;

/// One running listener of an instance (see [`OwnEcho`]); unregistered when dropped.
struct LocalListener {
    echo: OwnEcho,
    id: u64,
}

impl Drop for LocalListener {
    fn drop(&mut self) {
        self.echo.lock().retain(|(id, _)| *id != self.id);
    }
}

/// Where the listener (and the notifier, see the `notify` module) connects: the pool's URL
/// and schema.
pub(crate) struct ListenTarget {
    /// The URL (with its password: never logged).
    pub(crate) url: String,
    /// The schema, as for the pool.
    pub(crate) schema: Option<String>,
    /// The URL with the password redacted, for logs, and the password to scrub from what
    /// libpq says.
    pub(crate) database: DbName,
    /// The instance's own notifications.
    pub(crate) echo: OwnEcho,
}

/// Starts the listening thread of `node`.
pub(crate) fn start(
    target: ListenTarget,
    node: &NodeId,
    shard_count: u32,
    observer: Arc<dyn ShardObserver>,
) -> Result<ListenerHandle, StorageError> {
    let (handle, control) = ListenerHandle::new(node);
    // Registered from here, not from the thread's start: writes from now on wake it.
    let registered = target.echo.enter(observer.clone());
    std::thread::Builder::new()
        .name("shardbox-listen".into())
        .spawn(move || {
            let _registered = registered;
            run(target, shard_count, observer, control)
        })
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
                match pump(
                    &mut conn,
                    &target.echo,
                    shard_count,
                    observer.as_ref(),
                    &control,
                ) {
                    Ok(()) => break,
                    Err(reason) => {
                        control.disconnected();
                        let reason = target.database.scrub(&reason);
                        tracing::warn!(%reason, "listen connection lost; polling meanwhile, reconnecting");
                    }
                }
            }
            Err(reason) => {
                let reason = target.database.scrub(&reason);
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
    echo: &OwnEcho,
    shard_count: u32,
    observer: &dyn ShardObserver,
    control: &ListenerControl,
) -> Result<(), String> {
    let mut checked = Instant::now();
    let mut shards = Vec::new();
    let mut decided = Vec::new();
    loop {
        if control.is_stopped() {
            return Ok(());
        }
        let mut heard = 0;
        for notification in conn.notifications_iter() {
            let notification = notification.map_err(|e| e.to_string())?;
            heard += 1;
            let (origin, list) = split_origin(&notification.payload);
            if echo.is_own(origin) {
                continue;
            }
            let (list, into) = match outcome_shards(list) {
                Some(list) => (list, &mut decided),
                None => (list, &mut shards),
            };
            if !parse_shards(list, shard_count, into) {
                tracing::debug!(payload = %notification.payload, "ignored what is not a shard of this node in a notification");
            }
        }
        if heard > 0 {
            control.notified(heard);
            if !shards.is_empty() {
                shards.sort_unstable();
                shards.dedup();
                for shard in &shards {
                    tracing::trace!(target: "shardbox::latency", point = "heard", node = control.node(), shard = shard.0, key = 0);
                }
                observer.on_write(&shards);
                shards.clear();
            }
            if !decided.is_empty() {
                decided.sort_unstable();
                decided.dedup();
                observer.on_outcomes(&decided);
                decided.clear();
            }
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
pub(super) mod tests {
    use super::*;
    use crate::conformance::fixtures::{command, messages};
    use crate::conformance::{pg_url, TestSchema};
    use shardbox_core::storage::InboxStore;
    use shardbox_core::{ShardIndex, WriteListener};
    use std::sync::Mutex;

    /// Records the shards it is told of.
    #[derive(Default)]
    pub(in crate::postgres) struct Heard(Mutex<Vec<u32>>);

    impl ShardObserver for Heard {
        fn on_write(&self, shards: &[ShardIndex]) {
            self.0.lock().unwrap().extend(shards.iter().map(|s| s.0));
        }
    }

    impl Heard {
        fn take(&self) -> Vec<u32> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    pub(in crate::postgres) async fn until(what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits for `shard` in what `heard` was told, and returns everything it was told by then.
    pub(in crate::postgres) async fn hears(heard: &Heard, shard: u32) -> Vec<u32> {
        let mut got = Vec::new();
        until(&format!("shard {shard}"), || {
            got.extend(heard.take());
            got.contains(&shard)
        })
        .await;
        got
    }

    /// An instance's writes wake its listeners at once, in process, and not again when their
    /// notification comes back; another instance's writes are heard by notification. Every
    /// listener of the instance hears its writes, whoever made them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn own_writes_are_heard_at_once_and_not_again_by_notification() {
        let Some(url) = pg_url("own_writes_are_heard_at_once") else {
            return;
        };
        let schema = TestSchema::new(&url, "own_echo");
        let (own, other) = (schema.connect(2).await, schema.connect(2).await);
        let heard = Arc::new(Heard::default());
        let first = own
            .listen(&NodeId("first".into()), 16, heard.clone())
            .expect("listen");
        until("listening", || first.stats().connected).await;
        own.write(messages(vec![command(3, "a", "s1")]))
            .await
            .expect("own write");
        assert_eq!(heard.take(), [3], "heard when the write returned");
        // The notification arrives (and is counted), but wakes nothing more.
        until("the own notification", || first.stats().notifications == 1).await;
        assert_eq!(heard.take(), Vec::<u32>::new(), "own write heard back");
        other
            .write(messages(vec![command(5, "b", "s2")]))
            .await
            .expect("other write");
        assert_eq!(hears(&heard, 5).await, [5]);

        let second_heard = Arc::new(Heard::default());
        let second = own
            .listen(&NodeId("second".into()), 16, second_heard.clone())
            .expect("listen");
        until("second listening", || second.stats().connected).await;
        own.write(messages(vec![command(6, "c", "s3")]))
            .await
            .expect("own write, two listeners");
        assert_eq!(heard.take(), [6]);
        assert_eq!(second_heard.take(), [6]);

        drop(second);
        until("the second listener to stop", || {
            own.backend.echo.lock().len() == 1
        })
        .await;
        let before = first.stats().notifications;
        own.write(messages(vec![command(7, "d", "s4")]))
            .await
            .expect("own write, one listener again");
        until("the own notification", || {
            first.stats().notifications == before + 1
        })
        .await;
        assert_eq!(heard.take(), [7], "once");
        assert_eq!(
            second_heard.take(),
            Vec::<u32>::new(),
            "a stopped listener hears nothing"
        );
    }

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

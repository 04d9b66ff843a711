//! Telling the other nodes about writes: after a transaction that wrote inbox rows commits,
//! its shards go to this storage's notifier thread, which sends them with `pg_notify` on a
//! connection of its own, coalescing whatever arrives while it sends.
//!
//! ```text
//!  write / stage commit ─► COMMIT ─► Notifier::written(shards)   (a set insert, no I/O)
//!  notifier thread: wait for shards ─► take them all
//!                   ─► SELECT pg_notify(channel, p) FROM unnest('{<origin>;3,17,40', …}')
//!                      (one statement, its own transaction, committed without a WAL flush)
//!  stage commit with command outcomes ─► Notifier::decided(shard) ─► '<origin>;!3', with the
//!                   next round of writes, or alone once it waited OUTCOME_DELAY for one
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
//!
//! Why a connection of its own, with `synchronous_commit = off`: a transaction that notifies
//! gets a transaction id, so its commit waits for a WAL flush like a write's — and holds that
//! database-wide lock meanwhile, so every node's notifications queue behind each other's
//! flushes (every stage that decides command outcomes notifies too). A notification is a hint
//! that writes nothing: it needs no durability, and an asynchronous commit delivers it to the
//! listeners as soon as it is committed in memory. From the pool the notifier also waited for
//! a connection behind the node's own writers and readers. Together these were most of a
//! message's way from its send's commit to its handler on another node (see
//! docs/performance-log.md, "Two-node latency on PostgreSQL").

use super::listen::{channel_sql, ListenTarget};
use super::options::SearchPath;
use diesel::connection::{Connection, SimpleConnection};
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{Array, Text};
use diesel::{PgConnection, QueryResult, RunQueryDsl};
use shardbox_core::storage::listener::{origin_payloads, outcome_payloads};
use shardbox_core::sync::lock;
use shardbox_core::ShardIndex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Largest notification payload sent; PostgreSQL's limit is 8000 bytes.
const MAX_PAYLOAD: usize = 7900;

/// How long decided outcomes wait for a round of writes to go with, before they go alone.
/// Writes wake another node's handlers and go at once; outcomes only wake senders waiting on
/// another node (`Shardbox::outcome`), which this delays by at most this much. Nearly every
/// stage that handles a command decides its outcome, so alone they were a round each: in
/// the two-node `latency` benchmark at 1,000 msgs/s 1.05 notifying transactions per message,
/// each waking every node's listener, 0.57 with them going along (see docs/performance-log.md).
const OUTCOME_DELAY: Duration = Duration::from_millis(5);

/// The notifier's session: its notifying transactions commit without waiting for the WAL
/// flush (see the module docs).
const SESSION: &str = "SET synchronous_commit = off";

#[derive(Default)]
struct Pending {
    shards: BTreeSet<u32>,
    /// Shards whose stages committed command outcomes (sent marked, see
    /// `listener::outcome_payloads`).
    outcomes: BTreeSet<u32>,
    /// When the oldest of `outcomes` was decided.
    outcomes_since: Option<Instant>,
    closed: bool,
}

impl Pending {
    /// Whether a round is due at `now` (`Ok`), or how long to wait for one at most (`Err`,
    /// `None`: until woken). Writes go at once, and take the outcomes along; outcomes alone
    /// wait up to [`OUTCOME_DELAY`] for writes; a closing notifier sends what it has.
    fn round_due(&self, now: Instant) -> Result<(), Option<Duration>> {
        if !self.shards.is_empty() || (self.closed && !self.outcomes.is_empty()) {
            return Ok(());
        }
        if self.outcomes.is_empty() {
            return Err(None);
        }
        // Outcomes without a time (`decided` always gives one): they go at once.
        let Some(since) = self.outcomes_since else {
            return Ok(());
        };
        match (since + OUTCOME_DELAY).checked_duration_since(now) {
            Some(left) if !left.is_zero() => Err(Some(left)),
            _ => Ok(()),
        }
    }
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// Rounds sent (each one notifying transaction).
    rounds: AtomicU64,
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
    /// Starts the notifier thread, which connects to `target` (the pool's URL and schema)
    /// and names its notifications `origin`.
    pub(crate) fn start(target: ListenTarget, origin: Arc<str>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            rounds: AtomicU64::new(0),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("shardbox-notify".into())
            .spawn(move || run(&thread_shared, &target, &origin))?;
        Ok(Notifier { shared })
    }

    /// Rows were committed to `shards`: tell the other nodes soon.
    pub(crate) fn written(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        for shard in shards {
            tracing::trace!(target: "shardbox::latency", point = "notify", node = "", shard = shard.0, key = 0);
        }
        self.shared.lock().shards.extend(shards.iter().map(|s| s.0));
        self.shared.wake.notify_one();
    }

    /// The rounds sent so far.
    #[cfg(test)]
    pub(crate) fn rounds(&self) -> u64 {
        self.shared.rounds.load(Ordering::Relaxed)
    }

    /// Stages of `shards` committed command outcomes: tell the other nodes' waiting senders
    /// soon (with the next writes, or within [`OUTCOME_DELAY`]).
    pub(crate) fn decided(&self, shards: &[ShardIndex]) {
        if shards.is_empty() {
            return;
        }
        let mut pending = self.shared.lock();
        if pending.outcomes.is_empty() {
            pending.outcomes_since = Some(Instant::now());
        }
        pending.outcomes.extend(shards.iter().map(|s| s.0));
        drop(pending);
        self.shared.wake.notify_one();
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

fn run(shared: &Shared, target: &ListenTarget, origin: &str) {
    let database = &target.database;
    // Connected before the first write needs it; again after a failure, at the next round.
    let mut conn = connect(target)
        .map_err(|error| {
            let error = database.scrub(&error);
            tracing::debug!(%database, %error, "could not open the notifier's connection; trying again with the first write");
        })
        .ok();
    loop {
        let (shards, outcomes): (Vec<ShardIndex>, Vec<ShardIndex>) = {
            let mut pending = shared.lock();
            loop {
                match pending.round_due(Instant::now()) {
                    Ok(()) => break,
                    Err(_) if pending.closed => return,
                    Err(None) => {
                        pending = shared.wake.wait(pending).unwrap_or_else(|p| p.into_inner());
                    }
                    Err(Some(left)) => {
                        pending = shared
                            .wake
                            .wait_timeout(pending, left)
                            .map_or_else(|p| p.into_inner().0, |(p, _)| p);
                    }
                }
            }
            pending.outcomes_since = None;
            let take = |set: &mut BTreeSet<u32>| -> Vec<ShardIndex> {
                std::mem::take(set).into_iter().map(ShardIndex).collect()
            };
            (take(&mut pending.shards), take(&mut pending.outcomes))
        };
        let mut payloads = origin_payloads(origin, &shards, MAX_PAYLOAD);
        payloads.extend(outcome_payloads(origin, &outcomes, MAX_PAYLOAD));
        let sent = match conn.as_mut() {
            Some(c) => send(c, payloads),
            None => connect(target).and_then(|mut c| {
                let sent = send(&mut c, payloads);
                conn = Some(c);
                sent
            }),
        };
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        for shard in &shards {
            tracing::trace!(target: "shardbox::latency", point = "notified", node = "", shard = shard.0, key = 0);
        }
        if let Err(error) = sent {
            // Only a delay: the other nodes' pollers find the rows. The connection may be
            // gone: the next round opens a new one.
            conn = None;
            let error = database.scrub(&error);
            tracing::debug!(%database, %error, shards = shards.len(), "could not notify other nodes of writes");
        }
    }
}

/// The notifier's connection: the pool's schema, asynchronous commits.
fn connect(target: &ListenTarget) -> Result<PgConnection, String> {
    let mut conn = PgConnection::establish(&target.url).map_err(|e| e.to_string())?;
    SearchPath {
        schema: target.schema.clone(),
    }
    .apply(&mut conn)
    .and_then(|()| conn.batch_execute(SESSION))
    .map_err(|e| e.to_string())?;
    Ok(conn)
}

/// Sends every payload in one statement (its own transaction: one round trip).
fn send(conn: &mut PgConnection, payloads: Vec<String>) -> Result<(), String> {
    Notify {
        payloads: &payloads,
    }
    .execute(conn)
    .map(drop)
    .map_err(|e| e.to_string())
}

/// `SELECT pg_notify(<channel>, p) FROM unnest($1) AS p`, kept prepared on the notifier's
/// connection: the same text every round (a `sql_query` was parsed and planned at each one,
/// about one notification per message).
struct Notify<'a> {
    payloads: &'a [String],
}

impl QueryFragment<Pg> for Notify<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(concat!(
            "SELECT pg_notify(",
            channel_sql!(),
            ", p) FROM unnest("
        ));
        out.push_bind_param::<Array<Text>, _>(self.payloads)?;
        out.push_sql(") AS p");
        Ok(())
    }
}

impl QueryId for Notify<'_> {
    type QueryId = Notify<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl RunQueryDsl<PgConnection> for Notify<'_> {}

#[cfg(test)]
mod tests {
    use super::super::listen::tests::{hears, until, Heard};
    use super::*;
    use crate::conformance::{pg_url, TestSchema};
    use shardbox_core::{NodeId, WriteListener};
    use std::time::{Duration, Instant};

    #[test]
    fn writes_go_at_once_and_outcomes_alone_wait_for_them_a_little() {
        let now = Instant::now();
        let mut p = Pending::default();
        assert_eq!(
            p.round_due(now),
            Err(None),
            "nothing to send: wait until woken"
        );
        p.outcomes.insert(3);
        assert_eq!(
            p.round_due(now),
            Ok(()),
            "outcomes without a time go at once"
        );
        p.outcomes_since = Some(now);
        assert_eq!(p.round_due(now), Err(Some(OUTCOME_DELAY)));
        let later = now + OUTCOME_DELAY / 5;
        assert_eq!(
            p.round_due(later),
            Err(Some(OUTCOME_DELAY - OUTCOME_DELAY / 5))
        );
        assert_eq!(
            p.round_due(now + OUTCOME_DELAY),
            Ok(()),
            "waited long enough"
        );
        assert_eq!(p.round_due(now + 2 * OUTCOME_DELAY), Ok(()));
        p.shards.insert(5);
        assert_eq!(p.round_due(now), Ok(()), "writes take the outcomes along");
        p.outcomes.clear();
        assert_eq!(p.round_due(now), Ok(()), "writes alone go at once");
        let mut closing = Pending {
            closed: true,
            ..Pending::default()
        };
        assert_eq!(
            closing.round_due(now),
            Err(None),
            "nothing left: the thread ends"
        );
        closing.outcomes.insert(1);
        closing.outcomes_since = Some(now);
        assert_eq!(
            closing.round_due(now),
            Ok(()),
            "a closing notifier sends what it has"
        );
    }

    /// Hears outcome notifications, and when it last heard one.
    #[derive(Default)]
    struct Decided(
        std::sync::Mutex<Vec<u32>>,
        std::sync::Mutex<Option<Instant>>,
    );

    impl shardbox_core::ShardObserver for Decided {
        fn on_write(&self, _: &[ShardIndex]) {}
        fn on_outcomes(&self, shards: &[ShardIndex]) {
            self.0.lock().unwrap().extend(shards.iter().map(|s| s.0));
            *self.1.lock().unwrap() = Some(Instant::now());
        }
    }

    /// Decided outcomes go with the next round of writes (one notifying transaction for
    /// both), and alone once they waited [`OUTCOME_DELAY`]; either way the other nodes hear
    /// them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn decided_outcomes_go_with_the_next_writes() {
        let Some(url) = pg_url("decided_outcomes_go_with_the_next_writes") else {
            return;
        };
        let schema = TestSchema::new(&url, "notify_outcomes");
        let (own, other) = (schema.connect(1).await, schema.connect(1).await);
        let (heard, decided) = (Arc::new(Heard::default()), Arc::new(Decided::default()));
        let writes = other
            .listen(&NodeId("writes".into()), 16, heard.clone())
            .expect("listen");
        let outcomes = other
            .listen(&NodeId("outcomes".into()), 16, decided.clone())
            .expect("listen");
        until("listening", || {
            writes.stats().connected && outcomes.stats().connected
        })
        .await;
        // A few tries: this thread may be descheduled for longer than the delay between
        // the two calls, and then the outcomes rightly go alone.
        let mut together = Vec::new();
        for _ in 0..5 {
            let before = own.backend.notifier.rounds();
            own.backend.notifier.decided(&[ShardIndex(3)]);
            own.backend.notifier.written(&[ShardIndex(5)]);
            assert_eq!(hears(&heard, 5).await, [5]);
            until("the outcome of shard 3", || {
                std::mem::take(&mut *decided.0.lock().unwrap()).contains(&3)
            })
            .await;
            together.push(own.backend.notifier.rounds() - before);
        }
        assert!(
            together.contains(&1),
            "the outcomes never went with the writes: rounds per try {together:?}"
        );
        let before = own.backend.notifier.rounds();
        let started = Instant::now();
        own.backend.notifier.decided(&[ShardIndex(7)]);
        until("the outcome of shard 7 alone", || {
            decided.0.lock().unwrap().contains(&7)
        })
        .await;
        let heard_after = decided.1.lock().unwrap().expect("heard") - started;
        assert!(
            heard_after >= OUTCOME_DELAY,
            "heard alone after {heard_after:?}, sent before waiting for writes"
        );
        assert_eq!(own.backend.notifier.rounds() - before, 1);
    }

    /// The notifier has a connection of its own: a node whose pooled connections are all
    /// busy (here the only one, for 5 s) still tells the other nodes of its writes at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn notifications_do_not_wait_for_a_pooled_connection() {
        let Some(url) = pg_url("notifications_do_not_wait_for_a_pooled_connection") else {
            return;
        };
        let schema = TestSchema::new(&url, "notify_busy_pool");
        let (busy, other) = (Arc::new(schema.connect(1).await), schema.connect(2).await);
        let heard = Arc::new(Heard::default());
        let listening = other
            .listen(&NodeId("other".into()), 16, heard.clone())
            .expect("listen");
        until("listening", || listening.stats().connected).await;
        let (holding, held) = std::sync::mpsc::channel();
        let holder = busy.clone();
        let hold = tokio::spawn(async move {
            holder
                .db
                .run(move |_conn| {
                    let _ = holding.send(());
                    std::thread::sleep(Duration::from_secs(5));
                    Ok(())
                })
                .await
        });
        tokio::task::spawn_blocking(move || held.recv())
            .await
            .expect("task")
            .expect("the pool's only connection is held");
        let started = Instant::now();
        busy.backend.notifier.written(&[ShardIndex(9)]);
        assert_eq!(hears(&heard, 9).await, [9]);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "heard only after {:?}: the notifier waited for the pool",
            started.elapsed()
        );
        hold.await.expect("task").expect("hold");
    }

    /// The notifier's connection uses the pool's schema (the channel is the schema's) and
    /// commits its notifications without waiting for the WAL flush.
    #[tokio::test]
    async fn the_notifiers_connection_is_in_the_schema_and_commits_asynchronously() {
        let Some(url) = pg_url("the_notifiers_connection_commits_asynchronously") else {
            return;
        };
        let schema = TestSchema::new(&url, "notify_session");
        let storage = schema.connect(1).await;
        let target = ListenTarget {
            url: url.clone(),
            schema: Some(schema.name.clone()),
            database: storage.db.db_name().clone(),
            echo: storage.backend.echo.clone(),
        };
        let mut conn = connect(&target).expect("connect");
        #[derive(diesel::QueryableByName)]
        struct Session {
            #[diesel(sql_type = Text)]
            schema: String,
            #[diesel(sql_type = Text)]
            commit: String,
        }
        let session: Session = diesel::sql_query(
            "SELECT current_schema() AS schema, current_setting('synchronous_commit') AS commit",
        )
        .get_result(&mut conn)
        .expect("session");
        assert_eq!(session.schema, schema.name);
        assert_eq!(session.commit, "off");
    }
}

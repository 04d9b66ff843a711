//! Group commit of concurrent sends: writes that arrive while another is in flight are
//! written together, in one storage transaction, when it ends.
//!
//! ```text
//!  send ─► queue its batch ─► no write in flight? lead: take the queued batches (up to
//!                             GROUP_LIMIT rows), write_all in one transaction, hand each
//!                             caller its own report; repeat while batches are queued
//!                           ─► else wait for the leader to hand over this batch's report
//! ```
//!
//! A lone send is written at once, as before; under concurrent sends the database sees one
//! commit (on PostgreSQL one WAL flush and one NOTIFY; on SQLite one turn of the single
//! writer) for all those that queued meanwhile, instead of one each.
//!
//! **A refused write fails only its own sender.** A group's transaction is all or nothing, so
//! one batch the database refuses (a constraint, a value it cannot store) would fail every
//! send of the group. When a group of several batches fails with an error that may be
//! particular to one write ([`StorageError::Query`], [`StorageError::Corrupt`]), it is
//! bisected: each half is written again as a group of its own, down to single batches, so the
//! good batches commit and each refused one gets its own error. One bad batch in a group of
//! `n` costs about `2·log2(n)` extra writes, never `n`; the normal case pays only a copy of
//! its batches (kept to write again). A failure of the database itself (unreachable,
//! read-only, a lost connection, a task that did not complete) is not particular to one
//! batch: the whole group gets the error at once, with no retry. Either way nothing of a
//! failed send is written, and sending again is safe (rows and events written twice are
//! ignored as duplicates).
//!
//! **A write lost with its connection is written again.** When the connection dies while a
//! group's write is on its way or committing ([`StorageError::OutcomeUnknown`]), the database
//! may have committed it. The leader writes the same batches again (the same signal ids),
//! up to `UNKNOWN_RETRIES` times with a back-off: rows the lost write committed are then
//! duplicates, ignored and counted as such in the reports. Only if every retry is lost too do
//! the callers get the error, which says the outcome is unknown.

use crate::entity::registry::EntityRegistry;
use crate::model::backoff::ExponentialBackoff;
use crate::model::error::StorageError;
use crate::storage::{InboxStore, WriteBatch, WriteReport};
use crate::sync::lock;
use crate::telemetry::metrics::DeliveryMetrics;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Rows (messages and events) after which a leader stops adding batches to its group.
const GROUP_LIMIT: usize = 4096;

/// A batch waiting to be written, and where its report goes.
struct Queued {
    batch: WriteBatch,
    done: oneshot::Sender<Result<WriteReport, StorageError>>,
}

/// The queue of one delivery environment (every `Inbox` clone shares it).
#[derive(Default)]
pub(crate) struct WriteQueue {
    queued: Mutex<Vec<Queued>>,
    /// Held by the caller writing groups.
    leader: tokio::sync::Mutex<()>,
    /// Told when a leader lets go (or its send is cancelled).
    released: tokio::sync::Notify,
}

impl WriteQueue {
    fn queued(&self) -> std::sync::MutexGuard<'_, Vec<Queued>> {
        lock(&self.queued)
    }

    /// Writes `batch` to `storage`, grouped with the batches of concurrent callers; each
    /// group a caller leads is counted in `metrics` (`write_groups`: fewer than the sends
    /// when sends were grouped).
    pub(crate) async fn write<S: InboxStore + ?Sized>(
        &self,
        storage: &Arc<S>,
        registry: &Arc<EntityRegistry>,
        metrics: &DeliveryMetrics,
        batch: WriteBatch,
    ) -> Result<WriteReport, StorageError> {
        let (done, mut report) = oneshot::channel();
        self.queued().push(Queued { batch, done });
        // Whoever leads re-checks the queue after letting go and leads again if a batch
        // arrived meanwhile. A caller that finds a leader at work waits for its report or for
        // the leader to let go (also when the leader's send is cancelled mid-way), then tries
        // to lead in turn, so no queued batch waits for a leader that is gone.
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Ok(guard) = self.leader.try_lock() {
                let leading = Leading {
                    guard: Some(guard),
                    released: &self.released,
                };
                loop {
                    let group = self.take_group();
                    if group.is_empty() {
                        break;
                    }
                    metrics.record_write_group();
                    // On a task of its own: a leader whose send is cancelled does not abandon
                    // the batches it took.
                    if tokio::spawn(write_group(storage.clone(), registry.clone(), group))
                        .await
                        .is_err()
                    {
                        tracing::warn!("a group write panicked; its sends fail");
                    }
                }
                drop(leading);
                if self.queued().is_empty() {
                    break;
                }
                continue;
            }
            tokio::select! {
                biased;
                result = &mut report => return result.unwrap_or_else(|_| Err(abandoned())),
                () = &mut released => {}
            }
        }
        report.await.unwrap_or_else(|_| Err(abandoned()))
    }

    /// The oldest queued batches, up to [`GROUP_LIMIT`] rows (at least one batch).
    fn take_group(&self) -> Vec<Queued> {
        let mut queued = self.queued();
        let mut rows = 0;
        let mut n = 0;
        for q in queued.iter() {
            if n > 0 && rows + q.batch.messages.len() + q.batch.events.len() > GROUP_LIMIT {
                break;
            }
            rows += q.batch.messages.len() + q.batch.events.len();
            n += 1;
        }
        queued.drain(..n).collect()
    }
}

/// The leader's place, held while it writes groups; letting go (also by a cancelled send)
/// wakes the waiting callers.
struct Leading<'a> {
    guard: Option<tokio::sync::MutexGuard<'a, ()>>,
    released: &'a tokio::sync::Notify,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        // The place is free before the waiters wake, or they would find it still taken and
        // wait again with no one left to wake them.
        drop(self.guard.take());
        self.released.notify_waiters();
    }
}

fn abandoned() -> StorageError {
    StorageError::Unavailable {
        database: "inbox write queue".into(),
        reason: "the task writing this batch's group ended without a result".into(),
        advice: "",
        source: None,
    }
}

/// Whether a failed group write may have failed for one of its batches only (a constraint, a
/// value the database refuses), so that writing its halves apart can save the others. What
/// the database or the connection says of itself fails every batch alike.
fn may_be_particular(error: &StorageError) -> bool {
    matches!(error, StorageError::Query { .. } | StorageError::Corrupt(_))
}

/// Writes one group in one `write_all` and hands every caller its report; a group that fails
/// for what may be one batch is bisected (see the module doc), otherwise every caller gets
/// the group's error.
async fn write_group<S: InboxStore + ?Sized>(
    storage: Arc<S>,
    registry: Arc<EntityRegistry>,
    group: Vec<Queued>,
) {
    // Groups still to write; the first half of a split one is written first, so batches keep
    // their queue order (which one of two writes of a key wins).
    let mut todo = vec![group];
    while let Some(group) = todo.pop() {
        let n = group.len();
        let (batches, callers): (Vec<WriteBatch>, Vec<_>) =
            group.into_iter().map(|q| (q.batch, q.done)).unzip();
        // Kept to write again: the halves of a refused group, or all of it addressed anew.
        let kept = batches.clone();
        // The latency trace points (see `telemetry`): the messages' keys, only when traced.
        let traced: Vec<(u32, i64)> = if tracing::enabled!(target: "shardbox::latency", tracing::Level::TRACE)
        {
            batches
                .iter()
                .flat_map(|b| &b.messages)
                .map(|w| (w.shard.0, w.message.received_at.timestamp_micros()))
                .collect()
        } else {
            Vec::new()
        };
        for &(shard, key) in &traced {
            tracing::trace!(target: "shardbox::latency", point = "write", node = "", shard, key);
        }
        let written = write_settled(storage.as_ref(), &registry, batches, &kept).await;
        for &(shard, key) in &traced {
            tracing::trace!(target: "shardbox::latency", point = "written", node = "", shard, key);
        }
        match written {
            Ok(reports) if reports.len() == n => {
                for (done, report) in callers.into_iter().zip(reports) {
                    let _ = done.send(Ok(report));
                }
            }
            Err(error) if may_be_particular(&error) && n > 1 => {
                tracing::debug!(%error, batches = n, "group write refused; writing its halves apart");
                let mut queued: Vec<Queued> = kept
                    .into_iter()
                    .zip(callers)
                    .map(|(batch, done)| Queued { batch, done })
                    .collect();
                let second = queued.split_off(n / 2);
                todo.push(second);
                todo.push(queued);
            }
            outcome => {
                let error = outcome.err().unwrap_or_else(|| {
                    StorageError::Corrupt(format!(
                        "write_all returned reports for other than {n} batches"
                    ))
                });
                tracing::debug!(%error, batches = n, "group write failed; every send in it fails");
                for done in callers {
                    let _ = done.send(Err(error.clone()));
                }
            }
        }
    }
}

/// How many times a group write whose outcome is unknown (its connection was lost, see
/// [`StorageError::OutcomeUnknown`]) is written again before its callers get the error.
const UNKNOWN_RETRIES: u32 = 6;

/// The waits before those writes: 50 ms, doubling, at most 2 s (about 3 s in all: the time a
/// pool takes to reconnect, or a short failover).
const UNKNOWN_BACKOFF: ExponentialBackoff =
    ExponentialBackoff::new(Duration::from_millis(50), Duration::from_secs(2));

/// [`write_addressed`], written again with the same rows — the same signal ids — while its
/// outcome is unknown: the deduplication makes that safe (a row the lost write did commit is
/// a duplicate the second time, reported as one), where a caller that sent again with fresh
/// ids would double its messages.
async fn write_settled<S: InboxStore + ?Sized>(
    storage: &S,
    registry: &EntityRegistry,
    batches: Vec<WriteBatch>,
    kept: &[WriteBatch],
) -> Result<Vec<WriteReport>, StorageError> {
    let mut written = write_addressed(storage, registry, batches, kept).await;
    let mut failures = 0;
    while let Err(error @ StorageError::OutcomeUnknown { .. }) = &written {
        if failures == UNKNOWN_RETRIES {
            break;
        }
        failures += 1;
        let delay = UNKNOWN_BACKOFF.delay(failures);
        tracing::warn!(
            %error,
            attempt = failures,
            delay_ms = delay.as_millis() as u64,
            "a send's write was lost with its connection; writing it again with the same signal ids"
        );
        tokio::time::sleep(delay).await;
        written = write_addressed(storage, registry, kept.to_vec(), kept).await;
    }
    written
}

/// Writes `batches` addressed by the registry's shard count (see
/// [`EntityRegistry::addressed`]): if the Inbox was re-sharded meanwhile, `kept` — the same
/// batches — is written instead, addressed by the recorded count.
///
/// Every attempt addresses the rows by the very count it claims: the rows were addressed when
/// their messages were made, and this process may have learned a new count since (a pick-up,
/// the lease watch, another write); claiming the new count for rows addressed by the old one
/// would pass the storage's check and put a target's rows in two shards.
async fn write_addressed<S: InboxStore + ?Sized>(
    storage: &S,
    registry: &EntityRegistry,
    batches: Vec<WriteBatch>,
    kept: &[WriteBatch],
) -> Result<Vec<WriteReport>, StorageError> {
    let mut first = Some(batches);
    registry
        .addressed(|count| {
            let mut batches = first.take().unwrap_or_else(|| kept.to_vec());
            for batch in &mut batches {
                registry.address_by(&mut batch.messages, count);
            }
            storage.write_all_addressed(batches, count)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStorage;
    use crate::model::ids::ShardIndex;
    use crate::model::message::{test_command, InboxWrite};
    use crate::storage::Storage;

    fn batch(i: usize) -> WriteBatch {
        WriteBatch {
            events: vec![],
            messages: vec![InboxWrite {
                shard: ShardIndex((i % 4) as u32),
                message: test_command(
                    &format!("s{i}"),
                    "counter",
                    &format!("t{i}"),
                    chrono::Utc::now(),
                ),
            }],
        }
    }

    /// The routing of the tests: 4 shards, as [`batch`] addresses its rows.
    fn counters() -> Arc<DeliveryMetrics> {
        Arc::new(DeliveryMetrics::new(&crate::model::ids::NodeId("n".into())))
    }

    fn registry() -> Arc<EntityRegistry> {
        Arc::new(EntityRegistry::new(
            Arc::new(crate::model::strategy::StableHashStrategy::new()),
            4,
        ))
    }

    #[tokio::test]
    async fn a_write_addressed_by_an_old_shard_count_is_addressed_anew() {
        let memory = Arc::new(MemoryStorage::new());
        let storage: Arc<dyn Storage> = memory.clone();
        // The Inbox was re-sharded to 8 since this process learned its count (4).
        storage.claim_shard_count(8).await.expect("claim");
        let registry = registry();
        let queue = Arc::new(WriteQueue::default());
        let report = queue
            .write(&storage, &registry, &counters(), batch(1))
            .await
            .expect("the write goes through");
        assert_eq!(registry.shard_count(), 8, "the process learned the count");
        let row = &memory.rows()[0];
        assert_eq!(
            row.shard,
            registry.shard_of("counter", "t1"),
            "the row went to its shard among 8"
        );
        assert_eq!(report.shards, vec![row.shard]);
    }

    #[tokio::test]
    async fn rows_addressed_before_this_process_learned_a_new_count_are_addressed_by_it() {
        use crate::model::strategy::ShardStrategy;
        let memory = Arc::new(MemoryStorage::new());
        let storage: Arc<dyn Storage> = memory.clone();
        storage.claim_shard_count(8).await.expect("claim");
        let registry = registry();
        // The message was addressed by 4; then the process learned the Inbox has 8 (its
        // lease watch, a pick-up): the write claims 8, so its rows must go by 8.
        let strategy = crate::model::strategy::StableHashStrategy::new();
        let by = |i: usize, n: u32| strategy.shard_of("counter", &format!("t{i}"), n);
        let i = (0..100)
            .find(|&i| by(i, 4) != by(i, 8))
            .expect("a target that moves");
        let mut stale = batch(i);
        stale.messages[0].shard = by(i, 4);
        registry.set_shard_count(8);
        let queue = Arc::new(WriteQueue::default());
        queue
            .write(&storage, &registry, &counters(), stale)
            .await
            .expect("the write goes through");
        let row = &memory.rows()[0];
        assert_eq!(
            row.shard,
            by(i, 8),
            "the row went to its shard among 8, not among 4"
        );
    }

    /// Spawns sends of batches `0..n` and waits until all of them are queued (the test holds
    /// the leader's place, so none can be written yet).
    async fn queue_sends(
        queue: &Arc<WriteQueue>,
        storage: &Arc<dyn Storage>,
        metrics: &Arc<DeliveryMetrics>,
        n: usize,
    ) -> Vec<tokio::task::JoinHandle<Result<WriteReport, StorageError>>> {
        let sends = (0..n)
            .map(|i| {
                let (queue, storage, metrics) = (queue.clone(), storage.clone(), metrics.clone());
                tokio::spawn(
                    async move { queue.write(&storage, &registry(), &metrics, batch(i)).await },
                )
            })
            .collect();
        while queue.queued().len() < n {
            tokio::task::yield_now().await;
        }
        sends
    }

    /// Sends that queue while a write is in flight are written as one group, each caller
    /// gets its own report, and nothing is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_sends_are_written_as_one_group_with_their_own_reports() {
        let memory = Arc::new(MemoryStorage::new());
        let storage: Arc<dyn Storage> = memory.clone();
        let queue = Arc::new(WriteQueue::default());
        let metrics = counters();
        // A write in flight: the test holds the leader's place while 51 sends queue. All of
        // them are queued before the place is let go, so whichever send leads next takes every
        // batch in one group (a send that had queued but not yet tried to lead could otherwise
        // lead a group of its own before a later send queued).
        let in_flight = Leading {
            guard: Some(queue.leader.lock().await),
            released: &queue.released,
        };
        let sends = queue_sends(&queue, &storage, &metrics, 51).await;
        drop(in_flight);
        for send in sends {
            let report = send.await.expect("task").expect("send");
            assert_eq!((report.written, report.duplicates), (1, 0));
            assert_eq!(report.shards.len(), 1);
        }
        assert_eq!(metrics.snapshot().write_groups, 1);
        assert_eq!(memory.rows().len(), 51);
    }

    /// Under many concurrent senders every batch is written exactly once, whoever leads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_sends_each_land_once() {
        let memory = Arc::new(MemoryStorage::new());
        let storage: Arc<dyn Storage> = memory.clone();
        let queue = Arc::new(WriteQueue::default());
        let metrics = counters();
        let mut sends = Vec::new();
        for task in 0..8 {
            let (queue, storage, metrics) = (queue.clone(), storage.clone(), metrics.clone());
            sends.push(tokio::spawn(async move {
                for i in 0..200 {
                    let report = queue
                        .write(&storage, &registry(), &metrics, batch(task * 1000 + i))
                        .await?;
                    assert_eq!(report.written, 1);
                }
                Ok::<(), StorageError>(())
            }));
        }
        for send in sends {
            send.await.expect("task").expect("sends");
        }
        assert_eq!(memory.rows().len(), 1600);
        assert!(queue.queued().is_empty());
    }

    /// A leader whose send is cancelled while others wait does not strand them: they are
    /// woken and one of them leads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_sends_go_on_when_the_leader_is_cancelled() {
        let memory = Arc::new(MemoryStorage::new());
        let storage: Arc<dyn Storage> = memory.clone();
        let queue = Arc::new(WriteQueue::default());
        // The test takes the leader's place, as a leader would, and then goes away without
        // writing anything (a cancelled send drops its place the same way).
        let leading = Leading {
            guard: Some(queue.leader.lock().await),
            released: &queue.released,
        };
        let sends = queue_sends(&queue, &storage, &counters(), 10).await;
        drop(leading);
        for send in sends {
            let report = tokio::time::timeout(std::time::Duration::from_secs(5), send)
                .await
                .expect("a waiting send was stranded")
                .expect("task")
                .expect("send");
            assert_eq!(report.written, 1);
        }
        assert_eq!(memory.rows().len(), 10);
    }

    /// The memory backend as a database that refuses, all or nothing, any write holding a
    /// row for target `refused` (as a constraint would), and that may fail as a whole with
    /// `outage` (the database gone); counts the `write_all` calls it gets.
    struct Refusing {
        inner: MemoryStorage,
        outage: Option<StorageError>,
        calls: std::sync::atomic::AtomicUsize,
        /// Writes still to commit and then report their connection lost.
        lost_commits: std::sync::atomic::AtomicUsize,
    }

    impl Refusing {
        fn new(outage: Option<StorageError>) -> Arc<Self> {
            Self::losing(outage, 0)
        }

        /// Commits its first `lost` writes and reports each as lost with its connection.
        fn losing(outage: Option<StorageError>, lost: usize) -> Arc<Self> {
            Arc::new(Refusing {
                inner: MemoryStorage::new(),
                outage,
                calls: Default::default(),
                lost_commits: lost.into(),
            })
        }

        /// After a write committed: the lost connection, while lost commits are left.
        fn lose(&self) -> Result<(), StorageError> {
            use std::sync::atomic::Ordering::Relaxed;
            let lost = self
                .lost_commits
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                .is_ok();
            if lost {
                return Err(StorageError::OutcomeUnknown {
                    database: "test".into(),
                    reason: "server closed the connection unexpectedly".into(),
                    source: None,
                });
            }
            Ok(())
        }

        /// Counts the call; the outage, or a refusal of a batch to target `refused`.
        fn refuse(&self, batches: &[WriteBatch]) -> Result<(), StorageError> {
            self.calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(outage) = &self.outage {
                return Err(outage.clone());
            }
            let refused = batches
                .iter()
                .flat_map(|b| &b.messages)
                .any(|w| w.message.target_id == "refused");
            if refused {
                return Err(StorageError::Query {
                    database: "test".into(),
                    reason: "new row violates check constraint \"refused\"".into(),
                    source: None,
                });
            }
            Ok(())
        }
    }

    #[async_trait::async_trait]
    impl InboxStore for Refusing {
        async fn write(&self, batch: WriteBatch) -> Result<WriteReport, StorageError> {
            let mut reports = self.write_all(vec![batch]).await?;
            reports
                .pop()
                .ok_or_else(|| StorageError::Corrupt("no report".into()))
        }
        async fn write_all(
            &self,
            batches: Vec<WriteBatch>,
        ) -> Result<Vec<WriteReport>, StorageError> {
            self.refuse(&batches)?;
            self.inner.write_all(batches).await
        }
        async fn write_all_addressed(
            &self,
            batches: Vec<WriteBatch>,
            shard_count: u32,
        ) -> Result<Vec<WriteReport>, StorageError> {
            self.refuse(&batches)?;
            let reports = self.inner.write_all_addressed(batches, shard_count).await?;
            self.lose()?;
            Ok(reports)
        }
        async fn read_page(
            &self,
            shard: ShardIndex,
            now: chrono::DateTime<chrono::Utc>,
            limit: usize,
        ) -> Result<crate::storage::Page, StorageError> {
            self.inner.read_page(shard, now, limit).await
        }
        async fn outcome(
            &self,
            key: &crate::model::message::DedupKey,
            now: chrono::DateTime<chrono::Utc>,
        ) -> Result<crate::model::outcome::OutcomeLookup, StorageError> {
            self.inner.outcome(key, now).await
        }
        async fn commit_stage(
            &self,
            commit: crate::storage::StageCommit,
        ) -> Result<crate::storage::CommitReport, StorageError> {
            self.inner.commit_stage(commit).await
        }
        async fn next_due(
            &self,
            shard: ShardIndex,
            now: chrono::DateTime<chrono::Utc>,
        ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StorageError> {
            self.inner.next_due(shard, now).await
        }
        async fn counts(
            &self,
            shard: Option<ShardIndex>,
        ) -> Result<crate::storage::InboxCounts, StorageError> {
            self.inner.counts(shard).await
        }
        async fn expired_shards(
            &self,
            now: chrono::DateTime<chrono::Utc>,
        ) -> Result<Vec<ShardIndex>, StorageError> {
            self.inner.expired_shards(now).await
        }
        async fn purge_due_shards(
            &self,
            now: chrono::DateTime<chrono::Utc>,
        ) -> Result<Vec<ShardIndex>, StorageError> {
            self.inner.purge_due_shards(now).await
        }
        async fn depths(
            &self,
            now: chrono::DateTime<chrono::Utc>,
        ) -> Result<Vec<crate::storage::ShardDepth>, StorageError> {
            self.inner.depths(now).await
        }
        async fn kind_depths(
            &self,
            now: chrono::DateTime<chrono::Utc>,
        ) -> Result<Vec<crate::storage::KindDepth>, StorageError> {
            self.inner.kind_depths(now).await
        }
        async fn read_expired(
            &self,
            shard: ShardIndex,
            now: chrono::DateTime<chrono::Utc>,
            limit: usize,
        ) -> Result<Vec<crate::model::message::InboxMessage>, StorageError> {
            self.inner.read_expired(shard, now, limit).await
        }
    }

    /// Batch `i`, or with `refused` its row goes to the target the database refuses.
    fn maybe_refused(i: usize, refused: bool) -> WriteBatch {
        let mut b = batch(i);
        if refused {
            b.messages[0].message.target_id = "refused".into();
        }
        b
    }

    /// Queues 20 sends behind a write in flight, the 8th refused by the database, and lets
    /// them be written (as one group); returns each send's outcome.
    async fn twenty_sends_one_refused(
        queue: &Arc<WriteQueue>,
        storage: &Arc<Refusing>,
    ) -> Vec<Result<WriteReport, StorageError>> {
        // A write in flight: the test holds the leader's place (letting go wakes the waiting).
        let in_flight = Leading {
            guard: Some(queue.leader.lock().await),
            released: &queue.released,
        };
        let sends: Vec<_> = (0..20)
            .map(|i| {
                let (queue, storage) = (queue.clone(), storage.clone());
                tokio::spawn(async move {
                    queue
                        .write(&storage, &registry(), &counters(), maybe_refused(i, i == 7))
                        .await
                })
            })
            .collect();
        while queue.queued().len() < 20 {
            tokio::task::yield_now().await;
        }
        drop(in_flight);
        let mut outcomes = Vec::new();
        for send in sends {
            outcomes.push(send.await.expect("task"));
        }
        outcomes
    }

    /// A write the database refuses fails its own send only: the 19 others of its group are
    /// written, each with its own report.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_batch_fails_only_its_own_send() {
        let storage = Refusing::new(None);
        let queue = Arc::new(WriteQueue::default());
        let outcomes = twenty_sends_one_refused(&queue, &storage).await;
        for (i, outcome) in outcomes.iter().enumerate() {
            match outcome {
                Err(StorageError::Query { reason, .. }) if i == 7 => {
                    assert!(reason.contains("refused"), "{reason}")
                }
                Ok(report) if i != 7 => assert_eq!((report.written, report.duplicates), (1, 0)),
                other => panic!("send {i}: {other:?}"),
            }
        }
        let rows = storage.inner.rows();
        assert_eq!(rows.len(), 19);
        assert!(rows.iter().all(|r| r.message.target_id != "refused"));
        let calls = storage.calls.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            calls <= 1 + 2 * 5,
            "bisected, not written one by one: {calls} writes"
        );
    }

    /// A failure of the database itself (it is gone) fails the whole group at once: no send
    /// is tried again alone, every one gets the error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_outage_fails_the_group_without_retries() {
        let storage = Refusing::new(Some(StorageError::Unavailable {
            database: "test".into(),
            reason: "connection refused".into(),
            advice: "",
            source: None,
        }));
        let queue = Arc::new(WriteQueue::default());
        let outcomes = twenty_sends_one_refused(&queue, &storage).await;
        assert!(outcomes
            .iter()
            .all(|o| matches!(o, Err(StorageError::Unavailable { .. }))));
        assert_eq!(storage.calls.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// Regression (issue 37, defect 11): a group write that committed but lost its
    /// connection used to fail every send in it, and a sender that sent again with fresh ids
    /// doubled its messages. Now the group is written again with the same signal ids: two
    /// lost commits in a row, then every send succeeds, and each message is in the Inbox
    /// once (the second and third writes found them all as duplicates).
    #[tokio::test(start_paused = true)]
    async fn a_write_lost_with_its_connection_is_written_again_with_the_same_ids() {
        let storage = Refusing::losing(None, 2);
        let queue = Arc::new(WriteQueue::default());
        let sends: Vec<_> = (0..20)
            .map(|i| {
                let (queue, storage) = (queue.clone(), storage.clone());
                tokio::spawn(async move {
                    queue
                        .write(&storage, &registry(), &counters(), batch(i))
                        .await
                })
            })
            .collect();
        for send in sends {
            let report = send.await.expect("task").expect("written in the end");
            assert_eq!(report.written + report.duplicates, 1, "{report:?}");
        }
        let rows = storage.inner.rows();
        assert_eq!(rows.len(), 20, "each message once");
        assert!(storage.calls.load(std::sync::atomic::Ordering::Relaxed) >= 3);
    }

    /// Lost every time: after the retries the callers get the error that says the outcome is
    /// unknown, and the messages (committed by the first write) are still there once each.
    #[tokio::test(start_paused = true)]
    async fn a_write_lost_at_every_retry_says_its_outcome_is_unknown() {
        let storage = Refusing::losing(None, usize::MAX);
        let queue = Arc::new(WriteQueue::default());
        let outcome = queue
            .write(&storage, &registry(), &counters(), batch(1))
            .await;
        match outcome {
            Err(e @ StorageError::OutcomeUnknown { .. }) => {
                assert!(
                    e.to_string().contains("may or may not have committed"),
                    "{e}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            storage.calls.load(std::sync::atomic::Ordering::Relaxed),
            1 + UNKNOWN_RETRIES as usize
        );
        assert_eq!(storage.inner.rows().len(), 1);
    }

    /// A group takes batches up to the row limit, and always at least one.
    #[test]
    fn groups_stop_at_the_row_limit() {
        let queue = WriteQueue::default();
        let big = |n: usize| WriteBatch {
            events: vec![],
            messages: (0..n).flat_map(|i| batch(i).messages).collect(),
        };
        for n in [GROUP_LIMIT + 10, 3000, 2000] {
            let (done, _) = oneshot::channel();
            queue.queued().push(Queued {
                batch: big(n),
                done,
            });
        }
        assert_eq!(queue.take_group().len(), 1, "an oversized batch goes alone");
        assert_eq!(queue.take_group().len(), 1, "3000 + 2000 > the limit");
        assert_eq!(queue.take_group().len(), 1);
        assert!(queue.take_group().is_empty());
    }
}

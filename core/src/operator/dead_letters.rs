//! Dead letters and blocked targets: the requeue loop, purge and unblock, for every caller.
//!
//! ```text
//!  requeue(filter) ─► list a page (≤ REQUEUE_BATCH, after the last id)
//!                     ─► place each letter ─► DeadLetterStore::requeue_dead_letters
//!                        (refused if re-sharded meanwhile: placed again by the new count)
//!                     ─► on_page(report)  (the caller counts it and wakes its workers)
//!                     ─► next page, until the filter's limit or no letter is left
//! ```

use crate::entity::addressing::Addressing;
use crate::model::error::StorageError;
use crate::storage::{
    DeadLetterFilter, DeadLetterStore, EntityKey, Requeue, RequeueReport, StoredDeadLetter,
    Unblock, UnblockReport, WorkRegistry,
};
use chrono::{DateTime, Utc};

/// Dead letters requeued per storage call.
const REQUEUE_BATCH: usize = 500;

/// How many times a page whose shard count changed under it is placed again.
const REPLACE_LIMIT: usize = 3;

/// Where requeued dead letters go.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// Into the shard the application's strategy gives each target: a running application,
    /// or a tool that rebuilt the recorded stock strategy (`placement::recorded_addressing`).
    Addressed(&'a Addressing),
    /// Into the shard each dead letter holds: its target's shard in the recorded layout (a
    /// re-sharding moves dead letters with the Inbox), whatever the strategy. For a tool
    /// that cannot rebuild the application's strategy.
    AsRecorded,
}

/// Puts the dead letters matching `filter` (at most `filter.limit`, oldest first) back into
/// the Inbox, a page at a time, each where `placement` says; `on_page` hears each page's
/// report as it commits (to count it and wake the shards it wrote). Returns the sum.
pub async fn requeue_dead_letters<S>(
    store: &S,
    placement: Placement<'_>,
    filter: &DeadLetterFilter,
    now: DateTime<Utc>,
    mut on_page: impl FnMut(&RequeueReport),
) -> Result<RequeueReport, StorageError>
where
    S: DeadLetterStore + WorkRegistry + ?Sized,
{
    let mut report = RequeueReport::default();
    let mut remaining = filter.limit.unwrap_or(usize::MAX);
    let mut after = filter.after;
    while remaining > 0 {
        let page = store
            .list_dead_letters(&DeadLetterFilter {
                after,
                limit: Some(remaining.min(REQUEUE_BATCH)),
                ..filter.clone()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        remaining = remaining.saturating_sub(page.len());
        let done = match placement {
            Placement::Addressed(addressing) => {
                requeue_addressed(store, addressing, &page, now).await?
            }
            Placement::AsRecorded => requeue_as_recorded(store, page, now).await?,
        };
        on_page(&done);
        report.merge(done);
    }
    tracing::info!(
        requeued = report.requeued,
        already_in_inbox = report.already_in_inbox,
        missing = report.missing,
        skipped = report.skipped,
        "dead letters requeued"
    );
    Ok(report)
}

/// One page, each letter in its target's shard by `addressing` (placed again by the new
/// count if the Inbox was re-sharded meanwhile: the storage refuses, writing nothing).
async fn requeue_addressed<S>(
    store: &S,
    addressing: &Addressing,
    page: &[StoredDeadLetter],
    now: DateTime<Utc>,
) -> Result<RequeueReport, StorageError>
where
    S: DeadLetterStore + ?Sized,
{
    let strategy = addressing.strategy();
    addressing
        .addressed(|shard_count| {
            let requeue: Vec<Requeue> = page
                .iter()
                .map(|d| {
                    let m = &d.letter.original.message;
                    Requeue {
                        id: d.id,
                        shard: strategy.shard_of(&m.target_kind, &m.target_id, shard_count),
                    }
                })
                .collect();
            store.requeue_dead_letters(requeue, shard_count, now)
        })
        .await
}

/// One page, each letter in the shard it holds, by the recorded count; if a re-sharding
/// moved the letters meanwhile (the storage refuses, writing nothing), they are read again,
/// in their new shards.
async fn requeue_as_recorded<S>(
    store: &S,
    mut page: Vec<StoredDeadLetter>,
    now: DateTime<Utc>,
) -> Result<RequeueReport, StorageError>
where
    S: DeadLetterStore + WorkRegistry + ?Sized,
{
    let mut replaced = 0;
    loop {
        // With no count recorded (no node ran yet) the storage checks nothing.
        let shard_count = store.recorded_shard_count().await?.unwrap_or_default();
        let requeue = page
            .iter()
            .map(|d| Requeue {
                id: d.id,
                shard: d.letter.original.shard,
            })
            .collect();
        match store.requeue_dead_letters(requeue, shard_count, now).await {
            Err(StorageError::ShardCountChanged { .. }) if replaced < REPLACE_LIMIT => {
                replaced += 1;
                let ids = page.iter().map(|d| d.id);
                page = store.list_dead_letters(&DeadLetterFilter::ids(ids)).await?;
            }
            done => return done,
        }
    }
}

/// Deletes the dead letters matching `filter` (at most `filter.limit`, oldest first) for
/// good; returns how many.
pub async fn purge_dead_letters<S>(
    store: &S,
    filter: &DeadLetterFilter,
) -> Result<u64, StorageError>
where
    S: DeadLetterStore + ?Sized,
{
    let purged = store.purge_dead_letters(filter).await?;
    tracing::info!(purged, "dead letters purged");
    Ok(purged)
}

/// Lets blocked `target` go on as `action` says (see `DeadLetterStore::unblock_target`).
pub async fn unblock<S>(
    store: &S,
    target: &EntityKey,
    action: Unblock,
    now: DateTime<Utc>,
) -> Result<UnblockReport, StorageError>
where
    S: DeadLetterStore + ?Sized,
{
    let report = store.unblock_target(target, action, now).await?;
    tracing::info!(kind = %target.kind, id = %target.id, ?action, unblocked = report.unblocked, "target unblocked");
    Ok(report)
}

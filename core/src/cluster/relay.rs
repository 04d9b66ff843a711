//! The relay: copies one source database's outbox rows for one target database into that
//! database's Inbox, batch by batch, and trims what it copied (see
//! [`OutboxStore`](crate::storage::OutboxStore) and docs/clustering.md, "Past one database").
//!
//! ```text
//!  step:  rows = source.outbox_page(to, after: K)       K: the last position this relay saw
//!                                                        (0 at first); none: idle, one read
//!         P = target.relay_position(from)               rows at or below P: copied already
//!         rows = those above P                          none: trim up to P, done
//!         target.relay_into(from, after: P, rows)        rows written + position moved, in
//!                                                        one transaction; or Moved: another
//!                                                        relay copied first, nothing written
//!         source.trim_outbox(to, up_to: new position)
//! ```
//!
//! Safety rests on the target's compare-and-set, not on who runs the relay: any number of
//! relays of one (source, target) pair may run, crash (SIGKILL between any two calls) and
//! start again; every row is copied once, in id order. A crash between the copy and the trim
//! leaves copied rows in the outbox, below the recorded position, where no page reads them;
//! the next step that finds nothing to copy trims them (a relay starts from K = 0, so it reads
//! them, finds them below the recorded position, and trims them). An idle step is one read of
//! the source's outbox: a relay that runs every tenth of a second costs little when nothing
//! crosses.

use crate::model::error::StorageError;
use crate::model::ids::ShardIndex;
use crate::storage::{RelayCopy, RelayOutcome, Storage};
use std::sync::Arc;

/// What one step of a relay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayStep {
    /// Rows written into the target's Inbox.
    pub copied: usize,
    /// Rows the target already had (the Inbox's deduplication key).
    pub duplicates: usize,
    /// The target's recorded position after the step.
    pub position: i64,
    /// Outbox rows deleted from the source.
    pub trimmed: usize,
    /// Another relay moved the position first: this step wrote nothing.
    pub raced: bool,
    /// The target's shards that received rows (its own, local indexes), sorted.
    pub shards: Vec<ShardIndex>,
}

impl RelayStep {
    /// Whether the step found nothing to copy or trim.
    pub fn idle(&self) -> bool {
        self.copied == 0 && self.duplicates == 0 && self.trimmed == 0 && !self.raced
    }
}

/// Copies the outbox rows of database `from` (in `source`) for database `to` (`target`).
pub struct Relay {
    source: Arc<dyn Storage>,
    target: Arc<dyn Storage>,
    from: u32,
    to: u32,
    batch: usize,
    /// The last recorded position this relay saw (rows at or below it are copied).
    known: std::sync::atomic::AtomicI64,
}

impl Relay {
    /// A relay from `source` (database number `from`) to `target` (number `to`), copying up
    /// to `batch` rows a step (at least one).
    pub fn new(
        source: Arc<dyn Storage>,
        from: u32,
        target: Arc<dyn Storage>,
        to: u32,
        batch: usize,
    ) -> Self {
        Relay {
            source,
            target,
            from,
            to,
            batch: batch.max(1),
            known: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// The most rows it copies in one step.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The databases it copies from and to.
    pub fn pair(&self) -> (u32, u32) {
        (self.from, self.to)
    }

    /// One batch: reads the target's position, the source's rows after it, copies them and
    /// trims them (see the module doc).
    pub async fn step(&self) -> Result<RelayStep, StorageError> {
        use std::sync::atomic::Ordering;
        let known = self.known.load(Ordering::Acquire);
        let mut rows = self.source.outbox_page(self.to, known, self.batch).await?;
        if rows.is_empty() {
            return Ok(RelayStep {
                position: known,
                ..RelayStep::default()
            });
        }
        let after = self.target.relay_position(self.from).await?;
        rows.retain(|r| r.id > after);
        if rows.is_empty() {
            // Copied already (by another relay, or before a crash that missed the trim).
            let trimmed = self.source.trim_outbox(self.to, after).await?;
            self.known.fetch_max(after, Ordering::AcqRel);
            return Ok(RelayStep {
                position: after,
                trimmed,
                ..RelayStep::default()
            });
        }
        let copy = RelayCopy {
            from: self.from,
            after,
            rows,
        };
        match self.target.relay_into(copy).await? {
            RelayOutcome::Copied { position, written } => {
                let trimmed = self.source.trim_outbox(self.to, position).await?;
                self.known.fetch_max(position, Ordering::AcqRel);
                tracing::debug!(
                    from = self.from,
                    to = self.to,
                    copied = written.written,
                    duplicates = written.duplicates,
                    position,
                    "relayed outbox rows"
                );
                Ok(RelayStep {
                    copied: written.written,
                    duplicates: written.duplicates,
                    position,
                    trimmed,
                    raced: false,
                    shards: written.shards,
                })
            }
            RelayOutcome::Moved { recorded } => {
                self.known.fetch_max(recorded, Ordering::AcqRel);
                Ok(RelayStep {
                    position: recorded,
                    raced: true,
                    ..RelayStep::default()
                })
            }
        }
    }

    /// Steps until the outbox has nothing for the target; returns the rows copied.
    pub async fn drain(&self) -> Result<usize, StorageError> {
        let mut copied = 0;
        loop {
            let step = self.step().await?;
            copied += step.copied;
            if step.idle() {
                return Ok(copied);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStorage;
    use crate::model::ids::{LeaseEpoch, NodeId, ShardIndex, SignalId, WorkerId};
    use crate::model::message::{InboxWrite, MessageKind, NewMessage};
    use crate::storage::{InboxStore, OutboxStore, OutboxWrite, StageCommit, WorkRegistry};
    use chrono::{DateTime, Utc};

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).expect("a time")
    }

    fn outbox_row(signal: &str) -> OutboxWrite {
        OutboxWrite {
            database: 1,
            write: InboxWrite {
                shard: ShardIndex(3),
                message: NewMessage {
                    signal_id: SignalId(signal.into()),
                    kind: MessageKind::Command,
                    target_kind: "k".into(),
                    target_id: "t".into(),
                    tenant: String::new(),
                    payload: signal.as_bytes().to_vec(),
                    payload_type: "p".into(),
                    payload_version: 1,
                    metadata: Default::default(),
                    received_at: at(0),
                    deliver_after: None,
                    expires_at: None,
                },
            },
        }
    }

    /// Commits `signals` into `source`'s outbox for database 1, one stage.
    async fn commit_outbox(source: &MemoryStorage, signals: &[&str]) {
        let node = NodeId("n".into());
        let lease = source
            .pick_up(ShardIndex(0), &node, WorkerId(0), at(0), at(30))
            .await
            .expect("pick up")
            .expect("free");
        assert!(lease.epoch > LeaseEpoch(0));
        let mut commit = StageCommit::new(lease.clone(), at(1), at(30));
        commit.outbox = signals.iter().map(|s| outbox_row(s)).collect();
        source.commit_stage(commit).await.expect("commit");
        source.release(&lease).await.expect("release");
    }

    #[tokio::test]
    async fn a_relay_copies_in_batches_trims_and_then_idles() {
        let source = Arc::new(MemoryStorage::new());
        let target = Arc::new(MemoryStorage::new());
        commit_outbox(&source, &["a", "b", "c", "d", "e"]).await;
        let relay = Relay::new(source.clone(), 0, target.clone(), 1, 2);
        let first = relay.step().await.expect("step");
        assert_eq!((first.copied, first.trimmed, first.raced), (2, 2, false));
        assert_eq!(relay.drain().await.expect("drain"), 3);
        let signals: Vec<String> = target
            .rows()
            .into_iter()
            .map(|r| r.message.signal_id.0)
            .collect();
        assert_eq!(signals, ["a", "b", "c", "d", "e"]);
        assert!(source.outbox_page(1, 0, 10).await.expect("page").is_empty());
        assert!(relay.step().await.expect("idle").idle());
    }

    #[tokio::test]
    async fn rows_left_by_a_crash_between_copy_and_trim_are_trimmed_not_copied_again() {
        let source = Arc::new(MemoryStorage::new());
        let target = Arc::new(MemoryStorage::new());
        commit_outbox(&source, &["a", "b"]).await;
        // The copy committed, the relay died before its trim.
        let rows = source.outbox_page(1, 0, 10).await.expect("page");
        let copy = RelayCopy {
            from: 0,
            after: 0,
            rows,
        };
        target.relay_into(copy).await.expect("copy");
        let relay = Relay::new(source.clone(), 0, target.clone(), 1, 10);
        let step = relay.step().await.expect("step");
        assert_eq!((step.copied, step.duplicates, step.trimmed), (0, 0, 2));
        assert_eq!(target.rows().len(), 2);
    }

    #[tokio::test]
    async fn a_relay_that_lost_the_race_writes_nothing() {
        let source = Arc::new(MemoryStorage::new());
        let target = Arc::new(MemoryStorage::new());
        commit_outbox(&source, &["a"]).await;
        let rows = source.outbox_page(1, 0, 10).await.expect("page");
        // Another relay read the same position and copies first.
        let copy = RelayCopy {
            from: 0,
            after: 0,
            rows: rows.clone(),
        };
        target.relay_into(copy.clone()).await.expect("first");
        assert_eq!(
            target.relay_into(copy).await.expect("second"),
            RelayOutcome::Moved {
                recorded: rows[0].id
            }
        );
        assert_eq!(target.rows().len(), 1);
    }
}

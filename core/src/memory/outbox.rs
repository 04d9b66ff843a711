//! The in-memory outbox and relay positions ([`OutboxStore`]): rows kept by id, and the
//! position of each source database that relayed into this one.

use super::MemoryStorage;
use crate::model::error::StorageError;
use crate::storage::{OutboxRow, OutboxStore, OutboxWrite, RelayCopy, RelayOutcome, WriteBatch};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};

/// The outbox rows by id, the next id, and the relay positions by source database.
#[derive(Default)]
pub(super) struct Outbox {
    rows: BTreeMap<i64, OutboxRow>,
    last_id: i64,
    positions: HashMap<u32, i64>,
}

impl Outbox {
    /// The lowest and highest id still kept (`None` and 0 when empty).
    pub(super) fn bounds(&self) -> (Option<i64>, i64) {
        (
            self.rows.keys().next().copied(),
            self.rows.keys().next_back().copied().unwrap_or(0),
        )
    }

    /// Adds a commit's rows, each with the next id.
    pub(super) fn append(&mut self, writes: Vec<OutboxWrite>) {
        for w in writes {
            self.last_id += 1;
            let row = OutboxRow {
                id: self.last_id,
                database: w.database,
                write: w.write,
            };
            self.rows.insert(row.id, row);
        }
    }
}

#[async_trait]
impl OutboxStore for MemoryStorage {
    async fn outbox_page(
        &self,
        database: u32,
        after: i64,
        limit: usize,
    ) -> Result<Vec<OutboxRow>, StorageError> {
        let state = self.lock();
        Ok(state
            .outbox
            .rows
            .range(after.saturating_add(1)..)
            .map(|(_, row)| row)
            .filter(|row| row.database == database)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn trim_outbox(&self, database: u32, up_to: i64) -> Result<usize, StorageError> {
        let mut state = self.lock();
        let before = state.outbox.rows.len();
        state
            .outbox
            .rows
            .retain(|&id, row| id > up_to || row.database != database);
        Ok(before - state.outbox.rows.len())
    }

    async fn relay_position(&self, from: u32) -> Result<i64, StorageError> {
        Ok(self
            .lock()
            .outbox
            .positions
            .get(&from)
            .copied()
            .unwrap_or(0))
    }

    async fn relay_into(&self, copy: RelayCopy) -> Result<RelayOutcome, StorageError> {
        let end = copy.checked_end()?;
        let mut state = self.lock();
        let recorded = state.outbox.positions.get(&copy.from).copied().unwrap_or(0);
        if recorded != copy.after {
            return Ok(RelayOutcome::Moved { recorded });
        }
        let Some(end) = end else {
            return Ok(RelayOutcome::Copied {
                position: recorded,
                written: Default::default(),
            });
        };
        let written = state.write(WriteBatch {
            events: Vec::new(),
            messages: copy.rows.into_iter().map(|row| row.write).collect(),
        });
        state.outbox.positions.insert(copy.from, end);
        Ok(RelayOutcome::Copied {
            position: end,
            written,
        })
    }
}

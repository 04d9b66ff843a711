//! What a write of new rows carries and what it did: the unit of `InboxStore::write` and of a
//! stage's fan-out.

use crate::model::event::NewEvent;
use crate::model::ids::ShardIndex;
use crate::model::message::InboxWrite;

/// Events to append and messages to write, atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteBatch {
    /// Events for the event store (a duplicate event id is ignored).
    pub events: Vec<NewEvent>,
    /// Inbox rows (a duplicate (tenant, target, signal) is ignored).
    pub messages: Vec<InboxWrite>,
}

impl WriteBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && self.messages.is_empty()
    }
}

/// What a write did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Events appended.
    pub events: usize,
    /// Inbox rows written.
    pub written: usize,
    /// Inbox rows ignored as duplicates (or duplicate events ignored).
    pub duplicates: usize,
    /// The shards that received at least one row, sorted, each once.
    pub shards: Vec<ShardIndex>,
}

impl WriteReport {
    /// Adds another report's numbers to this one.
    pub fn merge(&mut self, other: WriteReport) {
        self.events += other.events;
        self.written += other.written;
        self.duplicates += other.duplicates;
        self.shards.extend(other.shards);
        self.shards.sort_unstable();
        self.shards.dedup();
    }
}

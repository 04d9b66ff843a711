//! Shard observers hear of every write to a shard, so that a worker can wake at once instead
//! of waiting for its next poll.

use crate::model::ids::ShardIndex;

/// Told of writes to shards. Must return quickly (it runs on the writer's task, or on a
/// listener's thread).
pub trait ShardObserver: Send + Sync + 'static {
    /// Rows were written to `shards`.
    fn on_write(&self, shards: &[ShardIndex]);

    /// Writes may have been missed (a notification connection was down): look at every
    /// shard soon. The default does nothing, leaving it to the next poll.
    fn on_missed_writes(&self) {}

    /// Stages committed command outcomes in `shards` (see `StageCommit::outcomes`): a sender
    /// waiting for one of them may read it now. The default ignores them.
    fn on_outcomes(&self, _shards: &[ShardIndex]) {}
}

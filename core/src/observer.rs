//! Shard observers hear of every write to a shard, so that a worker can wake at once instead
//! of waiting for its next poll.

use crate::ids::ShardIndex;

/// Told of writes to shards. Must return quickly (it runs on the writer's task).
pub trait ShardObserver: Send + Sync + 'static {
    /// Rows were written to `shards`.
    fn on_write(&self, shards: &[ShardIndex]);
}

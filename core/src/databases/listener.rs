//! Hearing other processes' writes in several databases: one listener per database that has
//! one, each telling the node's observer of its shards in their global form.

use super::map::DatabaseMap;
use super::Database;
use crate::model::error::StorageError;
use crate::model::ids::{NodeId, ShardIndex};
use crate::storage::{ListenerHandle, ShardObserver, WriteListener};
use std::sync::Arc;

/// The listeners of every database, as one.
pub(super) struct Listeners {
    dbs: Vec<Arc<dyn Database>>,
    map: DatabaseMap,
}

impl Listeners {
    pub(super) fn new(dbs: Vec<Arc<dyn Database>>, map: DatabaseMap) -> Self {
        Listeners { dbs, map }
    }

    /// Whether any database has a listener.
    pub(super) fn any(&self) -> bool {
        self.dbs.iter().any(|d| d.write_listener().is_some())
    }
}

/// An observer of one database's shards that tells the node's of them as global shards.
struct Globalized {
    database: u32,
    map: DatabaseMap,
    inner: Arc<dyn ShardObserver>,
}

impl Globalized {
    fn global(&self, shards: &[ShardIndex]) -> Vec<ShardIndex> {
        shards
            .iter()
            .map(|s| self.map.global(self.database, *s))
            .collect()
    }
}

impl ShardObserver for Globalized {
    fn on_write(&self, shards: &[ShardIndex]) {
        self.inner.on_write(&self.global(shards));
    }

    fn on_missed_writes(&self) {
        self.inner.on_missed_writes();
    }

    fn on_outcomes(&self, shards: &[ShardIndex]) {
        self.inner.on_outcomes(&self.global(shards));
    }
}

impl WriteListener for Listeners {
    fn listen(
        &self,
        node_id: &NodeId,
        shard_count: u32,
        observer: Arc<dyn ShardObserver>,
    ) -> Result<ListenerHandle, StorageError> {
        let mut parts = Vec::new();
        for (d, db) in self.dbs.iter().enumerate() {
            let Some(listener) = db.write_listener() else {
                continue;
            };
            let observer = Arc::new(Globalized {
                database: d as u32,
                map: self.map,
                inner: observer.clone(),
            });
            let share = self.map.shard_count_of(d as u32, shard_count).max(1);
            parts.push(listener.listen(node_id, share, observer)?);
        }
        Ok(ListenerHandle::joined(node_id, parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Heard(Mutex<Vec<ShardIndex>>);

    impl ShardObserver for Heard {
        fn on_write(&self, shards: &[ShardIndex]) {
            self.0.lock().unwrap().extend_from_slice(shards);
        }
    }

    #[test]
    fn a_databases_shards_reach_the_node_in_their_global_form() {
        let heard = Arc::new(Heard::default());
        let g = Globalized {
            database: 2,
            map: DatabaseMap::new(3).unwrap(),
            inner: heard.clone(),
        };
        g.on_write(&[ShardIndex(0), ShardIndex(4)]);
        assert_eq!(*heard.0.lock().unwrap(), [ShardIndex(2), ShardIndex(14)]);
    }
}

//! `EventStore` and `EntityStore` for [`SqlStorage`]: event pages and entity states.

use super::{SqlConnection, SqlStorage, StorageBackend};

#[async_trait::async_trait]
impl<C: SqlConnection, B: StorageBackend<Conn = C>> shardbox_core::EventStore for SqlStorage<C, B> {
    async fn read_events(
        &self,
        after_seq: i64,
        event_types: &[String],
        since: Option<chrono::DateTime<chrono::Utc>>,
        limit: usize,
    ) -> Result<Vec<shardbox_core::StoredEvent>, shardbox_core::StorageError> {
        let event_types = event_types.to_vec();
        self.db
            .run(move |conn| {
                crate::sql::events::read_events(conn, after_seq, event_types, since, limit)
            })
            .await
    }

    async fn read_source_events(
        &self,
        tenant: &str,
        source: &shardbox_core::EventSource,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<shardbox_core::StoredEvent>, shardbox_core::StorageError> {
        let (tenant, source) = (tenant.to_owned(), source.clone());
        self.db
            .run(move |conn| {
                crate::sql::events::read_source_events(conn, tenant, source, after_seq, limit)
            })
            .await
    }

    async fn last_event_seq(&self) -> Result<i64, shardbox_core::StorageError> {
        self.db.run(crate::sql::events::last_event_seq).await
    }

    async fn event_seqs(
        &self,
        ids: &[shardbox_core::SignalId],
    ) -> Result<Vec<(shardbox_core::SignalId, i64)>, shardbox_core::StorageError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = ids.to_vec();
        self.db
            .run(move |conn| crate::sql::events::event_seqs(conn, ids))
            .await
    }

    async fn count_events(
        &self,
        event_types: &[String],
        since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<i64, shardbox_core::StorageError> {
        let event_types = event_types.to_vec();
        self.db
            .run(move |conn| crate::sql::events::count_events(conn, event_types, since))
            .await
    }
}

#[async_trait::async_trait]
impl<C: SqlConnection, B: StorageBackend<Conn = C>> shardbox_core::EntityStore
    for SqlStorage<C, B>
{
    async fn load_states(
        &self,
        keys: &[shardbox_core::storage::EntityKey],
    ) -> Result<Vec<shardbox_core::storage::EntityState>, shardbox_core::StorageError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys = keys.to_vec();
        self.db
            .run(move |conn| crate::sql::entities::load_states(conn, keys))
            .await
    }
}

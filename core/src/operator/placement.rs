//! Where a tool without the application (the `shardbox` command line, a standalone admin
//! server) may put rows: by the strategy the database records, rebuilt — or nowhere.
//!
//! ```text
//!  recorded shard count ──┐
//!  recorded strategy ─────┴─► StableHash { groups } ─► Addressing (as the application places)
//!                              Custom { name }      ─► refused: only the application knows it
//!                              nothing recorded     ─► refused: start a node first
//! ```
//!
//! Hashing by a strategy the application does not use would put a target's rows in a shard
//! it does not live in, where a second node could serve it beside its own shard's owner: a
//! tool refuses instead, and says which call of the application does the same action.

use crate::databases::DatabaseStrategy;
use crate::entity::addressing::Addressing;
use crate::model::error::DeliveryError;
use crate::storage::Storage;

/// The addressing of the application whose database `store` is, rebuilt from what the
/// database records; refused ([`DeliveryError::Unplaceable`]) when no node recorded a shard
/// count or a strategy yet, or when the application uses its own strategy.
pub async fn recorded_addressing<S>(store: &S) -> Result<Addressing, DeliveryError>
where
    S: Storage + ?Sized,
{
    let Some(shard_count) = store.recorded_shard_count().await? else {
        return Err(DeliveryError::Unplaceable {
            reason: "the database has no recorded shard count: no node has run on it yet (start the application once, then try again)".into(),
        });
    };
    let Some(record) = store.recorded_shard_strategy().await? else {
        return Err(DeliveryError::Unplaceable {
            reason: "the database records no shard strategy: no node of this version has started on it yet (start one — it records its strategy — then try again)".into(),
        });
    };
    match record.strategy() {
        Some(strategy) => Ok(Addressing::new(
            DatabaseStrategy::over(strategy, store),
            shard_count,
        )),
        None => Err(DeliveryError::Unplaceable {
            reason: format!(
                "the application places targets by {}, which a tool cannot rebuild; do this through the application (its `Shardbox` calls, or the admin surface mounted in it with `Shardbox::admin_state`)",
                record.describe()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStorage;
    use crate::model::ids::ShardIndex;
    use crate::model::strategy::{ShardStrategy, StableHashStrategy};
    use crate::storage::WorkRegistry;

    struct LastShard;
    impl ShardStrategy for LastShard {
        fn shard_of(&self, _: &str, _: &str, shard_count: u32) -> ShardIndex {
            ShardIndex(shard_count.saturating_sub(1))
        }
    }

    fn refused(result: Result<Addressing, DeliveryError>) -> String {
        match result {
            Err(e @ DeliveryError::Unplaceable { .. }) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_tool_places_by_the_recorded_stock_strategy_only() {
        let store = MemoryStorage::new();
        assert!(refused(recorded_addressing(&store).await).contains("no recorded shard count"));
        store.claim_shard_count(16).await.expect("claim");
        assert!(refused(recorded_addressing(&store).await).contains("records no shard strategy"));

        let app = StableHashStrategy::new().colocate("order", ["order", "payment"]);
        store
            .record_shard_strategy(&app.record())
            .await
            .expect("record");
        let addressing = recorded_addressing(&store)
            .await
            .expect("the stock strategy");
        assert_eq!(addressing.shard_count(), 16);
        for id in ["o-1", "o-2", "o-3"] {
            assert_eq!(
                addressing.shard_of("payment", id),
                app.shard_of("payment", id, 16)
            );
        }

        store
            .record_shard_strategy(&LastShard.record())
            .await
            .expect("record");
        let message = refused(recorded_addressing(&store).await);
        assert!(message.contains("LastShard"), "{message}");
        assert!(message.contains("admin_state"), "{message}");
    }
}

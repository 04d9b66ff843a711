//! What every process of the example runs: a counter per account (the aggregate whose
//! state the framework keeps) and a node over the run's PostgreSQL schema with the example's
//! shard count, lease and poll interval.

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;
use shardbox::storage::{PostgresOptions, PostgresStorage};
use shardbox::NodeId;
use std::time::Duration;

pub const SHARDS: u32 = 32;
pub const ACCOUNTS: usize = 500;
pub const LEASE: Duration = Duration::from_secs(2);
pub const POLL: Duration = Duration::from_millis(250);

/// A counter per account: the framework keeps its state.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Counter {
    pub value: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Increment;

impl Message for Increment {
    const TYPE: &'static str = "cluster.increment";
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Incremented;

impl Message for Incremented {
    const TYPE: &'static str = "cluster.incremented";
}

impl Aggregate for Counter {
    const KIND: &'static str = "counter";
    type Command = Increment;
    type Event = Incremented;

    async fn handle(
        &self,
        _: &Increment,
        _: &Context<'_>,
    ) -> Result<Vec<Incremented>, HandlerError> {
        Ok(vec![Incremented])
    }

    fn apply(&mut self, _: &Incremented) {
        self.value += 1;
    }
}

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A node (not started) named `node`, over `schema` of the database at `url`.
pub async fn shardbox(url: String, schema: &str, node: &str) -> Result<Shardbox, Error> {
    let options = PostgresOptions::default()
        .schema(schema.to_owned())
        .pool_size(8);
    let storage = PostgresStorage::connect_with(url, options).await?;
    Ok(Shardbox::builder()
        .storage(storage)
        .shards(SHARDS)
        .lease_duration(LEASE)
        .poll_interval(POLL)
        .node_id(NodeId(node.into()))
        .aggregate::<Counter>()
        .build()
        .await?)
}

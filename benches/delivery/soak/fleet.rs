//! The soak's nodes: K nodes built alike, one of which can be stopped and started again, and
//! their delivery counters summed over every node that ran (a stopped node's counters are
//! kept when it goes).
//!
//! On PostgreSQL each node has its own storage (pool, listener), so a restart closes and
//! opens connections as a real one does; on SQLite every node shares the one storage of the
//! process (local mode has one pool per file).

use super::model::{Tally, View};
use crate::args::{Args, Backend};
use crate::backend::{postgres_storage, Db};
use shardbox::core::{MetricsSnapshot, Storage};
use shardbox::prelude::*;
use shardbox::{Node, NodeId};
use std::sync::Arc;
use std::time::Duration;

/// Where a node's storage comes from.
pub enum Source {
    /// One storage shared by every node (SQLite).
    Shared(Arc<dyn Storage>),
    /// A fresh PostgreSQL storage per node: URL (with the run's application name), schema.
    Postgres(String, String),
}

impl Source {
    pub async fn new(db: &Db, url_for_nodes: Option<String>) -> Result<Source, String> {
        Ok(match (db.backend, db.pg(), url_for_nodes) {
            (Backend::Postgres, Some((_, schema)), Some(url)) => {
                Source::Postgres(url, schema.clone())
            }
            _ => Source::Shared(db.storage(8).await?),
        })
    }

    pub async fn storage(&self) -> Result<Arc<dyn Storage>, String> {
        match self {
            Source::Shared(s) => Ok(s.clone()),
            Source::Postgres(url, schema) => postgres_storage(url, schema, 4).await,
        }
    }
}

/// A Shardbox with the soak's kinds over `storage`, with `shards` shards (not started).
pub async fn shardbox(
    storage: Arc<dyn Storage>,
    a: &Args,
    shards: u32,
    node: &str,
) -> Result<Shardbox, String> {
    Shardbox::builder()
        .shared_storage(storage)
        .node_id(NodeId(node.to_owned()))
        .shards(shards)
        .page_size(a.page_size)
        .workers(a.workers)
        .poll_interval(Duration::from_millis(200))
        // Expiring messages are due 3 s after their send: swept within seconds of it.
        .ttl_sweep_interval(Duration::from_secs(5))
        .kind_policy(
            Tally::KIND,
            FailurePolicy::new(
                3,
                Backoff::Fixed(Duration::from_secs(1)),
                ExhaustedOutcome::DeadLetter,
            ),
        )
        .aggregate::<Tally>()
        .projection::<View>()
        .build()
        .await
        .map_err(|e| e.to_string())
}

/// Delivery counters summed over nodes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub delivered: u64,
    pub expired: u64,
    pub dead_lettered: u64,
    pub retries: u64,
    pub lease_takeovers: u64,
    pub worker_restarts: u64,
}

impl Totals {
    fn add(&mut self, m: &MetricsSnapshot) {
        self.delivered += m.delivered;
        self.expired += m.expired;
        self.dead_lettered += m.dead_lettered;
        self.retries += m.retries;
        self.lease_takeovers += m.lease_takeovers;
        self.worker_restarts += m.worker_restarts;
    }
}

pub struct Fleet {
    source: Source,
    a: Args,
    nodes: Vec<Option<(Shardbox, Node)>>,
    /// Counters of the nodes that were stopped.
    retired: Totals,
    pub restarts: u64,
}

impl Fleet {
    /// `a.nodes` nodes, started, with `shards` shards.
    pub async fn start(source: Source, a: &Args, shards: u32) -> Result<Fleet, String> {
        let mut fleet = Fleet {
            source,
            a: a.clone(),
            nodes: Vec::new(),
            retired: Totals::default(),
            restarts: 0,
        };
        for i in 0..a.nodes {
            let node = fleet.node(i, shards).await?;
            fleet.nodes.push(Some(node));
        }
        Ok(fleet)
    }

    async fn node(&self, i: usize, shards: u32) -> Result<(Shardbox, Node), String> {
        let sb = shardbox(
            self.source.storage().await?,
            &self.a,
            shards,
            &format!("soak-{i}"),
        )
        .await?;
        let node = sb.start();
        Ok((sb, node))
    }

    /// Stops node `i` (it hands its shards over), waits `down`, then starts it again with
    /// `shards` shards (the count of the moment: a re-sharding may have changed it).
    pub async fn restart(&mut self, i: usize, down: Duration, shards: u32) -> Result<(), String> {
        let i = i % self.nodes.len();
        self.stop(i).await?;
        tokio::time::sleep(down).await;
        let node = self.node(i, shards).await?;
        self.nodes[i] = Some(node);
        self.restarts += 1;
        Ok(())
    }

    async fn stop(&mut self, i: usize) -> Result<(), String> {
        if let Some((sb, node)) = self.nodes[i].take() {
            node.shutdown().await.map_err(|e| e.to_string())?;
            self.retired.add(&sb.metrics());
        }
        Ok(())
    }

    /// Counters over every node that ran.
    pub fn totals(&self) -> Totals {
        let mut t = self.retired;
        for (sb, _) in self.nodes.iter().flatten() {
            t.add(&sb.metrics());
        }
        t
    }

    /// Waits until no shard has a due message (through the first running node).
    pub async fn drain(&self, limit: Duration) -> Result<bool, String> {
        match self.nodes.iter().flatten().next() {
            Some((_, node)) => node.drain(limit).await.map_err(|e| e.to_string()),
            None => Err("no node runs".into()),
        }
    }

    /// Stops every node.
    pub async fn shutdown(&mut self) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            self.stop(i).await?;
        }
        Ok(())
    }
}

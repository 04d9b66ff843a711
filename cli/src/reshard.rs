//! `shardbox reshard --shards N`: changes the Inbox's shard count while the nodes run and
//! traffic flows (see docs/clustering.md, "Changing the shard count"). It runs the library's
//! re-sharding (`shardbox_core::reshard`) with the strategy the database records (every
//! node records its own when it is built): an application with a custom `ShardStrategy`,
//! which the CLI cannot rebuild, is refused and re-shards through `Shardbox::reshard`.

use crate::cli::Guard;
use crate::confirm::confirm;
use crate::error::CliError;
use crate::output::{self, capitalized, outln};
use serde::Serialize;
use shardbox_core::{
    DeliveryConfig, DeliveryError, NodeId, NodeSeat, ReshardOptions, Storage, SystemClock,
};
use std::sync::Arc;
use std::time::Duration;

/// What the command prints.
#[derive(Debug, Serialize)]
struct Done {
    from: u32,
    to: u32,
    inbox_rows: u64,
    inbox_moved: u64,
    records_moved: u64,
    catch_ups: u64,
    gathered_ms: u64,
    switched_ms: u64,
}

/// What a re-sharding would do (`--dry-run`).
#[derive(Debug, Serialize)]
struct Preview {
    dry_run: bool,
    from: u32,
    to: u32,
    /// Inbox rows, each placed again by its target.
    inbox_rows: u64,
    /// The live nodes, which hand their shards over and pause meanwhile.
    nodes: Vec<String>,
}

/// Re-shards `storage` to `to` shards, waiting at most `timeout` for the nodes; with
/// `guard` (a dry run stops after saying what it would do; otherwise it is confirmed).
pub async fn run(
    storage: Arc<dyn Storage>,
    to: u32,
    timeout: Duration,
    guard: Guard,
    json: bool,
) -> Result<(), CliError> {
    let recorded = storage.recorded_shard_count().await?.ok_or_else(|| {
        CliError::NotFound(
            "no shard count is recorded in this database: no node has started on it yet".into(),
        )
    })?;
    // Every row moves to its target's shard by the application's strategy: the recorded
    // one, rebuilt (refused for an application's own strategy, which only it can apply).
    let addressing = shardbox_core::operator::placement::recorded_addressing(&*storage)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    if recorded != to {
        let nodes: Vec<String> = storage
            .members(chrono::Utc::now())
            .await?
            .into_iter()
            .map(|m| m.node_id.0)
            .collect();
        let preview = Preview {
            dry_run: true,
            from: recorded,
            to,
            inbox_rows: storage.counts(None).await?.total(),
            nodes,
        };
        let what = format!(
            "re-shard the Inbox from {recorded} to {to} shards: {} rows placed again by their target, in one transaction (sends wait for it); the live nodes ({}) hand their shards over and pause meanwhile",
            preview.inbox_rows,
            if preview.nodes.is_empty() { "none".to_owned() } else { preview.nodes.join(", ") }
        );
        if guard.dry_run {
            if json {
                return output::print_json(&preview);
            }
            outln!("would {what}; nothing changed (dry run)")?;
            return Ok(());
        }
        confirm(&format!("{}?", capitalized(&what)), &guard)?;
    }
    let config = DeliveryConfig::builder()
        .shard_count(recorded)
        .node_id(NodeId("cli".into()))
        .build()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let seat = NodeSeat::new(storage, &config, Arc::new(SystemClock));
    if !json {
        eprintln!(
            "re-sharding {recorded} -> {to}: the nodes hand their shards over at their next poll round…"
        );
    }
    let report = shardbox_core::reshard(&seat, &addressing, to, &ReshardOptions { timeout })
        .await
        .map_err(|e| match e {
            DeliveryError::Storage(e) => CliError::Storage(e),
            other => CliError::Usage(other.to_string()),
        })?;
    let done = Done {
        from: report.from,
        to: report.to,
        inbox_rows: report.moves.inbox_rows,
        inbox_moved: report.moves.inbox_moved,
        records_moved: report.moves.records_moved,
        catch_ups: report.moves.catch_ups,
        gathered_ms: report.gathered_in.as_millis() as u64,
        switched_ms: report.switched_in.as_millis() as u64,
    };
    if json {
        return output::print_json(&done);
    }
    if done.from == done.to {
        outln!("the Inbox has {} shards already; nothing changed", done.to)?;
        return Ok(());
    }
    outln!(
        "re-sharded {} -> {} shards: {} of {} inbox rows moved, {} dead letters/outcomes, {} running catch-ups; delivery paused {} ms (gather) + {} ms (switch, sends waited)",
        done.from,
        done.to,
        done.inbox_moved,
        done.inbox_rows,
        done.records_moved,
        done.catch_ups,
        done.gathered_ms,
        done.switched_ms
    )?;
    outln!(
        "start new nodes with .shards({}); a node configured with {} is refused",
        done.to,
        done.from
    )?;
    Ok(())
}

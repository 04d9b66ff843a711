//! The `relay` workload: what moving messages between databases costs (issue 35's outbox).
//! A source database's stages commit N rows — once as their own fan-out (rows for targets in
//! the same database, the baseline), once into the outbox for another database — in stages
//! of `--batch` rows; then a relay copies the outbox into a target database of the same
//! backend in batches of `--batch` and trims it.
//!
//! Reported: the relay's rows per second (`msgs/s`), the two commit rates and their ratio
//! (what an outbox row costs a stage against a local one), and the audit: every row in the
//! target's Inbox once (`lost`, `duplicates` as the relay's copies counted them).

use crate::args::Args;
use crate::backend::Db;
use crate::report::Report;
use shardbox::conformance::fixtures::{command, stage};
use shardbox::core::storage::OutboxWrite;
use shardbox::core::{NodeId, Relay, ShardIndex, Storage, WorkerId};
use std::time::Instant;

/// Commits `n` rows in stages of `batch` under one lease of shard 0: as fan-out rows when
/// `outbox` is false, else as outbox rows for database 1. Returns rows per second.
async fn commit_rows(
    store: &dyn Storage,
    n: usize,
    batch: usize,
    outbox: bool,
) -> Result<f64, String> {
    let now = chrono::Utc::now();
    let lease = store
        .pick_up(
            ShardIndex(0),
            &NodeId("relay-bench".into()),
            WorkerId(0),
            now,
            now + chrono::Duration::hours(1),
        )
        .await
        .map_err(|e| e.to_string())?
        .ok_or("shard 0 is taken")?;
    let started = Instant::now();
    let mut sent = 0;
    while sent < n {
        let rows: Vec<_> = (sent..n.min(sent + batch))
            .map(|i| {
                command(
                    1 + (i % 15) as u32,
                    &format!("t{}", i % 1000),
                    &format!("{outbox}-{i}"),
                )
            })
            .collect();
        sent += rows.len();
        let mut commit = stage(&lease, now, vec![]);
        if outbox {
            commit.outbox = rows
                .into_iter()
                .map(|write| OutboxWrite { database: 1, write })
                .collect();
        } else {
            commit.writes.messages = rows;
        }
        store
            .commit_stage(commit)
            .await
            .map_err(|e| e.to_string())?;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    store.release(&lease).await.map_err(|e| e.to_string())?;
    Ok(rate)
}

pub async fn relay(a: &Args) -> Result<Report, String> {
    let (source_db, target_db) = (Db::new(a.backend)?, Db::new(a.backend)?);
    let source = source_db.storage(8).await?;
    let target = target_db.storage(8).await?;
    let batch = a.batch.max(1);
    eprintln!(
        "committing {} rows as local fan-out, then as outbox rows, in stages of {batch}…",
        a.n
    );
    let local = commit_rows(source.as_ref(), a.n, batch, false).await?;
    let outbox = commit_rows(source.as_ref(), a.n, batch, true).await?;
    eprintln!("relaying them to the target database in batches of {batch}…");
    let relay = Relay::new(source.clone(), 0, target.clone(), 1, batch);
    let started = Instant::now();
    let (mut copied, mut duplicates) = (0, 0);
    loop {
        let step = relay.step().await.map_err(|e| e.to_string())?;
        copied += step.copied;
        duplicates += step.duplicates;
        if step.idle() {
            break;
        }
    }
    let rate = copied as f64 / started.elapsed().as_secs_f64();
    let pending = target
        .counts(None)
        .await
        .map_err(|e| e.to_string())?
        .pending();
    let left = source
        .outbox_page(1, 0, 1)
        .await
        .map_err(|e| e.to_string())?
        .len();
    Ok(Report {
        workload: a.workload.name(),
        backend: target_db.backend.name(),
        n: a.n,
        msgs_per_s: rate,
        lost: (a.n as u64).saturating_sub(pending),
        duplicates: duplicates as u64,
        extra: vec![
            ("local_commit_rows_per_s", local),
            ("outbox_commit_rows_per_s", outbox),
            ("outbox_over_local", outbox / local.max(1e-9)),
            ("batch", batch as f64),
            ("outbox_rows_left", left as f64),
        ],
        ..Report::default()
    })
}

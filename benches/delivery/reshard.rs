//! The `reshard` workload: what an online re-sharding costs as the Inbox grows. N commands
//! wait in the Inbox (T targets, `--shards` shards, no node serving); the Inbox is re-sharded
//! to twice the count and back, each switch timed; then a node delivers everything and every
//! target's counter is checked (nothing lost or doubled across the two changes).
//!
//! Reported: the switch's rows per second (`msgs/s`: rows looked at per second of the
//! switch's transaction, growing), each switch's time and rows moved.

use crate::args::Args;
use crate::backend::Db;
use crate::report::Report;
use crate::traffic::{check, send_all, shardbox};
use std::time::{Duration, Instant};

pub async fn reshard(a: &Args) -> Result<Report, String> {
    let db = Db::new(a.backend)?;
    let storage = db.storage(8).await?;
    let sb = shardbox(storage, a, "reshard-bench").await?;
    eprintln!(
        "sending {} commands to {} targets (no node serving)…",
        a.n, a.targets
    );
    send_all(&sb, a.n, a.targets, 100).await?;
    let mut r = Report {
        workload: a.workload.name(),
        backend: db.backend.name(),
        n: a.n,
        ..Report::default()
    };
    for (step, to) in [("grow", a.shards * 2), ("shrink", a.shards)] {
        let started = Instant::now();
        let report = sb.reshard(to).await.map_err(|e| e.to_string())?;
        let whole = started.elapsed();
        let switch = report.switched_in.as_secs_f64();
        eprintln!(
            "{step} {} -> {}: {} rows, {} moved; switch {:.0} ms, gather {:.0} ms, call {:.0} ms",
            report.from,
            report.to,
            report.moves.inbox_rows,
            report.moves.inbox_moved,
            switch * 1e3,
            report.gathered_in.as_secs_f64() * 1e3,
            whole.as_secs_f64() * 1e3
        );
        if step == "grow" {
            r.msgs_per_s = report.moves.inbox_rows as f64 / switch.max(1e-9);
            r.extra.push(("grow_switch_ms", switch * 1e3));
            r.extra
                .push(("grow_moved", report.moves.inbox_moved as f64));
        } else {
            r.extra.push(("shrink_switch_ms", switch * 1e3));
            r.extra
                .push(("shrink_moved", report.moves.inbox_moved as f64));
        }
        if step == "grow" {
            r.extra.push(("rows", report.moves.inbox_rows as f64));
        }
    }
    let node = sb.start();
    let drained = node
        .drain(Duration::from_secs(600))
        .await
        .map_err(|e| e.to_string())?;
    node.shutdown().await.map_err(|e| e.to_string())?;
    if !drained {
        return Err("the Inbox did not drain after the re-shardings".into());
    }
    let (lost, duplicates) = check(&sb, a.n, a.targets).await?;
    r.lost = lost;
    r.duplicates = duplicates;
    Ok(r)
}

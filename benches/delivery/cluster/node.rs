//! The node process's side of the `cluster` workload (`--node-process`): serve the run's
//! schema, say when ready, answer the parent's counts on stdin, and report its figures when it
//! stops.

use super::cpu::cpu_seconds;
use super::protocol::{COUNT, POOL, READY, START_STOP_TIMEOUT, STOPPED};
use crate::args::{Args, Backend};
use crate::backend::postgres_storage;
use crate::report::peak_rss_mib;
use crate::traffic::shardbox;
use shardbox::Shardbox;
use std::io::Write as _;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A node process's main (`--node-process <id> --schema <schema>`): serves the schema with
/// the same settings as the other workloads' nodes until its stdin closes or a line `stop`
/// arrives, then shuts down and prints one `stopped delivered=N …` line. A line `count` is
/// answered with `count delivered=N`.
pub async fn serve_node(a: &Args, node: &str) -> Result<(), String> {
    if a.backend != Backend::Postgres {
        return Err("--node-process needs --backend postgres".into());
    }
    let schema = a.schema.as_deref().ok_or("--node-process needs --schema")?;
    let url = std::env::var("SHARDBOX_PG_URL")
        .map_err(|_| "a node process needs SHARDBOX_PG_URL".to_owned())?;
    let sb = shardbox(postgres_storage(&url, schema, POOL).await?, a, node).await?;
    let running = sb.start();
    // Ready only once the listener is connected: from then on the sender's writes wake this
    // node at once instead of at its next poll.
    let deadline = Instant::now() + START_STOP_TIMEOUT;
    loop {
        match running.listener() {
            Some(l) if l.connected => break,
            None => return Err("the storage has no listener for other processes' writes".into()),
            Some(_) if Instant::now() > deadline => {
                return Err(format!(
                    "the listener did not connect within {START_STOP_TIMEOUT:?}"
                ))
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    say(READY)?;
    serve_stdin(&sb).await?;
    let listener = running.listener().unwrap_or_default();
    running.shutdown().await.map_err(|e| e.to_string())?;
    let m = sb.metrics();
    say(&format!(
        "{STOPPED} delivered={} stages={} pick_ups={} takeovers={} refusals={} lease_losses={} \
         notifications={} listener_connects={} peak_rss_mib={:.1} cpu_s={:.2}",
        m.delivered,
        m.stages,
        m.lease_pick_ups,
        m.lease_takeovers,
        m.lease_refusals,
        m.lease_losses,
        listener.notifications,
        listener.connects,
        peak_rss_mib(),
        cpu_seconds()
    ))
}

/// One line to the parent on stdout; an error (not a panic) if the parent is gone.
fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing `{line}` to stdout: {e}"))
}

/// Answers `count` lines on stdin; returns when stdin closes or a line `stop` arrives.
async fn serve_stdin(sb: &Shardbox) -> Result<(), String> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| format!("reading stdin: {e}"))?
    {
        match line.trim() {
            "stop" => break,
            "count" => say(&format!("{COUNT} delivered={}", sb.metrics().delivered))?,
            other => return Err(format!("unknown request `{other}` on stdin")),
        }
    }
    Ok(())
}

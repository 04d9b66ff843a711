//! The parent's handle on a node process: started as this binary in `--node-process` mode,
//! asked for its delivered count, told to stop, and its `stopped` figures parsed
//! ([`NodeStats`]). A process that ends before it is told to, or fails, is an error of the run.

use super::protocol::{COUNT, START_STOP_TIMEOUT, STOPPED};
use crate::args::Args;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// What a node process reported when it stopped: `key=value` pairs of its `stopped` line.
pub(super) struct NodeStats {
    pub(super) name: String,
    fields: Vec<(String, f64)>,
}

impl NodeStats {
    fn parse(name: &str, line: &str) -> Result<NodeStats, String> {
        let fields = line
            .split_whitespace()
            .skip(1)
            .map(|kv| {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("{name}: bad field `{kv}` in `{line}`"))?;
                let v = v
                    .parse()
                    .map_err(|_| format!("{name}: bad value in `{kv}`"))?;
                Ok((k.to_owned(), v))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let stats = NodeStats {
            name: name.to_owned(),
            fields,
        };
        if !stats.fields.iter().any(|(k, _)| k == "delivered") {
            return Err(format!("{name}: no delivered count in `{line}`"));
        }
        Ok(stats)
    }

    pub(super) fn get(&self, key: &str) -> f64 {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0.0, |(_, v)| *v)
    }
}

/// A node process started by the parent: this binary in `--node-process` mode, killed if
/// dropped while running.
pub(super) struct NodeProcess {
    name: String,
    pub(super) child: Child,
    stdin: Option<ChildStdin>,
    /// Lines of its stdout.
    lines: mpsc::UnboundedReceiver<String>,
}

impl NodeProcess {
    pub(super) fn spawn(
        a: &Args,
        url: &str,
        schema: &str,
        name: &str,
    ) -> Result<NodeProcess, String> {
        let exe = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["--backend", "postgres", "--node-process", name])
            .args(["--schema", schema])
            .args(["--shards", &a.shards.to_string()])
            .args(["--page-size", &a.page_size.to_string()]);
        if let Some(c) = a.cache_capacity {
            cmd.args(["--cache-capacity", &c.to_string()]);
        }
        cmd.env("SHARDBOX_PG_URL", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting node process {name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("a node process without stdout")?;
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = out.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(NodeProcess {
            name: name.to_owned(),
            child,
            stdin,
            lines,
        })
    }

    /// Waits for a line starting with `prefix` and returns it; other lines are passed on to
    /// stderr. An error if the process ends first or the line does not come in time.
    pub(super) async fn wait_for(
        &mut self,
        prefix: &str,
        timeout: Duration,
    ) -> Result<String, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if line.starts_with(prefix) => return Ok(line),
                Ok(Some(line)) => eprintln!("{}: {line}", self.name),
                Ok(None) => {
                    let exit = match tokio::time::timeout(timeout, self.child.wait()).await {
                        Ok(Ok(status)) => status.to_string(),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "still running".into(),
                    };
                    return Err(format!(
                        "node process {} closed its stdout before `{}` ({exit})",
                        self.name,
                        prefix.trim()
                    ));
                }
                Err(_) => {
                    return Err(format!(
                        "node process {}: no `{prefix}` within {timeout:?}",
                        self.name
                    ))
                }
            }
        }
    }

    /// An error if the process has exited (it must run until told to stop).
    pub(super) fn still_running(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "node process {} exited during the run: {status}",
                self.name
            )),
            Err(e) => Err(format!("node process {}: {e}", self.name)),
        }
    }

    /// The process's delivered count, asked for on its stdin.
    pub(super) async fn delivered(&mut self) -> Result<u64, String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| format!("node process {} was told to stop", self.name))?;
        if let Err(e) = stdin.write_all(b"count\n").await {
            self.still_running()?;
            return Err(format!("node process {}: {e}", self.name));
        }
        let line = self
            .wait_for(&format!("{COUNT} "), START_STOP_TIMEOUT)
            .await?;
        let stats = NodeStats::parse(&self.name, &line)?;
        Ok(stats.get("delivered") as u64)
    }

    /// Tells the process to stop: a `stop` line, then its stdin closes.
    pub(super) async fn tell_stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            // A process that already died shows in `finish`.
            let _ = stdin.write_all(b"stop\n").await;
            let _ = stdin.flush().await;
        }
    }

    /// Waits for the `stopped` line and a successful exit.
    pub(super) async fn finish(mut self) -> Result<NodeStats, String> {
        self.tell_stop().await;
        let line = self.wait_for(STOPPED, START_STOP_TIMEOUT).await?;
        let status = tokio::time::timeout(START_STOP_TIMEOUT, self.child.wait())
            .await
            .map_err(|_| format!("node process {} did not exit", self.name))?
            .map_err(|e| format!("node process {}: {e}", self.name))?;
        if !status.success() {
            return Err(format!("node process {} failed: {status}", self.name));
        }
        NodeStats::parse(&self.name, &line)
    }
}

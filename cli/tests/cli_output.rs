//! What the binary writes, as a script or a pager reads it: `catch-up progress --follow`
//! prints a line per change when its output is a pipe (the bar is for terminals); a reader
//! that stops early (`| head -1`) ends the command quietly with exit 0; the text output
//! speaks the operator's words (no library type names such as `Requeue`) and names a
//! missing thing as the JSON does (`missing`).

use serde::{Deserialize, Serialize};
use shardbox::core::Storage;
use shardbox::prelude::*;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
mod support;

use support::binary::{code, json, run, stderr, stdout};
use support::seed::seed;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ticked;
impl Message for Ticked {
    const TYPE: &'static str = "cli-output-test.ticked";
}

/// How many events a counter saw.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Counter(u64);
impl Projection for Counter {
    const KIND: &'static str = "counter";
    type Event = Ticked;
    async fn apply(&mut self, _: &Ticked, _: &Context<'_>) -> Result<(), HandlerError> {
        self.0 += 1;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_prints_progress_lines_into_a_pipe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("follow.db");
    let storage = SqliteStorage::open(&path).await.expect("open");
    let sb = Shardbox::builder()
        .storage(storage)
        .shards(2)
        .poll_interval(Duration::from_millis(50))
        .projection::<Counter>()
        .build()
        .await
        .expect("build");
    for i in 0..20 {
        sb.post(EventSource::external(format!("c-{}", i % 3)), &Ticked)
            .await
            .expect("post");
    }
    let node = sb.start();
    let job = sb.catch_up::<Counter>(CatchUp::all()).await.expect("start");
    let done = job.wait(Duration::from_secs(60)).await.expect("wait");
    assert_eq!(done.status, shardbox::CatchUpStatus::Completed, "{done:?}");
    node.shutdown().await.expect("shutdown");

    // `output()` gives the child a pipe, not a terminal, as `| tee log` does.
    let db = path.to_str().expect("utf-8 path");
    let id = job.id().to_string();
    let out = run(db, None, &["catch-up", "progress", &id, "--follow"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one line for one state: {text:?}");
    assert!(
        lines[0].starts_with(&format!("catch-up {id} of counter: completed"))
            && lines[0].contains("20 of ~"),
        "{text:?}"
    );
}

/// A reader that has what it wants closes the pipe; the command's next write fails. That
/// is no error of the command: no message, exit 0 (as `git log | head -1` does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pipe.db");
    let storage: Arc<dyn Storage> = Arc::new(SqliteStorage::open(&path).await.expect("open"));
    let (sb, _gate) = seed(storage).await;
    drop(sb);
    let db = path.to_str().expect("utf-8 path");
    for args in [
        &["status", "--all-shards"][..],
        &["dead-letters", "list"],
        &["--json", "dead-letters", "list"],
        &["blocked", "list"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shardbox"))
            .env_remove("SHARDBOX_DB")
            .arg("--db")
            .arg(db)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // Closed before the command has opened its database, let alone written.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("Broken pipe") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_output_speaks_the_operators_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("words.db");
    let storage: Arc<dyn Storage> = Arc::new(SqliteStorage::open(&path).await.expect("open"));
    let (sb, _gate) = seed(storage).await;
    let db = path.to_str().expect("utf-8 path");

    let out = run(db, None, &["blocked", "unblock", "vault", "v-1"]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(text.contains("1 blocked message requeued"), "{text}");
    assert!(!text.contains("Requeue"), "no type name: {text}");

    // The requeue's count of dead letters that went away before it could requeue them is
    // `missing` in the JSON: the text says the same word.
    let listed = json(db, None, &["dead-letters", "list"]);
    let id = listed["dead_letters"][0]["id"].to_string();
    let requeued = json(db, None, &["dead-letters", "requeue", "--id", &id, "--yes"]);
    assert_eq!(requeued["requeued"], 1, "{requeued}");
    assert_eq!(requeued["missing"], 0, "{requeued}");
    drop(sb);
    let out = run(db, None, &["dead-letters", "requeue", "--id", &id]);
    let text = stdout(&out);
    assert_eq!(code(&out), 1, "nothing left to requeue: {}", stderr(&out));
    assert!(text.contains("missing 0"), "{text}");
    assert!(!text.contains("gone"), "one word for it: {text}");
}

/// `shardbox completions SHELL` prints the shell's completion script, generated from the
/// command line itself (every subcommand and flag), without a database.
#[test]
fn completions_are_printed_for_each_shell_without_a_database() {
    for (shell, marker) in [
        ("bash", "_shardbox()"),
        ("zsh", "#compdef shardbox"),
        ("fish", "complete -c shardbox"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shardbox"))
            .env_remove("SHARDBOX_DB")
            .args(["completions", shell])
            .output()
            .expect("run the shardbox binary");
        let script = stdout(&out);
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["dead-letters", "catch-up", "reshard", "dry-run"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let unknown = Command::new(env!("CARGO_BIN_EXE_shardbox"))
        .args(["completions", "tcsh"])
        .output()
        .expect("run the shardbox binary");
    assert_eq!(code(&unknown), 2, "an unknown shell is a usage error");
}

//! The built `shardbox` binary run as a process against a database, as an operator runs it.

use serde_json::Value;
use std::process::{Command, Output};

/// Runs the binary with `args` against `db` (and `schema`), with no `SHARDBOX_DB` or
/// `SHARDBOX_PG_SCHEMA` from the test's environment.
pub fn run(db: &str, schema: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardbox"));
    command
        .env_remove("SHARDBOX_DB")
        .env_remove("SHARDBOX_PG_SCHEMA");
    command.arg("--db").arg(db);
    if let Some(schema) = schema {
        command.arg("--schema").arg(schema);
    }
    command
        .args(args)
        .output()
        .expect("run the shardbox binary")
}

/// Its exit code.
pub fn code(out: &Output) -> i32 {
    out.status.code().expect("exited")
}

/// Its standard output.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Its standard error.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs with `--json`, asserts exit 0, and parses stdout: the whole document, or its last line
/// (a command that prints JSON lines as it goes).
pub fn json(db: &str, schema: Option<&str>, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = run(db, schema, &all);
    assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    let text = stdout(&out);
    serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(text.lines().last().unwrap_or("")))
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

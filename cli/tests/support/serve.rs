//! `shardbox serve` as a process on a free port (`--listen 127.0.0.1:0`; the address is
//! read from its first line), killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `shardbox serve`.
pub struct Served {
    child: Child,
    /// Its address, host:port.
    pub addr: String,
}

impl Served {
    /// Starts it over `db` (tables in `schema`) with `extra` arguments.
    pub fn start(db: &str, schema: Option<&str>, extra: &[&str]) -> Served {
        let mut command = Command::new(env!("CARGO_BIN_EXE_shardbox"));
        command
            .env_remove("SHARDBOX_DB")
            .env_remove("SHARDBOX_PG_SCHEMA")
            .arg("--db")
            .arg(db);
        if let Some(schema) = schema {
            command.arg("--schema").arg(schema);
        }
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start shardbox serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut first = String::new();
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("read the listening line");
        let addr = first
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|a| a.strip_suffix('/'))
            .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
            .to_owned();
        Served { child, addr }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! `/health/live` and `/health/ready`.
//!
//! ```text
//!  live   the process answers                                   → 200
//!  ready  storage reachable (a read of the lock table)          ┐
//!         schema current (Storage::schema_check, if it has one) ├ all ok → 200, else 503
//!         workers alive (the mounted node's liveness, if any)   ┘
//! ```

use crate::http::state::AdminState;
use serde::Serialize;

/// One readiness check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Whether it passed.
    pub ok: bool,
    /// What was seen, in words.
    pub detail: String,
}

impl Check {
    fn pass(detail: impl Into<String>) -> Self {
        Check {
            ok: true,
            detail: detail.into(),
        }
    }

    fn fail(detail: impl Into<String>) -> Self {
        Check {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// The readiness answer.
#[derive(Debug, Clone, Serialize)]
pub struct Readiness {
    /// Every check passed.
    pub ready: bool,
    /// The storage answered a read.
    pub storage: Check,
    /// The schema is the one this binary expects.
    pub schema: Check,
    /// The node's tasks run (or: no node is mounted).
    pub workers: Check,
}

/// Runs the readiness checks.
pub async fn readiness(state: &AdminState) -> Readiness {
    let storage = match state.storage.sessions().await {
        Ok(sessions) => Check::pass(format!(
            "{} answered ({} shard leases)",
            state.storage.describe(),
            sessions.len()
        )),
        Err(e) => Check::fail(e.to_string()),
    };
    let schema = match state.storage.schema_check() {
        None => Check::pass("the backend has no schema"),
        Some(check) => match check.check_schema().await {
            Ok(()) => Check::pass("current"),
            Err(e) => Check::fail(e.to_string()),
        },
    };
    let workers = match &state.node {
        None => Check::pass("no node in this process (standalone admin server)"),
        Some(node) => {
            let l = node.liveness();
            let text = format!(
                "{} of {} node tasks running{}",
                l.running,
                l.started,
                if l.stopping { ", shutting down" } else { "" }
            );
            if l.alive() {
                Check::pass(text)
            } else {
                Check::fail(text)
            }
        }
    };
    Readiness {
        ready: storage.ok && schema.ok && workers.ok,
        storage,
        schema,
        workers,
    }
}

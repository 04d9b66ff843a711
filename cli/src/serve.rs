//! `shardbox serve`: the admin HTTP surface (`shardbox_admin::router`) over the database,
//! alone, until Ctrl-C.
//!
//! Standalone, it has no node beside it: readiness checks the database and its schema, the
//! metrics are the gauges read from the database, and a requeue goes to the shard the dead
//! letter died in (running nodes find it at their next poll).

use crate::error::CliError;
use crate::output::outln;
use shardbox_admin::{router, AdminState};
use shardbox_core::Storage;
use std::net::SocketAddr;
use std::sync::Arc;

/// Serves `storage` on `listen` until interrupted, answering requests addressed to the
/// loopback names, the address listened on (unless it is the unspecified one, 0.0.0.0 or
/// ::, which no request is addressed to) and `allowed_hosts`.
pub async fn run(
    storage: Arc<dyn Storage>,
    listen: SocketAddr,
    allow_actions: bool,
    allowed_hosts: Vec<String>,
) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CliError::Usage(format!("cannot listen on {listen}: {e}")))?;
    let bound = listener.local_addr().map_err(CliError::Output)?;
    let database = storage.describe();
    let listened = (!bound.ip().is_unspecified()).then(|| bound.ip().to_string());
    let state = AdminState::new(storage)
        .allow_actions(allow_actions)
        .allow_hosts(listened)
        .allow_hosts(allowed_hosts);
    let hosts = state.allowed_hosts().join(", ");
    let app = router(state);
    outln!("listening on http://{bound}/")?;
    eprintln!(
        "serving {database}; operator actions {}; answering the hosts {hosts} (--allowed-host to add)",
        if allow_actions {
            "enabled"
        } else {
            "off (--allow-actions to enable)"
        }
    );
    shardbox_admin::axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(CliError::Output)
}

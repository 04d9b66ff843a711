//! # shardbox-admin
//!
//! The operator's surface of Shardbox, in two layers:
//!
//! ```text
//!  views   status, dead letters, blocked targets, catch-ups: read and act over narrow stores
//!          (one source for the `shardbox` CLI and the HTTP API)
//!  http    an axum Router: /health/live, /health/ready, /metrics (Prometheus text),
//!          /api/* (JSON views; POST actions only when allowed), / (the web dashboard)
//!  history the status samples the dashboard plots, kept by the server (the last hour)
//! ```
//!
//! An application mounts [`router`] beside its node (the facade's `admin` feature builds the
//! state from a `Shardbox` and its `Node`); `shardbox serve` runs it alone over a database.
//!
//! ```no_run
//! # async fn run(storage: std::sync::Arc<dyn shardbox_core::Storage>) -> std::io::Result<()> {
//! use shardbox_admin::{router, AdminState};
//! let app = router(AdminState::new(storage).allow_actions(false));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod error;
pub mod history;
pub mod http;
pub mod views;

pub use error::AdminError;
pub use http::router;
pub use http::state::{AdminState, RunningNode};

/// The axum version the router is built with, for applications that mount it.
pub use axum;

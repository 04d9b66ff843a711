//! The admin HTTP surface: one axum [`Router`] an application mounts (or `shardbox serve`
//! runs alone).
//!
//! ```text
//!  /               the dashboard (one HTML page, inline JS and CSS, polls /api/*)
//!  /health/live    200 while the process answers
//!  /health/ready   storage, schema, workers (health)            200 | 503
//!  /metrics        Prometheus text: gauges from the database, the node's counters
//!  /api/*          the JSON API (api): views, and actions when allowed
//! ```
//!
//! Every request passes the guard first ([`guard`]): a `Host` the surface answers, and for
//! a POST no foreign `Origin` and a JSON content type, so that no web page an operator
//! visits can read or act through the operator's browser.
//!
//! Nothing here decides what to show: the views do (see [`crate::views`]).

pub mod api;
mod dashboard;
pub mod guard;
pub mod health;
pub mod kinds_api;
pub mod prometheus;
pub mod state;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::middleware;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use kinds_api::KindStep;
use state::AdminState;

/// The router over `state`. Mount it as it is (`app.merge(router(state))`) or under a
/// prefix (`app.nest("/admin", router(state))`); the dashboard finds its API relative to
/// its own address.
/// It starts the sampler of the dashboard's history (see [`state::AdminState::history`])
/// when built inside a tokio runtime.
pub fn router(state: AdminState) -> Router {
    state::start_sampler(&state);
    Router::new()
        .route("/", get(dashboard))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/api/admin", get(api::admin))
        .route("/api/status", get(api::status))
        .route("/api/history", get(api::history))
        .route("/api/dead-letters", get(api::dead_letters))
        .route("/api/dead-letters/requeue", post(api::requeue))
        .route("/api/dead-letters/purge", post(api::purge))
        .route("/api/dead-letters/{id}", get(api::dead_letter))
        .route("/api/blocked", get(api::blocked))
        .route("/api/blocked/unblock", post(api::unblock))
        .route(
            "/api/catch-ups",
            get(api::catch_ups).post(api::start_catch_up),
        )
        .route("/api/catch-ups/{id}", get(api::catch_up))
        .route("/api/catch-ups/{id}/cancel", post(api::cancel_catch_up))
        .route("/api/read-models", get(api::read_models))
        .route("/api/kinds", get(kinds_api::kinds))
        .route(
            "/api/kinds/{kind}/pause",
            post(|s, k, b| kinds_api::steer_kind(KindStep::Pause, s, k, b)),
        )
        .route(
            "/api/kinds/{kind}/resume",
            post(|s, k, b| kinds_api::steer_kind(KindStep::Resume, s, k, b)),
        )
        .route(
            "/api/kinds/{kind}/settings",
            post(kinds_api::set_kind_settings),
        )
        .fallback(api::no_route)
        .method_not_allowed_fallback(api::no_method)
        .layer(middleware::from_fn_with_state(state.clone(), guard::check))
        .with_state(state)
}

async fn dashboard() -> Html<&'static str> {
    Html(dashboard::PAGE)
}

async fn live() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "live": true }))
}

async fn ready(State(state): State<AdminState>) -> Response {
    let readiness = health::readiness(&state).await;
    let code = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(readiness)).into_response()
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let status =
        match crate::views::status::read_for_gauges(&state.reads(), chrono::Utc::now()).await {
            Ok(status) => status,
            Err(e) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("# the database could not be read: {e}\n"),
                )
                    .into_response()
            }
        };
    let node = state.node.as_ref().map(|n| (n.node_id(), n.metrics()));
    let text = prometheus::render(
        &status,
        node.as_ref().map(|(id, snapshot)| (id.as_str(), snapshot)),
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

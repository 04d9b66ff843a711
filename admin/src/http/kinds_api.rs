//! The kinds' routes of the JSON API: steering a kind while the nodes run (see
//! [`crate::views::kinds`]). Actions are refused with 403 unless the state allows them, as
//! every action of [`super::api`].
//!
//! ```text
//!  GET  /api/kinds                    every kind: paused or not, run-time settings (KindList)
//!  POST /api/kinds/{kind}/pause       body: {} or {"force": true} → PauseOutcome
//!  POST /api/kinds/{kind}/resume      body: {} or {"force": true} → ResumeOutcome
//!  POST /api/kinds/{kind}/settings    body: {settings: SettingsView, force?} → the KindView
//! ```

use super::api::{allowed, ok, ApiResult};
use crate::http::state::AdminState;
use crate::views::kinds::{self, SettingsView};
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::Json;
use chrono::Utc;
use shardbox_core::ShardIndex;

/// Tells the node the router is mounted beside, if any, that a kind changed (it reads the
/// controls at once and wakes the workers of `shards`).
fn changed(state: &AdminState, shards: &[ShardIndex]) {
    if let Some(node) = &state.node {
        node.kinds_changed(shards);
    }
}

/// The body of a kind action: `{}`, or `{"force": true}` to act on a kind no live node
/// registers and the database holds no controls for.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindAction {
    #[serde(default)]
    force: bool,
}

/// The body of `POST /api/kinds/{kind}/settings`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindSettingsRequest {
    /// The kind's run-time settings (`{}` clears them).
    settings: SettingsView,
    #[serde(default)]
    force: bool,
}

/// `GET /api/kinds`: every kind the live nodes register or the database holds controls
/// for: paused or not, its run-time settings.
pub async fn kinds(State(state): State<AdminState>) -> ApiResult {
    ok(kinds::list(&*state.storage, Utc::now()).await?)
}

/// The two ways to steer a kind: the last segment of its route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindStep {
    /// `POST /api/kinds/{kind}/pause` → `PauseOutcome`.
    Pause,
    /// `POST /api/kinds/{kind}/resume` → `ResumeOutcome` (the node wakes the shards whose
    /// parked messages were released).
    Resume,
}

/// `POST /api/kinds/{kind}/pause` and `POST /api/kinds/{kind}/resume`: one handler, the
/// route says which step (`post(|s, k, b| steer_kind(KindStep::Pause, s, k, b))`).
pub async fn steer_kind(
    step: KindStep,
    State(state): State<AdminState>,
    Path(kind): Path<String>,
    body: Result<Json<KindAction>, JsonRejection>,
) -> ApiResult {
    allowed(&state)?;
    let Json(action) = body?;
    let now = Utc::now();
    match step {
        KindStep::Pause => {
            let outcome = kinds::pause(&*state.storage, &kind, action.force, now).await?;
            changed(&state, &[]);
            ok(outcome)
        }
        KindStep::Resume => {
            let outcome = kinds::resume(&*state.storage, &kind, action.force, now).await?;
            changed(&state, &outcome.report.shards);
            ok(outcome)
        }
    }
}

/// `POST /api/kinds/{kind}/settings`.
pub async fn set_kind_settings(
    State(state): State<AdminState>,
    Path(kind): Path<String>,
    body: Result<Json<KindSettingsRequest>, JsonRejection>,
) -> ApiResult {
    allowed(&state)?;
    let Json(request) = body?;
    let view = kinds::set(
        &*state.storage,
        &kind,
        &request.settings,
        request.force,
        Utc::now(),
    )
    .await?;
    changed(&state, &[]);
    ok(view)
}

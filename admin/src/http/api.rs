//! The JSON API: the views of [`crate::views`] as GET routes and the operator actions as
//! POST routes, refused with 403 unless the state allows actions.
//!
//! ```text
//!  GET  /api/admin                    {actions_allowed, node}
//!  GET  /api/status                   views::status::Status
//!  GET  /api/history?after=           the samples kept for the dashboard's plots
//!                                     (history::HistoryView: the last hour at most; with
//!                                     after=<a point's t>, only the later ones)
//!  GET  /api/dead-letters?kind=&target=&tenant=&since=&until=&after=&limit=
//!                                     (the CLI's filters: one DeadLetterQuery for both)
//!  GET  /api/dead-letters/{id}        one dead letter whole
//!  POST /api/dead-letters/requeue     body: DeadLetterQuery (JSON; `shards` as the CLI's
//!                                     --shards) → RequeueOutcome
//!  POST /api/dead-letters/purge       body: DeadLetterQuery (JSON) → PurgeOutcome
//!  GET  /api/blocked?limit=
//!  POST /api/blocked/unblock          body: {kind, id, tenant?, action?} → UnblockOutcome
//!  GET  /api/catch-ups                running jobs
//!  POST /api/catch-ups                body: StartRequest {projection_kind, tenant?, ids?, since?}
//!                                     → the started job (CatchUpView)
//!  GET  /api/catch-ups/{id}           one job's progress
//!  POST /api/catch-ups/{id}/cancel    → 202, the job, `cancelling` until its next step
//!  GET  /api/read-models              read models' versions (served, building, previous)
//!  GET  /api/kinds, POST /api/kinds/{kind}/{pause,resume,settings}   see [`super::kinds_api`]
//! ```
//!
//! A list answers at most [`MAX_LIST`] rows (`limit` above it is a 400). Every request passes
//! the guard first ([`crate::http::guard`]): a POST needs `Content-Type: application/json`,
//! a body-less one (cancel) too.
//!
//! Errors are `{"error": "…"}`: 400 for a request that is refused or does not parse (the
//! text names the field), 403 for an action while actions are off (or a request the guard
//! refuses: an unknown Host, a foreign Origin), 415 for a POST without a JSON content type,
//! 404 for nothing matched, 409 for a catch-up that overlaps a running one or is no longer running, 503 for
//! a database that cannot be reached, 500 for another storage failure.

use crate::error::AdminError;
use crate::http::state::AdminState;
use crate::views::blocked::UnblockRequest;
use crate::views::catch_ups::StartRequest;
use crate::views::dead_letters::{DeadLetterAction, DeadLetterQuery};
use crate::views::{blocked, catch_ups, dead_letters, status, versions};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;
use shardbox_core::StorageError;

/// Dead letters listed when no limit is given.
const DEFAULT_LIST: usize = 50;
/// Blocked targets listed when no limit is given.
const DEFAULT_BLOCKED: usize = 100;
/// The most rows one list answers (`limit` of `GET /api/dead-letters` and `GET
/// /api/blocked`): one answer is read whole into memory and sent whole; page on for more.
pub const MAX_LIST: usize = 1_000;

/// `limit`, or why it is refused: above [`MAX_LIST`].
fn bounded(limit: Option<usize>, default: usize, paging: &str) -> Result<usize, ApiError> {
    match limit {
        Some(n) if n > MAX_LIST => Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("limit {n} is too large: a list answers at most {MAX_LIST} rows; {paging}"),
        )),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

/// An API failure as a response.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        let code = match &e {
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Refused(_) => StatusCode::BAD_REQUEST,
            AdminError::Storage(StorageError::Unavailable { .. }) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            AdminError::Storage(
                StorageError::CatchUpOverlap { .. } | StorageError::CatchUpNotRunning { .. },
            ) => StatusCode::CONFLICT,
            AdminError::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(code, e.to_string())
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        AdminError::from(e).into()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        ApiError(StatusCode::BAD_REQUEST, e.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> Self {
        ApiError(StatusCode::BAD_REQUEST, e.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError(StatusCode::BAD_REQUEST, e.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

pub(super) type ApiResult = Result<Response, ApiError>;

pub(super) fn ok(value: impl serde::Serialize) -> ApiResult {
    Ok(Json(value).into_response())
}

/// Refuses an action while actions are off.
pub(super) fn allowed(state: &AdminState) -> Result<(), ApiError> {
    if state.actions {
        Ok(())
    } else {
        Err(ApiError(
            StatusCode::FORBIDDEN,
            "operator actions are off: start the server with --allow-actions (or mount it with AdminState::allow_actions(true))".into(),
        ))
    }
}

/// `GET /api/admin`: what this surface allows.
pub async fn admin(State(state): State<AdminState>) -> ApiResult {
    ok(json!({
        "actions_allowed": state.actions,
        "node": state.node.as_ref().map(|n| n.node_id()),
        "database": state.storage.describe(),
    }))
}

/// `GET /api/status`.
pub async fn status(State(state): State<AdminState>) -> ApiResult {
    let status = status::read(&state.reads(), Utc::now()).await?;
    state.sample(&status);
    ok(status)
}

/// The `after` of `GET /api/history`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Only the samples taken after this instant (RFC 3339: a point's `t`).
    after: Option<chrono::DateTime<Utc>>,
}

/// `GET /api/history?after=`: the status samples the server keeps (the last hour at most),
/// with the rates between them; with `after`, only the later ones.
pub async fn history(
    State(state): State<AdminState>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    ok(state.history.view(query.after))
}

/// `GET /api/dead-letters`.
pub async fn dead_letters(
    State(state): State<AdminState>,
    query: Result<Query<DeadLetterQuery>, QueryRejection>,
) -> ApiResult {
    let Query(mut query) = query?;
    query.limit = Some(bounded(
        query.limit,
        DEFAULT_LIST,
        "page on with after=<the last id listed>",
    )?);
    ok(dead_letters::list(&*state.storage, &query, Utc::now()).await?)
}

/// `GET /api/dead-letters/{id}`.
pub async fn dead_letter(
    State(state): State<AdminState>,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult {
    let Path(id) = id?;
    ok(dead_letters::show(&*state.storage, id).await?)
}

/// `POST /api/dead-letters/requeue`: by the mounted node's strategy, else into the shard
/// each died in, or with `shards` by the recorded strategy (see
/// [`dead_letters::requeue`]); the node's workers are woken. With `"dry_run": true` it only
/// says what it would touch ([`dead_letters::preview`]).
pub async fn requeue(
    State(state): State<AdminState>,
    body: Result<Json<DeadLetterQuery>, JsonRejection>,
) -> ApiResult {
    allowed(&state)?;
    let Json(query) = body?;
    let node = state.node.as_deref();
    if query.dry_run {
        let app = node.map(|n| n.addressing());
        let action = DeadLetterAction::Requeue;
        return ok(dead_letters::preview(&*state.storage, &query, action, app, Utc::now()).await?);
    }
    let outcome = dead_letters::requeue(
        &*state.storage,
        &query,
        node.map(|n| n.addressing()),
        Utc::now(),
        |page| {
            if let Some(node) = node {
                node.requeued(page.requeued, &page.shards);
            }
        },
    )
    .await?;
    if outcome.nothing_matched() {
        return Err(AdminError::NotFound("no dead letters match".into()).into());
    }
    ok(outcome)
}

/// `POST /api/dead-letters/purge`; with `"dry_run": true` it only says what it would touch.
pub async fn purge(
    State(state): State<AdminState>,
    body: Result<Json<DeadLetterQuery>, JsonRejection>,
) -> ApiResult {
    allowed(&state)?;
    let Json(query) = body?;
    if query.dry_run {
        let action = DeadLetterAction::Purge;
        return ok(dead_letters::preview(&*state.storage, &query, action, None, Utc::now()).await?);
    }
    let outcome = dead_letters::purge(&*state.storage, &query, Utc::now()).await?;
    if outcome.purged == 0 {
        return Err(AdminError::NotFound("no dead letters match".into()).into());
    }
    ok(outcome)
}

/// The `limit` of a list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    limit: Option<usize>,
}

/// `GET /api/blocked`.
pub async fn blocked(
    State(state): State<AdminState>,
    query: Result<Query<Limit>, QueryRejection>,
) -> ApiResult {
    let Query(Limit { limit }) = query?;
    let limit = bounded(
        limit,
        DEFAULT_BLOCKED,
        "GET /api/status counts them all (blocked_targets)",
    )?;
    ok(blocked::list(&*state.storage, limit).await?)
}

/// `POST /api/blocked/unblock`.
pub async fn unblock(
    State(state): State<AdminState>,
    body: Result<Json<UnblockRequest>, JsonRejection>,
) -> ApiResult {
    allowed(&state)?;
    let Json(request) = body?;
    let outcome = blocked::unblock(&*state.storage, &request, Utc::now()).await?;
    if let Some(node) = &state.node {
        node.unblocked(outcome.unblocked, &outcome.report.shards);
    }
    ok(outcome)
}

/// `GET /api/catch-ups`.
pub async fn catch_ups(State(state): State<AdminState>) -> ApiResult {
    ok(catch_ups::running(&*state.storage, Utc::now()).await?)
}

/// `GET /api/read-models`.
pub async fn read_models(State(state): State<AdminState>) -> ApiResult {
    ok(versions::list(&*state.storage).await?)
}

/// `GET /api/catch-ups/{id}`.
pub async fn catch_up(
    State(state): State<AdminState>,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult {
    let Path(id) = id?;
    ok(catch_ups::progress(&*state.storage, id, Utc::now()).await?)
}

/// `POST /api/catch-ups`: starts a catch-up, refused when no live node has the projection
/// unless `"force": true`; with `"dry_run": true` it only says what it would touch. See
/// [`catch_ups::start`] for what a start without the application cannot know.
pub async fn start_catch_up(
    State(state): State<AdminState>,
    body: Result<Json<StartRequest>, JsonRejection>,
) -> ApiResult {
    allowed(&state)?;
    let Json(request) = body?;
    let node = state.node.as_deref();
    if request.dry_run {
        let app = node.map(|n| n.addressing());
        return ok(catch_ups::preview(&*state.storage, &request, app, Utc::now()).await?);
    }
    let view = catch_ups::start(
        &*state.storage,
        &request,
        node.map(|n| n.addressing()),
        Utc::now(),
    )
    .await?;
    // Accepted: the job runs on the nodes; its progress is at its own address.
    let location = format!("catch-ups/{}", view.id);
    Ok((
        StatusCode::ACCEPTED,
        [(axum::http::header::LOCATION, location)],
        Json(view),
    )
        .into_response())
}

/// Any other method and path: 404 with a JSON error naming them and where the API is.
pub async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!(
            "no such route: {method} {}; the dashboard is at /, the JSON API under /api/ (GET /api/admin says what it serves)",
            uri.path()
        ),
    )
}

/// A path served, but not for this method: 405 with a JSON error naming both.
pub async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not served at {}: reads are GET, actions POST (GET /api/admin says what it serves)",
            uri.path()
        ),
    )
}

/// `POST /api/catch-ups/{id}/cancel`: 202 Accepted with the job, `cancelling` until a
/// node's next step of it.
pub async fn cancel_catch_up(
    State(state): State<AdminState>,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult {
    allowed(&state)?;
    let Path(id) = id?;
    let view = catch_ups::cancel(&*state.storage, id, Utc::now()).await?;
    // Accepted: the job is `cancelling`; a node's next step of it carries the cancel out.
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

//! The admin listener both applications serve: `/metrics`, the live page (`/`, its script,
//! style and icon), its JSON (`GET /admin/stats`) and the manual switch (`GET`/`PUT
//! /admin/mode`), each answered by the application through [`AdminApp`].
//!
//! Loopback by default. With a token, every API call must carry it as
//! `Authorization: Bearer TOKEN` (compared in constant time); an admin address that is not
//! loopback refuses to start without one. The page itself, its assets and `/metrics` hold no
//! secret and need no token: the page asks for it and sends it with each call.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::plumbing::admin_page;
use crate::plumbing::listener::{ClientTimeouts, serve_router};
use crate::plumbing::{AdminStats, Mode, ModeChanged, ModeError, ModeTable};

/// What an application answers on its admin listener.
pub(crate) trait AdminApp: Send + Sync + 'static {
    /// The metrics in Prometheus' text format.
    fn render_metrics(&self) -> String;

    /// What the live page shows (`GET /admin/stats`, documented in the README).
    fn live_stats(&self) -> AdminStats;

    /// The modes in force.
    fn mode_table(&self) -> ModeTable;

    /// Sets `rule`'s mode (`*`: every rule) from the next request on, for `caller`; returns
    /// the previous mode.
    fn set_mode(&self, rule: &str, mode: Mode, caller: SocketAddr) -> Result<Mode, ModeError>;
}

#[derive(Clone)]
struct AdminState {
    app: Arc<dyn AdminApp>,
    token: Option<Arc<str>>,
}

/// The admin routes, answered by `app`; with `token`, the API requires it.
pub(crate) fn admin_router(app: Arc<dyn AdminApp>, token: Option<String>) -> Router {
    admin_page::routes()
        .route("/metrics", get(metrics))
        .route("/admin/stats", get(stats))
        .route("/admin/mode", get(modes).put(set_mode))
        .with_state(AdminState {
            app,
            token: token.map(Arc::from),
        })
}

/// Whether an admin address may serve with (or without) a token: any address with one,
/// only loopback without.
pub fn admin_address_allowed(address: SocketAddr, token: Option<&str>) -> bool {
    token.is_some_and(|t| !t.is_empty()) || address.ip().is_loopback()
}

/// Serves `router` on `listener` until `stopped` turns true, with each caller's address known
/// (the switch logs who changed a mode), each client bounded by `timeouts`.
pub(crate) async fn serve_admin(
    listener: TcpListener,
    router: Router,
    timeouts: ClientTimeouts,
    stopped: watch::Receiver<bool>,
) {
    serve_router("admin", listener, router, timeouts, stopped).await;
}

/// The `Content-Type` of the metrics prometheus-client writes.
pub(crate) const OPENMETRICS_TEXT: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_TEXT)],
        state.app.render_metrics(),
    )
        .into_response()
}

/// Whether the call carries the token (or none is configured).
fn authorized(state: &AdminState, headers: &HeaderMap) -> bool {
    let Some(token) = &state.token else {
        return true;
    };
    let offered = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    bool::from(offered.as_bytes().ct_eq(token.as_bytes()))
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "admin calls need the admin token: Authorization: Bearer TOKEN\n",
    )
        .into_response()
}

async fn stats(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    axum::Json(state.app.live_stats()).into_response()
}

async fn modes(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    axum::Json(state.app.mode_table()).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeChange {
    rule: String,
    mode: Mode,
}

async fn set_mode(
    State(state): State<AdminState>,
    ConnectInfo(caller): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    let change: ModeChange = match serde_json::from_slice(&body) {
        Ok(change) => change,
        Err(error) => {
            let message = format!(
                "expected {{\"rule\": RULE or \"*\", \"mode\": \"enforce\"|\"shadow\"|\"open\"|\"closed\"}}: {error}\n"
            );
            return (StatusCode::BAD_REQUEST, message).into_response();
        }
    };
    match state.app.set_mode(&change.rule, change.mode, caller) {
        Ok(previous) => axum::Json(ModeChanged {
            rule: change.rule,
            mode: change.mode,
            previous,
        })
        .into_response(),
        Err(error @ ModeError::UnknownRule { .. }) => {
            (StatusCode::NOT_FOUND, format!("{error}\n")).into_response()
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response(),
    }
}

//! The admin address: the live page, its JSON (`GET /admin/stats`), and the manual switch
//! (`GET`/`PUT /admin/mode`).
//!
//! Loopback by default. With a token (`--admin-token`), every API call must carry it as
//! `Authorization: Bearer TOKEN` (compared in constant time); an admin address that is not
//! loopback refuses to start without one. The page itself and its script and style hold no
//! data and need no token: the page asks for it and sends it with each call.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use crate::serve::engine::Engine;
use crate::serve::modes::{Mode, ModeError};

/// The page: self-contained (its script and style are served from the binary), so a strict
/// content security policy holds.
const PAGE: &str = include_str!("admin/page.html");
const SCRIPT: &str = include_str!("admin/page.js");
const STYLE: &str = include_str!("admin/page.css");
/// The page's icon: without one, the browser asks for `/favicon.ico` and logs the 404.
const ICON: &str = include_str!("admin/favicon.svg");

/// Nothing but this origin: no inline script, no outside asset, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

#[derive(Clone)]
struct AdminState {
    engine: Arc<Engine>,
    token: Option<Arc<str>>,
}

/// The admin routes, answering from `engine`; with `token`, the API requires it.
pub fn admin_router(engine: Arc<Engine>, token: Option<String>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/page.js", get(script))
        .route("/page.css", get(style))
        .route("/favicon.svg", get(icon))
        .route("/admin/stats", get(stats))
        .route("/admin/mode", get(modes).put(set_mode))
        .with_state(AdminState {
            engine,
            token: token.map(Arc::from),
        })
}

/// Whether an admin address may serve with (or without) a token: any address with one,
/// only loopback without.
pub fn admin_address_allowed(address: SocketAddr, token: Option<&str>) -> bool {
    token.is_some_and(|t| !t.is_empty()) || address.ip().is_loopback()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

async fn icon() -> Response {
    asset("image/svg+xml", ICON)
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
    axum::Json(state.engine.live_stats()).into_response()
}

async fn modes(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    axum::Json(state.engine.modes().table().as_ref().clone()).into_response()
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
    match state.engine.set_mode(&change.rule, change.mode, caller) {
        Ok(previous) => axum::Json(serde_json::json!({
            "rule": change.rule,
            "mode": change.mode,
            "previous": previous,
        }))
        .into_response(),
        Err(error @ ModeError::UnknownRule { .. }) => {
            (StatusCode::NOT_FOUND, format!("{error}\n")).into_response()
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response(),
    }
}

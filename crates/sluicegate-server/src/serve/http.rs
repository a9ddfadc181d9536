//! The HTTP side: `POST /json` (the JSON form of `ShouldRateLimit`), `GET /healthcheck`,
//! `GET /rlconfig` (the rules in force) and `GET /metrics` (Prometheus).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::plumbing::{Mode, OPENMETRICS_TEXT};
use crate::serve::engine::Engine;
use crate::serve::json::{call_from_json, verdict_to_json};
use crate::serve::protocol::Code;
use crate::serve::request_timer::Transport;

/// The largest request body accepted; a rate limit request is a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The HTTP routes, answering from `engine`.
pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/json", post(json))
        .route("/healthcheck", get(|| async { "OK" }))
        .route("/rlconfig", get(rlconfig))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(engine)
}

async fn json(State(engine): State<Arc<Engine>>, body: Bytes) -> Response {
    let started = engine.recorder().start_request();
    let call = match call_from_json(&body).and_then(|c| engine.check_call_size(&c).map(|()| c)) {
        Ok(call) => call,
        Err(err) => return (StatusCode::BAD_REQUEST, format!("{err}\n")).into_response(),
    };
    let verdict = engine.should_rate_limit(&call).await;
    let status = match verdict.overall {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut response = (status, axum::Json(verdict_to_json(&verdict))).into_response();
    for (name, value) in &verdict.headers {
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::try_from(name.as_str()),
            header::HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    engine.recorder().finish_request(Transport::Http, started);
    response
}

async fn rlconfig(State(engine): State<Arc<Engine>>) -> String {
    let loaded = engine.rules();
    let modes = engine.modes().table();
    let mut text = String::new();
    for domain in loaded.rules.domains() {
        for rule in loaded.rules.rules(domain) {
            text.push_str(&rule.to_string());
            // The manual switch, where it overrides the file.
            let mode = modes.of(&rule.id);
            if mode != Mode::Enforce {
                text.push_str(", mode: ");
                text.push_str(mode.name());
            }
            text.push('\n');
        }
    }
    text
}

async fn metrics(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_TEXT)],
        engine.render_metrics(),
    )
}

//! What a rejected request gets: status, fields, body; and what a request without a key or
//! over the key cap gets.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::StatusCode;
use sluicegate::ManualClock;
use sluicegate_http::rate_limit::key::{Header, PeerIp};
use sluicegate_http::rate_limit::{MissingKey, OnBackendError, RateLimitLayer, Rejection};

use crate::support::{client, get as fetch, serve, serve_without_peer};

async fn ok() -> &'static str {
    "ok"
}

fn app(
    layer: RateLimitLayer<
        PeerIp,
        sluicegate_http::rate_limit::MemoryBackend<std::net::IpAddr, ManualClock>,
    >,
) -> Router {
    Router::new().route("/", get(ok)).layer(layer)
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().expect("text"))
}

#[tokio::test]
async fn denial_is_429_with_retry_after_and_the_ietf_fields() {
    let clock = ManualClock::new(0);
    let layer = RateLimitLayer::builder(PeerIp)
        .clock(clock.clone())
        .limit_named("per-minute", "fixed-window:limit=2,window=1m")
        .build()
        .expect("layer");
    let address = serve(app(layer)).await;
    let client = client();
    clock.advance(Duration::from_millis(15_500));

    let (status, headers, _) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "ratelimit"),
        None,
        "not on allowed answers unless asked"
    );
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200);

    let (status, headers, body) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(
        header(&headers, "ratelimit-policy"),
        Some("\"per-minute\";q=2;w=60")
    );
    assert_eq!(
        header(&headers, "ratelimit"),
        Some("\"per-minute\";r=0;t=45")
    );
    assert_eq!(header(&headers, "retry-after"), Some("45"));
    assert_eq!(header(&headers, "x-ratelimit-limit"), None);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(
        body,
        "too many requests: rate limit \"per-minute\" exceeded, retry in 45 s\n"
    );
}

#[tokio::test]
async fn status_legacy_fields_and_fields_on_allowed_answers_are_configurable() {
    let layer = RateLimitLayer::builder(PeerIp)
        .clock(ManualClock::new(0))
        .limit("token-bucket:rate=1/s,burst=2")
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .legacy_headers(true)
        .headers_on_allowed(true)
        .build()
        .expect("layer");
    let address = serve(app(layer)).await;
    let client = client();

    let (status, headers, _) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "ratelimit-policy"),
        Some("\"token-bucket\";q=2;w=2")
    );
    assert_eq!(
        header(&headers, "ratelimit"),
        Some("\"token-bucket\";r=1;t=1")
    );
    assert_eq!(header(&headers, "x-ratelimit-limit"), Some("2"));
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("1"));
    assert_eq!(header(&headers, "x-ratelimit-reset"), Some("1"));
    assert_eq!(header(&headers, "retry-after"), None);

    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200);
    let (status, headers, _) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 503, "nginx's limit_req_status");
    assert_eq!(header(&headers, "retry-after"), Some("1"));
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(&headers, "x-ratelimit-reset"), Some("2"));
}

#[tokio::test]
async fn a_hook_rewrites_rejections() {
    let layer = RateLimitLayer::builder(PeerIp)
        .clock(ManualClock::new(0))
        .limit("fixed-window:limit=1,window=1h")
        .on_rejection(|rejection, mut response| {
            if let Rejection::Limited(verdict) = rejection {
                let left = verdict.decisions()[0].remaining();
                *response.body_mut() =
                    Bytes::from(format!("{{\"error\":\"slow down\",\"left\":{left}}}"));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
            }
            response
        })
        .build()
        .expect("layer");
    let address = serve(app(layer)).await;
    let client = client();
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200);
    let (status, headers, body) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 429);
    assert_eq!(body, "{\"error\":\"slow down\",\"left\":0}");
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(
        header(&headers, "retry-after"),
        Some("3600"),
        "the fields are kept"
    );
}

#[tokio::test]
async fn a_missing_key_is_a_clear_answer() {
    let build = |answer| {
        RateLimitLayer::builder(PeerIp)
            .clock(ManualClock::new(0))
            .limit("fixed-window:limit=1,window=1h")
            .on_missing_key(answer)
            .build()
            .expect("layer")
    };
    let client = client();
    // Served without ConnectInfo: the peer address is unknown, the server's fault.
    let address = serve_without_peer(app(build(MissingKey::Reject))).await;
    let (status, _, body) = fetch(&client, address, "/", &[]).await;
    assert_eq!(status, 500);
    assert!(
        body.starts_with("rate limit key: the peer address is unknown (axum: serve with"),
        "{body}"
    );

    let address =
        serve_without_peer(app(build(MissingKey::RejectWith(StatusCode::FORBIDDEN)))).await;
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 403);

    let layer = build(MissingKey::Allow);
    let address = serve_without_peer(app(layer.clone())).await;
    let (status, _, body) = fetch(&client, address, "/", &[]).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert_eq!(fetch(&client, address, "/", &[]).await.0, 200, "uncounted");
    assert_eq!(layer.stats().missing_key, 2);
}

#[tokio::test]
async fn the_key_cap_refuses_new_keys_until_old_ones_go_idle() {
    let clock = ManualClock::new(0);
    let build = |answer| {
        RateLimitLayer::builder(Header::named("x-user"))
            .clock(clock.clone())
            .limit("fixed-window:limit=1,window=1m")
            .max_keys(2)
            .on_backend_error(answer)
            .build()
            .expect("layer")
    };
    let layer = build(OnBackendError::Reject);
    let address = serve(Router::new().route("/", get(ok)).layer(layer.clone())).await;
    let client = client();
    let user = |name| [("x-user", name)];
    assert_eq!(fetch(&client, address, "/", &user("a")).await.0, 200);
    assert_eq!(fetch(&client, address, "/", &user("b")).await.0, 200);
    let (status, _, body) = fetch(&client, address, "/", &user("c")).await;
    assert_eq!(status, 429);
    assert_eq!(
        body,
        "rate limiter key table is full (2 keys, none idle): new clients are refused until \
         others go idle\n"
    );
    assert_eq!(
        fetch(&client, address, "/", &user("a")).await.0,
        429,
        "a's own limit"
    );
    assert_eq!(layer.backend().states_held(), 2);
    assert_eq!(layer.stats().backend_errors, 1);

    // A minute on, a's and b's windows have ended: their keys make room.
    clock.advance(Duration::from_secs(60));
    assert_eq!(fetch(&client, address, "/", &user("c")).await.0, 200);
    assert!(layer.backend().states_held() <= 2);

    // Failing open lets the newcomer through, uncounted.
    let layer = build(OnBackendError::Allow);
    let address = serve(Router::new().route("/", get(ok)).layer(layer.clone())).await;
    for name in ["d", "e", "f", "f"] {
        assert_eq!(
            fetch(&client, address, "/", &user(name)).await.0,
            200,
            "{name}"
        );
    }
    assert_eq!(layer.backend().states_held(), 2);
}

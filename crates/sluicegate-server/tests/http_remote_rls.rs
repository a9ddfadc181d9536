//! `sluicegate-http`'s remote backend against this project's own rate limit service: an axum
//! app behind the tower layer, whose key becomes a descriptor asked of `sluicegate serve`
//! over Envoy's gRPC API on loopback (the service on a manual clock), through a real HTTP
//! client. Allowed, then denied per the served rules, with fields describing the service's
//! limit; and with the service down, each failure policy's answer.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use axum::routing::get;
use sluicegate_http::rate_limit::RateLimitLayer;
use sluicegate_http::rate_limit::key::Header;
use sluicegate_http::rls::{RlsBackend, RlsFailure};
use sluicegate_server::serve::EngineOptions;

mod loopback;

use loopback::{BoxError, Service, TestResult};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 2}
"#;

/// Long enough that a loaded machine never trips it on a live service: the answers, not
/// the time, are what is asserted.
const TIMEOUT: Duration = Duration::from_secs(10);

/// An app answering "ok" behind a layer keyed by `x-user`, asking the service at
/// `endpoint` in domain `shop` with the descriptor `[("user", x-user)]`.
async fn app(endpoint: String, failure: RlsFailure) -> Result<SocketAddr, BoxError> {
    let mut backend = RlsBackend::<HeaderValue>::builder(endpoint, "shop")
        .entry_with("user", |user| user.to_str().unwrap_or_default().to_owned())
        .timeout(TIMEOUT)
        .on_failure(failure);
    if failure == RlsFailure::Local {
        backend = backend.local_limit("local", "fixed-window:limit=1,window=1h");
    }
    let layer = RateLimitLayer::builder(Header::named("x-user"))
        .headers_on_allowed(true)
        .build_with(backend.build()?)?;
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}

/// `GET /` as `user`: the status, a header's value (if any) by name, and the body.
async fn fetch(
    address: SocketAddr,
    user: &str,
) -> Result<(u16, reqwest::header::HeaderMap, String), BoxError> {
    let response = reqwest::Client::new()
        .get(format!("http://{address}/"))
        .header("x-user", user)
        .send()
        .await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Ok((status, headers, response.text().await?))
}

fn field<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .map_or("", |value| value.to_str().unwrap_or("not text"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_then_denied_by_the_served_rule_with_its_fields() -> TestResult {
    let service = Service::start(RULES, EngineOptions::default()).await?;
    let address = app(
        format!("http://{}", service.server.grpc_addr),
        RlsFailure::Closed,
    )
    .await?;

    // The service's clock stands a quarter second into a minute: 59.75 s to the reset.
    let (status, headers, _) = fetch(address, "alice").await?;
    assert_eq!(status, 200);
    assert_eq!(field(&headers, "ratelimit-policy"), "\"per-user\";q=2;w=60");
    assert_eq!(field(&headers, "ratelimit"), "\"per-user\";r=1;t=60");
    let (status, headers, _) = fetch(address, "alice").await?;
    assert_eq!(status, 200);
    assert_eq!(field(&headers, "ratelimit"), "\"per-user\";r=0;t=60");

    let (status, headers, body) = fetch(address, "alice").await?;
    assert_eq!(status, 429, "{body}");
    assert_eq!(field(&headers, "ratelimit-policy"), "\"per-user\";q=2;w=60");
    assert_eq!(field(&headers, "ratelimit"), "\"per-user\";r=0;t=60");
    assert_eq!(field(&headers, "retry-after"), "60");
    assert!(body.contains("per-user"), "{body}");

    // Another user is another descriptor; and the next minute, alice is back.
    assert_eq!(fetch(address, "bob").await?.0, 200);
    service.clock.advance(Duration::from_secs(60));
    assert_eq!(fetch(address, "alice").await?.0, 200);
    service.server.shutdown().await?;
    Ok(())
}

/// An address nothing listens on: bound, then let go.
async fn nothing_listening() -> Result<String, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{address}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_service_down_each_policy_answers() -> TestResult {
    let down = nothing_listening().await?;

    let open = app(down.clone(), RlsFailure::Open).await?;
    for _ in 0..3 {
        let (status, headers, _) = fetch(open, "alice").await?;
        assert_eq!(status, 200, "open: passed");
        assert_eq!(
            field(&headers, "ratelimit"),
            "",
            "open: no limit to describe"
        );
    }

    let closed = app(down.clone(), RlsFailure::Closed).await?;
    let (status, _, body) = fetch(closed, "alice").await?;
    assert_eq!(status, 503, "closed: {body}");
    assert!(body.contains("rate limit service at"), "{body}");

    let local = app(down, RlsFailure::Local).await?;
    let (status, headers, _) = fetch(local, "alice").await?;
    assert_eq!(status, 200, "local: within the local limit");
    assert_eq!(field(&headers, "ratelimit-policy"), "\"local\";q=1;w=3600");
    let (status, headers, _) = fetch(local, "alice").await?;
    assert_eq!(status, 429, "local: over the local limit");
    assert_eq!(field(&headers, "ratelimit-policy"), "\"local\";q=1;w=3600");
    assert_eq!(fetch(local, "bob").await?.0, 200, "local: per key");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_stops_falls_back_then_answers_again() -> TestResult {
    let service = Service::start(RULES, EngineOptions::default()).await?;
    let endpoint = format!("http://{}", service.server.grpc_addr);
    let address = app(endpoint, RlsFailure::Closed).await?;
    assert_eq!(fetch(address, "alice").await?.0, 200);
    service.server.shutdown().await?;
    let (status, _, body) = fetch(address, "alice").await?;
    assert_eq!(status, 503, "{body}");
    Ok(())
}

#[tokio::test]
async fn bad_settings_are_clear_errors() -> TestResult {
    let error = RlsBackend::<HeaderValue>::builder("http://127.0.0.1:1", "shop")
        .build()
        .expect_err("no entries");
    assert!(error.to_string().contains("at least one entry"), "{error}");
    let error = RlsBackend::<HeaderValue>::builder("not a uri", "shop")
        .entry("generic_key", "x")
        .build()
        .expect_err("bad endpoint");
    assert!(error.to_string().contains("not a uri"), "{error}");
    let error = RlsBackend::<HeaderValue>::builder("http://127.0.0.1:1", "shop")
        .entry("generic_key", "x")
        .on_failure(RlsFailure::Local)
        .build()
        .expect_err("no local limit");
    assert!(error.to_string().contains("local_limit"), "{error}");
    Ok(())
}

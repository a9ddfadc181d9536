//! HTTP middleware on Sluicegate's rate limiting algorithms: a tower layer for axum, hyper and
//! tonic services.
//!
//! [`RateLimitLayer`] limits requests by a key read from each request (the peer address, the
//! client address your proxies report, a header, the route, tuples of these, a closure) with
//! any algorithm of the core, several limits at once decided all or nothing. Every clone of the
//! layer shares one state. Denials are 429 with `Retry-After` and the IETF `RateLimit-Policy` /
//! `RateLimit` fields (gRPC calls get `RESOURCE_EXHAUSTED`); `leaky-queue` shapes (holds a
//! request for its wait, as nginx `limit_req` with `delay=`); `concurrency` holds its permit
//! until the response body ends (nginx `limit_conn`). See [`rate_limit`] for all of it.
//!
//! [`AdaptiveLimitLayer`] holds the requests in flight to an adaptive concurrency limit that
//! follows the latency the service shows (503 with `Retry-After` when full); see [`adaptive`].
//!
//! Both answer with a [`permit_body::PermitBody`]: the inner service's body, holding what the
//! layer granted the request until the body has been sent to its end.
//!
//! [`pace::PaceLayer`] is the client side: it paces calls to a rate-limited API and holds
//! further calls to a host that answered 429 or 503 with `Retry-After` or `RateLimit`.
//!
//! ```
//! use std::net::SocketAddr;
//!
//! use axum::{Router, routing::get};
//! use sluicegate_http::rate_limit::{RateLimitLayer, key::PeerIp};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Per client address: 100 requests an hour in bursts of 10, and 2 at a time.
//! let limit = RateLimitLayer::builder(PeerIp)
//!     .limit_named("hourly", "gcra:rate=100/h,burst=10")
//!     .limit_named("in-flight", "concurrency:limit=2")
//!     .build()?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(limit);
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let address = listener.local_addr()?;
//! // The peer address reaches the layer as axum's `ConnectInfo`.
//! let app = app.into_make_service_with_connect_info::<SocketAddr>();
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! let client = reqwest::Client::new();
//! for _ in 0..10 {
//!     let response = client.get(format!("http://{address}/")).send().await?;
//!     assert_eq!(response.status(), 200);
//! }
//! let denied = client.get(format!("http://{address}/")).send().await?;
//! assert_eq!(denied.status(), 429);
//! assert_eq!(denied.headers()["ratelimit-policy"], "\"hourly\";q=10;w=360");
//! assert_eq!(denied.headers()["retry-after"], "36");
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
pub mod grpc_status;
pub mod pace;
pub mod permit_body;
pub mod rate_limit;
pub mod ratelimit_fields;
#[cfg(feature = "rls")]
pub mod rls;

pub use adaptive::{AdaptiveLimit, AdaptiveLimitLayer};
pub use rate_limit::{RateLimit, RateLimitLayer};

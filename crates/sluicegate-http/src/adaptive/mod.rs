//! Adaptive concurrency limits at the edge: a tower layer that holds the requests in flight to
//! the limit an [`AdaptiveLimiter`](sluicegate::adaptive::AdaptiveLimiter) finds from the
//! latency the service shows.
//!
//! # What a request gets
//!
//! - **A permit**, at once if the limit allows, or after waiting in the limiter's bounded FIFO
//!   queue up to [`AdaptiveLimitBuilder::queue_timeout`]. The permit is held until the
//!   response body has been sent to the end; its latency (from the grant) and outcome then
//!   feed the controller.
//! - **Refused**: `503 Service Unavailable`, `Retry-After`
//!   ([`AdaptiveLimitBuilder::retry_after`], 1 s by default) and a text body saying why (limit reached, queue full, or no place within the
//!   queue timeout). A gRPC call (`content-type: application/grpc`) gets a trailers-only
//!   `UNAVAILABLE` (code 14, which gRPC clients retry) with the delay as `retry-after` and
//!   `grpc-retry-pushback-ms`.
//!
//! # How a response counts
//!
//! - `ok`: an answer [`default_classifier`] does not count as a failure;
//! - `dropped`: a 5xx (a 503 from upstream included) or a gRPC `UNAVAILABLE` /
//!   `RESOURCE_EXHAUSTED`, a body that breaks half way, and a request or body abandoned before
//!   its end (the client went away, the inner service failed): overload shows as much in
//!   these as in latency;
//! - `timeout`: a gRPC `DEADLINE_EXCEEDED`, and with [`AdaptiveLimitBuilder::timeout_after`]
//!   any answer slower than that;
//! - [`AdaptiveLimitBuilder::classify`] replaces the rule (returning `None` gives the permit
//!   back without a sample).
//!
//! # Per route
//!
//! Every clone of a layer shares its limiter. Give each route its own layer with axum's
//! `route_layer`, so that a slow route's limit does not starve a fast one:
//!
//! ```
//! use axum::{Router, routing::get};
//! use sluicegate::adaptive::{AdaptiveLimiter, Gradient2, Vegas};
//! use sluicegate_http::adaptive::AdaptiveLimitLayer;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let search = AdaptiveLimitLayer::builder(AdaptiveLimiter::new(Gradient2::default()))
//!     .queue_timeout(Duration::from_millis(50))
//!     .build();
//! let checkout = AdaptiveLimitLayer::new(AdaptiveLimiter::new(Vegas::default()));
//! let app: Router = Router::new()
//!     .route("/search", get(|| async { "results" }).route_layer(search.clone()))
//!     .route("/checkout", get(|| async { "done" }).route_layer(checkout.clone()));
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let address = listener.local_addr()?;
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! let answer = reqwest::get(format!("http://{address}/search")).await?;
//! assert_eq!(answer.text().await?, "results");
//! let metrics = search.metrics();
//! assert_eq!((metrics.limit, metrics.in_flight, metrics.rejected), (20, 0, 0));
//! # Ok(())
//! # }
//! ```
//!
//! # Any async call
//!
//! The core's limiter needs no HTTP: hold a permit around any call to a service whose capacity
//! is bounded (a database pool, an outbound client), and say how it went. A permit dropped
//! without a word (the caller's future cancelled, a panic) counts as dropped. Here an outbound
//! client waits up to 100 ms for a place, and a 5xx or a failed connection counts against the
//! limit:
//!
//! ```
//! use sluicegate::adaptive::{AcquireError, AdaptiveLimiter, Aimd};
//! use std::time::Duration;
//!
//! /// The limit on calls to one upstream, found from its answers.
//! struct Upstream {
//!     client: reqwest::Client,
//!     limiter: AdaptiveLimiter<Aimd>,
//! }
//!
//! #[derive(Debug, thiserror::Error)]
//! enum CallError {
//!     #[error("upstream overloaded: {0}")]
//!     Overloaded(#[from] AcquireError),
//!     #[error("upstream call failed: {0}")]
//!     Failed(#[from] reqwest::Error),
//! }
//!
//! impl Upstream {
//!     async fn get(&self, url: &str) -> Result<String, CallError> {
//!         let permit = self.limiter.acquire(Duration::from_millis(100)).await?;
//!         let response = match self.client.get(url).send().await {
//!             Ok(response) => response,
//!             Err(error) => {
//!                 permit.dropped();
//!                 return Err(error.into());
//!             }
//!         };
//!         if response.status().is_server_error() {
//!             permit.dropped();
//!             return Err(response.error_for_status().unwrap_err().into());
//!         }
//!         let body = response.text().await;
//!         // The latency is measured here, when the whole answer has come.
//!         match body {
//!             Ok(_) => permit.success(),
//!             Err(_) => permit.dropped(),
//!         }
//!         Ok(body?)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use axum::{Router, routing::get};
//! # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let address = listener.local_addr()?;
//! # let app: Router = Router::new().route("/", get(|| async { "hello" }));
//! # tokio::spawn(async move { axum::serve(listener, app).await });
//! let aimd = Aimd::builder().min_limit(1).initial_limit(10).max_limit(100).build()?;
//! let upstream = Upstream {
//!     client: reqwest::Client::new(),
//!     limiter: AdaptiveLimiter::builder(aimd).queue_capacity(50).build()?,
//! };
//! assert_eq!(upstream.get(&format!("http://{address}/")).await?, "hello");
//! assert_eq!(upstream.limiter.metrics().in_flight, 0);
//! # Ok(())
//! # }
//! ```
//!
//! A database pool is the same shape: take the permit before `pool.get()`, complete it when
//! the query's rows have come, and call `dropped()` on a pool timeout or a "too many
//! connections" error. The limit then settles where the database still answers quickly,
//! below the pool size when the database is the bottleneck.

mod answer;
mod classify;
mod erased;
mod layer;
mod service;
mod shared;
mod ticket;

pub use classify::{Classifier, default_classifier};
pub use layer::{AdaptiveLimitBuilder, AdaptiveLimitLayer, DEFAULT_RETRY_AFTER};
pub use service::{AdaptiveLimit, AdaptiveLimitFuture};
pub use ticket::{AdaptiveBody, PendingSample};

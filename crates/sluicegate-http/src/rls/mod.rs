//! A remote rate limit service as what the layer decides with: Envoy's gRPC API
//! (`envoy.service.ratelimit.v3`), answered by `sluicegate serve` or envoyproxy/ratelimit.
//!
//! [`RlsBackend`] turns each request's key into one descriptor (the domain and the entries the
//! builder names: the key under a name, constants) and asks the service, within a timeout.
//! The verdict carries the limits the service answered with, so the `RateLimit-Policy` /
//! `RateLimit` fields describe the service's rules. When the service is down, slow or
//! answers nonsense, the [`RlsFailure`] policy answers: `Open` (pass), `Closed` (a
//! [`BackendError::Unavailable`](crate::rate_limit::BackendError::Unavailable), which the
//! layer answers with 503 unless told to pass it), or `Local` (limits of this process).
//!
//! ```no_run
//! use std::net::IpAddr;
//! use std::time::Duration;
//!
//! use sluicegate_http::rate_limit::{RateLimitLayer, key::PeerIp};
//! use sluicegate_http::rls::{RlsBackend, RlsFailure};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Descriptor `[("remote_address", <peer ip>)]` in domain `edge`; if the service cannot
//! // answer within 50 ms, 10 requests a second per address, decided here.
//! let backend = RlsBackend::<IpAddr>::builder("http://127.0.0.1:8081", "edge")
//!     .entry_from_key("remote_address")
//!     .timeout(Duration::from_millis(50))
//!     .on_failure(RlsFailure::Local)
//!     .local_limit("local", "gcra:rate=10/s,burst=10")
//!     .build()?;
//! let layer = RateLimitLayer::builder(PeerIp).build_with(backend)?;
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

mod answer;
mod backend;
mod builder;

pub use backend::{RlsBackend, RlsFailure};
pub use builder::{RlsBuildError, RlsBuilder};

//! Rate limit requests by key, with every algorithm of Sluicegate, several limits at once.
//!
//! [`RateLimitLayer::builder`] takes a [key extractor](key) and limits written as specs
//! (`token-bucket:rate=10/s,burst=20`) or algorithms of the core, and builds a layer whose
//! clones all share one state.
//!
//! # What a request gets
//!
//! - **Allowed**: passed on to the inner service. With a `leaky-queue` limit that shapes
//!   (nginx `limit_req` without `nodelay`, or with `delay=`), it is first held for its wait on
//!   tokio's timer. A `concurrency` limit (nginx `limit_conn`) keeps its permit until the
//!   response body has been sent to the end, or dropped (a client that went away); a response
//!   carrying a [`HoldPermits`] (a `101` whose connection becomes a WebSocket) gives it to that
//!   instead, until the upgraded connection drops its last clone.
//! - **Denied**: 429 (or [`Builder::status`]), `Retry-After`, the IETF `RateLimit-Policy` and
//!   `RateLimit` fields (`X-RateLimit-*` with [`Builder::legacy_headers`]) describing the
//!   tightest limit, and a text body naming it. A gRPC call (`content-type: application/grpc`)
//!   gets `RESOURCE_EXHAUSTED` instead: HTTP 200, `grpc-status: 8`, the same fields as
//!   metadata. [`Builder::on_rejection`] rewrites any rejection.
//! - **Several limits** are decided together, all or nothing: a request one limit denies is
//!   charged to none.
//! - **Dry run** ([`Builder::dry_run`]): decided and counted, always passed;
//!   [`RateLimitLayer::stats`] counts what would have been rejected.
//! - **No key** (a header not sent, a peer address the server does not provide): 400 or 500
//!   with a body naming what was missing, or as [`MissingKey`] says.
//! - **Key cap**: at most [`Builder::max_keys`] keys are held; idle ones are forgotten as the
//!   tables grow (no cleanup call, no background task), and at the cap new keys are refused
//!   (the denial status, a body saying so) rather than evicting a client still limited.
//!
//! # Backends
//!
//! The layer asks a [`Backend`] to decide; [`MemoryBackend`] keeps the counters in this
//! process. [`StoreBackend`] decides in any store of the core's backend seam
//! ([`sluicegate::store::Store`]): Redis, shared by several processes, behind its failure
//! policy.

mod answer;
mod backend;
mod body;
mod error;
mod future;
mod headers;
mod held;
pub mod key;
mod layer;
mod memory;
mod policy;
mod service;
mod stats;
mod store;

pub use crate::ratelimit_fields::LimitInfo;
pub use backend::{AtOnce, Backend, Verdict};
pub use body::RateLimitBody;
pub use error::{BackendError, BuildError, KeyError};
pub use future::ResponseFuture;
pub use held::HoldPermits;
pub use key::KeyExtractor;
pub use layer::{Builder, DEFAULT_MAX_KEYS, IntoLimit, RateLimitLayer};
pub use memory::MemoryBackend;
pub use policy::{MissingKey, OnBackendError, Rejection, RejectionHook};
pub use service::RateLimit;
pub use stats::Stats;
pub use store::{StoreBackend, StoreFuture};

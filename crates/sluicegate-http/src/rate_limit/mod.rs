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
//! - **Denied**: 429 (or [`RateLimitBuilder::status`]), `Retry-After`, the IETF
//!   `RateLimit-Policy` and `RateLimit` fields (`X-RateLimit-*` with
//!   [`RateLimitBuilder::legacy_headers`]) describing the tightest limit, and a text body
//!   naming it. A gRPC call (`content-type: application/grpc`) gets `RESOURCE_EXHAUSTED`
//!   instead: HTTP 200, `grpc-status: 8`, the same fields as metadata. [`RateLimitBuilder::on_rejection`] rewrites any rejection.
//! - **Several limits** are decided together, all or nothing: a request one limit denies is
//!   charged to none.
//! - **Dry run** ([`RateLimitBuilder::dry_run`]): decided and counted, always passed;
//!   [`RateLimitLayer::stats`] counts what would have been rejected.
//! - **No key** (a header not sent, a peer address the server does not provide): 400 or 500
//!   with a body naming what was missing, or as [`MissingKey`] says.
//! - **Key cap**: at most [`RateLimitBuilder::max_keys`] keys are held; idle ones are
//!   forgotten as the tables grow (no cleanup call, no background task), and at the cap new
//!   keys are refused (the denial status, a body saying so) rather than evicting a client
//!   still limited.
//!
//! # Where the counters are kept
//!
//! [`RateLimitBuilder::build`] keeps them in this process ([`MemoryBackend`]: a limiter per limit,
//! and no allocation for a request that passes). [`RateLimitBuilder::build_with_store`] decides in
//! any store of the core's seam, [`sluicegate::store::Store`], the one trait to implement for
//! storage of your own: Redis (`sluicegate_redis::RedisStore`, shared by several processes;
//! `FailSafe` behind its failure policy), the core's
//! [`MemoryStore`](sluicegate::store::MemoryStore), or yours. The layer asks the store to
//! decide each request's limits together ([`Store::decide`](sluicegate::store::Store::decide)
//! with [`Op::Check`](sluicegate::state_machine::Op)), gives a concurrency limit's permits back when the
//! response ends ([`Store::release`](sluicegate::store::Store::release)), and renews them meanwhile
//! if the store leases them. The remote rate limit service of the `rls` feature is given to
//! [`RateLimitBuilder::build_with`].
//!
//! A store of one's own, here one that wraps the core's memory store to count what it denies:
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! use http::{HeaderName, Request, Response};
//! use sluicegate::store::{Held, MemoryStore, Now, StoreDecision, Request as Ask, Store};
//! use sluicegate::{AnyAlgorithm, CheckError, KeyedLimiter};
//! use sluicegate::state_machine::Op;
//! use sluicegate_http::rate_limit::{LimitInfo, RateLimitLayer, key::Header};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! /// The memory store, counting the calls it denies.
//! #[derive(Default)]
//! struct Audited {
//!     memory: MemoryStore,
//!     denied: AtomicU64,
//! }
//!
//! type Limit = <MemoryStore as Store<String>>::Limit;
//!
//! impl Store<String> for Audited {
//!     type Limit = Limit;
//!     type Error = CheckError;
//!
//!     fn capacity(&self, limit: &Limit) -> u64 {
//!         Store::<String>::capacity(&self.memory, limit)
//!     }
//!
//!     async fn decide<'a>(
//!         &'a self,
//!         requests: &'a [Ask<'a, Limit, String>],
//!         op: Op,
//!         now: Now,
//!     ) -> Result<StoreDecision, CheckError> {
//!         let outcome = self.memory.decide(requests, op, now).await?;
//!         if !outcome.allowed {
//!             self.denied.fetch_add(1, Ordering::Relaxed);
//!         }
//!         Ok(outcome)
//!     }
//!
//!     async fn release<'a>(
//!         &'a self,
//!         requests: &'a [Ask<'a, Limit, String>],
//!         held: &'a [Held],
//!     ) -> Result<(), CheckError> {
//!         self.memory.release(requests, held).await
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Per API key, 2 requests a minute; the fields describe the limit as `per-key`.
//! let algorithm: AnyAlgorithm = "fixed-window:limit=2,window=60s".parse()?;
//! let info = LimitInfo::of("per-key", &algorithm);
//! let store = Arc::new(Audited::default());
//! let layer = RateLimitLayer::builder(Header::new(HeaderName::from_static("x-api-key")))
//!     .build_with_store(Arc::clone(&store), [(info, Arc::new(KeyedLimiter::new(algorithm)))])?;
//! let service = layer.layer(service_fn(|_: Request<()>| async {
//!     Ok::<_, std::convert::Infallible>(Response::new(String::new()))
//! }));
//!
//! let call = || {
//!     let request = Request::builder().header("x-api-key", "k1").body(());
//!     service.clone().oneshot(request.expect("a request"))
//! };
//! assert_eq!(call().await?.status(), 200);
//! assert_eq!(call().await?.status(), 200);
//! let denied = call().await?;
//! assert_eq!(denied.status(), 429);
//! assert_eq!(denied.headers()["ratelimit-policy"], "\"per-key\";q=2;w=60");
//! assert_eq!(store.denied.load(Ordering::Relaxed), 1);
//! # Ok(())
//! # }
//! ```

mod answer;
mod backend;
mod error;
mod future;
mod headers;
mod held;
#[doc(hidden)]
pub mod internal;
pub mod key;
mod layer;
mod memory;
mod policy;
mod service;
mod stats;
mod store;

pub use crate::ratelimit_fields::LimitInfo;
pub use backend::Verdict;
pub use error::{BackendError, BuildError, KeyError};
pub use future::RateLimitFuture;
pub use held::{ConcurrencyPermits, HoldPermits, RateLimitBody};
pub use key::KeyExtractor;
pub use layer::{DEFAULT_MAX_KEYS, IntoLimit, RateLimitBuilder, RateLimitLayer};
pub use memory::MemoryBackend;
pub use policy::{MissingKey, OnBackendError, Rejection, RejectionHook};
pub use service::RateLimit;
pub use stats::Stats;
pub use store::StoreBackend;

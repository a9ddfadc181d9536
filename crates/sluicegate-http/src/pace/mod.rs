//! Outbound pacing: a client-side layer that keeps calls to a rate-limited API within its
//! limit, and honours the server's own answers.
//!
//! [`PaceLayer`] wraps any client `Service<http::Request<B>>` (a hyper-util client, tower
//! stack, or anything else answering `http::Response`s):
//!
//! - **Before each call** it waits for a permit of a core limiter (any algorithm; one budget
//!   for every host, or one per host with [`PaceBuilder::per_host`]), asynchronously, on tokio's
//!   timer. A call that would wait longer than [`PaceBuilder::max_wait`] fails at once with
//!   [`PaceError::WaitTooLong`] and takes nothing.
//! - **After a `429` or `503`** whose `Retry-After` (seconds or an HTTP date) or IETF
//!   `RateLimit` field (`t=`, or `RateLimit-Reset`) says when to come back, further calls to
//!   that host are held until then (or fail with [`PaceError::HeldByServer`] if that is past
//!   the maximum wait). The answer itself is returned to the caller as it came.
//!
//! ```
//! use sluicegate_http::pace::PaceLayer;
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 5 calls a second to each host, in bursts of 5; never wait more than 2 s for one.
//! let layer = PaceLayer::builder("gcra:rate=5/s,burst=5")
//!     .per_host()
//!     .max_wait(Duration::from_secs(2))
//!     .build()?;
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```
//!
//! Wrap a client with it: `tower::ServiceBuilder::new().layer(layer).service(client)`.

mod error;
mod hold;
mod layer;
mod pacer;
mod service;

pub use error::{PaceBuildError, PaceError};
pub use hold::server_hold;
pub use layer::{PaceBuilder, PaceLayer};
pub use service::{Pace, PaceFuture};

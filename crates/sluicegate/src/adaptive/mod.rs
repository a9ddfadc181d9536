//! Adaptive concurrency limits: find the limit from the latency the service shows, as TCP
//! congestion control finds a window.
//!
//! A [`Controller`] is a pure state machine: each finished request's [`Sample`] (when it
//! started, its latency, the permits in flight when it started, and its [`Outcome`]) goes in
//! with the time, and the new limit comes out. None reads a clock, so the same samples always
//! give the same limits, and any random jitter comes from a seed.
//!
//! | Controller | Signal | Rule |
//! |---|---|---|
//! | [`Aimd`] | loss | +1 while at least half the limit is in flight; x0.9 on a drop or timeout |
//! | [`Vegas`] | delay | keep the estimated queue `limit * (1 - rtt_noload / rtt)` between log10-scaled bounds |
//! | [`Gradient2`] | delay | `limit * clamp(1.5 * no_load_rtt / short_rtt, 0.5, 1)`, plus headroom at 1, smoothed per round trip; the no-load latency learnt from answers no queue of ours delayed |
//! | [`EnvoyGradient`] | delay | `limit * clamp(1.25 * min_rtt / window_rtt, 0.5, 2) + sqrt`, minRTT measured by pinning the limit low |
//! | [`Percentile`] | delay | a window's p99 over its target (by default twice the service's own) halves the limit; under it, slow start then +1 |
//!
//! [`Windowed`] wraps a per-sample controller so that it moves once per window, on a summary.
//! [`ControllerSpec`] names any of them in text (`gradient2:min=1,window=1s`) and builds an
//! [`AnyController`]: see [`spec`].
//!
//! Whatever the rule, a dropped request (a rejection, however fast) backs every controller off,
//! whatever the in-flight count; a drop's latency is never read; no state is a trap (from any
//! state, fast answers with the limit in use take it to its maximum, and drops to its
//! minimum). `docs/adaptive/README.md` says which controller to use, and why: at their
//! defaults, [`Percentile`] and [`Gradient2`] keep at least 96% of the best fixed limit's
//! goodput on every simulated scenario of `examples/adaptive/`.
//!
//! ```
//! use sluicegate::adaptive::{Controller, Sample, Vegas};
//!
//! let mut vegas = Vegas::default(); // a limit of 20
//! vegas.on_sample(10_000, Sample::ok(0, 10_000, 20)); // the first latency is the no-load one
//! // As fast as that: no queue, so the limit grows by beta = 6 * log10(20).
//! assert_eq!(vegas.on_sample(20_000, Sample::ok(10_000, 10_000, 20)), 26);
//! // Twice as slow: an estimated queue of 26 * (1 - 1/2) = 13 > beta, so it shrinks by
//! // log10(26) = 1.
//! assert_eq!(vegas.on_sample(40_000, Sample::ok(20_000, 20_000, 20)), 25);
//! ```
//!
//! An [`AdaptiveLimiter`] grants [`Permit`]s up to its controller's limit, and each permit
//! reports its latency and outcome when completed (abandoned permits count as dropped):
//!
//! ```
//! use sluicegate::ManualClock;
//! use sluicegate::adaptive::{AdaptiveLimiter, Aimd};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new(0);
//! let aimd = Aimd::builder().min_limit(1).initial_limit(2).build()?;
//! let limiter = AdaptiveLimiter::with_clock(aimd, clock.clone());
//!
//! let first = limiter.try_acquire().expect("1 of 2");
//! let second = limiter.try_acquire().expect("2 of 2");
//! assert!(limiter.try_acquire().is_none()); // the limit is reached
//!
//! clock.advance(Duration::from_millis(20));
//! first.success(); // 20 ms with 1 of 2 in flight: AIMD adds one
//! assert_eq!(limiter.limit(), 3);
//! drop(second); // abandoned: a drop, so AIMD backs off (3 * 0.9 = 2.7)
//! assert_eq!(limiter.limit(), 2);
//!
//! let metrics = limiter.metrics();
//! assert_eq!((metrics.in_flight, metrics.rejected), (0, 1));
//! # Ok::<(), sluicegate::ConfigError>(())
//! ```
//!
//! With the `tokio` feature, `acquire` waits in a bounded FIFO queue, and partitions share the
//! limit:
//!
//! ```
//! # #[cfg(feature = "tokio")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use sluicegate::adaptive::{AcquireError, AdaptiveLimiter, Aimd};
//! use std::time::Duration;
//!
//! let aimd = Aimd::builder().min_limit(2).initial_limit(2).max_limit(2).build()?;
//! let limiter = AdaptiveLimiter::builder(aimd)
//!     .partition("live", 0.5)
//!     .partition("batch", 0.5)
//!     .queue_capacity(10)
//!     .build()?;
//! let live = limiter.partition("live").ok_or("no live partition")?;
//! let batch = limiter.partition("batch").ok_or("no batch partition")?;
//!
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
//! runtime.block_on(async {
//!     // Batch borrows the whole limit while live is idle.
//!     let first = limiter.try_acquire_in(batch).ok_or("a place is free")?;
//!     let _second = limiter.try_acquire_in(batch).ok_or("a place is free")?;
//!     // Full: a live request waits, and gets the place the first batch request frees.
//!     let live_waits = limiter.acquire_in(live, Duration::from_secs(1));
//!     let batch_finishes = async {
//!         tokio::time::sleep(Duration::from_millis(10)).await;
//!         first.success();
//!     };
//!     let (live_permit, ()) = tokio::join!(live_waits, batch_finishes);
//!     let _live = live_permit?;
//!     // Full again: this one waits its 20 ms in vain.
//!     let late = limiter.acquire_in(batch, Duration::from_millis(20)).await;
//!     assert!(matches!(late, Err(AcquireError::Timeout { .. })));
//!     Ok::<(), Box<dyn std::error::Error>>(())
//! })?;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```

mod aimd;
mod envoy;
mod gradient2;
mod limiter;
mod partition;
mod percentile;
mod permit;
mod reservoir;
mod sample;
pub mod spec;
mod vegas;
mod windowed;

pub use aimd::{Aimd, AimdBuilder};
pub use envoy::{EnvoyGradient, EnvoyGradientBuilder};
pub use gradient2::{Gradient2, Gradient2Builder, QueueHeadroom};
#[cfg(feature = "tokio")]
pub use limiter::AcquireError;
pub use limiter::{AdaptiveLimiter, AdaptiveLimiterBuilder, AdaptiveMetrics};
pub use partition::{PartitionId, PartitionMetrics};
pub use percentile::{Percentile, PercentileBuilder};
pub use permit::Permit;
pub use sample::{Controller, LimitBounds, Outcome, Sample};
pub use spec::{AnyController, ControllerSpec};
pub use vegas::{Vegas, VegasBuilder};
pub use windowed::{WindowAggregate, Windowed, WindowedBuilder};

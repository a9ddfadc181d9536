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
//! | [`Gradient2`] | delay | `limit * clamp(1.5 * long_rtt / rtt, 0.5, 1) + headroom`, smoothed |
//! | [`EnvoyGradient`] | delay | `limit * clamp(1.25 * min_rtt / window_rtt, 0.5, 2) + sqrt`, minRTT measured by pinning the limit low |
//! | [`Percentile`] | delay | a window's p99 over its target halves the limit; under it, slow start then +1 |
//!
//! [`Windowed`] wraps a per-sample controller so that it moves once per window, on a summary.
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

mod aimd;
mod envoy;
mod gradient2;
mod percentile;
mod reservoir;
mod sample;
mod vegas;
mod windowed;

pub use aimd::{Aimd, AimdBuilder};
pub use envoy::{EnvoyGradient, EnvoyGradientBuilder};
pub use gradient2::{Gradient2, Gradient2Builder, QueueHeadroom};
pub use percentile::{Percentile, PercentileBuilder};
pub use sample::{Controller, LimitBounds, Outcome, Sample};
pub use vegas::{Vegas, VegasBuilder};
pub use windowed::{WindowAggregate, Windowed, WindowedBuilder};

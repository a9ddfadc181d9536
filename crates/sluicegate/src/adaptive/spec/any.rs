//! [`AnyController`]: whichever controller a spec names, behind one type.

use crate::adaptive::{
    Aimd, Controller, EnvoyGradient, Gradient2, LimitBounds, Percentile, Sample, Vegas, Windowed,
};
use crate::clock::Micros;

/// Any controller a [`ControllerSpec`](super::ControllerSpec) builds: the five adaptive ones,
/// a fixed limit, no limit, or a per-sample one fed a summary per window.
///
/// The three seeded ones are boxed: their random generators' and reservoirs' state is most
/// of their size, and would make every controller as large.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyController {
    /// `none`: no limit. Its limit is `u32::MAX`, which no count of requests in flight
    /// reaches; a caller that can go without a limiter at all should
    /// ([`ControllerSpec::is_unlimited`](super::ControllerSpec::is_unlimited)).
    Unlimited,
    /// `fixed:limit=N`: a limit that never moves, the baseline adaptive limits are measured
    /// against.
    Fixed(u32),
    /// `aimd`.
    Aimd(Aimd),
    /// `vegas`.
    Vegas(Box<Vegas>),
    /// `gradient2`.
    Gradient2(Gradient2),
    /// `envoy-gradient`.
    EnvoyGradient(Box<EnvoyGradient>),
    /// `percentile`.
    Percentile(Box<Percentile>),
    /// `aimd`, `vegas` or `gradient2` with `window=`: one summary per window.
    Windowed(Box<Windowed<AnyController>>),
}

impl AnyController {
    /// The lowest, first and highest limit it may set (a fixed limit's own three times;
    /// `None` for no limit).
    pub fn bounds(&self) -> Option<LimitBounds> {
        Some(match self {
            AnyController::Unlimited => return None,
            AnyController::Fixed(limit) => LimitBounds::known(*limit, *limit, *limit),
            AnyController::Aimd(c) => c.bounds(),
            AnyController::Vegas(c) => c.bounds(),
            AnyController::Gradient2(c) => c.bounds(),
            AnyController::EnvoyGradient(c) => c.bounds(),
            AnyController::Percentile(c) => c.bounds(),
            AnyController::Windowed(c) => return c.inner().bounds(),
        })
    }
}

impl Controller for AnyController {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        match self {
            AnyController::Unlimited => u32::MAX,
            AnyController::Fixed(limit) => *limit,
            AnyController::Aimd(c) => c.on_sample(now, sample),
            AnyController::Vegas(c) => c.on_sample(now, sample),
            AnyController::Gradient2(c) => c.on_sample(now, sample),
            AnyController::EnvoyGradient(c) => c.on_sample(now, sample),
            AnyController::Percentile(c) => c.on_sample(now, sample),
            AnyController::Windowed(c) => c.on_sample(now, sample),
        }
    }

    fn limit(&self) -> u32 {
        match self {
            AnyController::Unlimited => u32::MAX,
            AnyController::Fixed(limit) => *limit,
            AnyController::Aimd(c) => c.limit(),
            AnyController::Vegas(c) => c.limit(),
            AnyController::Gradient2(c) => c.limit(),
            AnyController::EnvoyGradient(c) => c.limit(),
            AnyController::Percentile(c) => c.limit(),
            AnyController::Windowed(c) => c.limit(),
        }
    }
}

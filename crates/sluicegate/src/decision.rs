//! The one answer shape every limiter gives.

use std::time::Duration;

/// The outcome of asking a limiter for permits.
///
/// Durations are exact to the microsecond and rounded up, so a caller that waits `retry_after`
/// and asks again is not turned away for a rounding error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The permits were granted (and consumed, unless the request was a peek).
    pub allowed: bool,
    /// The quota's size: permits per period, or the burst size.
    pub limit: u64,
    /// Permits a single request could be granted right now, after this decision.
    pub remaining: u64,
    /// Time until the state is back to fresh (a full bucket, an empty window).
    pub reset_after: Duration,
    /// When denied: the earliest time after which the same request could pass.
    pub retry_after: Option<Duration>,
    /// For reserving and shaping algorithms: how long the caller must wait before proceeding.
    pub wait: Duration,
}

impl Decision {
    /// An allowed decision with no wait.
    pub(crate) fn allow(limit: u64, remaining: u64, reset_after_us: u64) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_after_us),
            retry_after: None,
            wait: Duration::ZERO,
        }
    }

    /// A denied decision.
    pub(crate) fn deny(
        limit: u64,
        remaining: u64,
        reset_after_us: u64,
        retry_after_us: u64,
    ) -> Self {
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_after_us),
            retry_after: Some(Duration::from_micros(retry_after_us)),
            wait: Duration::ZERO,
        }
    }

    /// The same decision with a shaping wait.
    pub(crate) fn with_wait(mut self, wait_us: u64) -> Self {
        self.wait = Duration::from_micros(wait_us);
        self
    }
}

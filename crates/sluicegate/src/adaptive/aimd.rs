//! Additive increase, multiplicative decrease: TCP Reno's rule on a concurrency limit.

use std::time::Duration;

use crate::adaptive::sample::{
    Controller, DEFAULT_BACKOFF, LimitBounds, Sample, check_backoff, limit_setters, positive_micros,
};
use crate::clock::Micros;
use crate::error::ConfigError;

/// Loss-based AIMD, after Netflix concurrency-limits' `AIMDLimit`.
///
/// On every sample:
/// - a loss ([`Dropped`](crate::adaptive::Outcome::Dropped),
///   [`Timeout`](crate::adaptive::Outcome::Timeout), or a latency above `timeout`) multiplies
///   the limit by `backoff_ratio`, rounding down;
/// - otherwise, if the request found at least half the limit in flight (`2 * in_flight >=
///   limit`), the limit grows by one. Below that the service was not the bottleneck, so its
///   latency says nothing about a higher limit (this keeps an idle limiter from drifting up).
///
/// The result is kept within `[min_limit, max_limit]`. A loss backs off whatever the
/// in-flight count, and a request that got no answer has no latency to read.
///
/// Defaults, and why:
/// - limits 1 / 20 / 200 (min / initial / max). Netflix's floor is 20, but a floor of 20
///   cannot protect a service that holds fewer than 20 requests at once (it keeps a standing
///   queue there for good); from any limit AIMD climbs back by one per busy answer, so a
///   floor of 1 costs nothing but the climb. The ceiling is Netflix's 200: AIMD sees no
///   latency below its `timeout`, so the ceiling is what keeps its queue short of callers'
///   timeouts (at 1000 it grows until they time out, and wastes half the capacity on answers
///   nobody waits for). 20 to start is Netflix's.
/// - `backoff_ratio` 0.9 (Netflix's): a random failure costs a tenth of the limit.
/// - `timeout` 5 s (Netflix's): AIMD is loss-based and sees no latency below it. Set it to
///   the latency your callers wait for, or AIMD keeps the queue as long as their timeout
///   allows.
///
/// ```
/// use sluicegate::adaptive::{Aimd, Controller, Sample};
///
/// let mut aimd = Aimd::builder().min_limit(1).initial_limit(10).build()?;
/// assert_eq!(aimd.on_sample(0, Sample::ok(0, 1_000, 5)), 11); // half in flight: +1
/// assert_eq!(aimd.on_sample(0, Sample::ok(0, 1_000, 5)), 11); // 10 < 11: no change
/// assert_eq!(aimd.on_sample(0, Sample::dropped(0, 1_000, 11)), 9); // 11 * 0.9 = 9.9
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    bounds: LimitBounds,
    backoff_ratio: f64,
    timeout: Micros,
    limit: u32,
}

/// Builds an [`Aimd`]; every parameter starts at its default.
#[derive(Debug, Clone)]
pub struct AimdBuilder {
    min: u32,
    initial: u32,
    max: u32,
    backoff_ratio: f64,
    timeout: Duration,
}

const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(1, 20, 200);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

impl AimdBuilder {
    limit_setters!();

    /// What the limit is multiplied by on a loss, in `[0.5, 1)` (Netflix's range).
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff_ratio = ratio;
        self
    }

    /// A latency above this counts as a loss, whatever the outcome.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The controller, or what is wrong with the parameters.
    pub fn build(self) -> Result<Aimd, ConfigError> {
        let bounds = LimitBounds::new(self.min, self.initial, self.max)?;
        let ratio = self.backoff_ratio;
        check_backoff(ratio)?;
        let timeout = positive_micros("timeout", self.timeout)?;
        Ok(Aimd {
            bounds,
            backoff_ratio: ratio,
            timeout,
            limit: bounds.initial(),
        })
    }
}

impl Aimd {
    /// A builder starting from the defaults.
    pub fn builder() -> AimdBuilder {
        AimdBuilder {
            min: DEFAULT_BOUNDS.min(),
            initial: DEFAULT_BOUNDS.initial(),
            max: DEFAULT_BOUNDS.max(),
            backoff_ratio: DEFAULT_BACKOFF,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The bounds the limit stays within.
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }
}

impl Default for Aimd {
    fn default() -> Self {
        Aimd {
            bounds: DEFAULT_BOUNDS,
            backoff_ratio: DEFAULT_BACKOFF,
            timeout: crate::clock::micros_ceil(DEFAULT_TIMEOUT),
            limit: DEFAULT_BOUNDS.initial(),
        }
    }
}

impl Controller for Aimd {
    fn on_sample(&mut self, _now: Micros, sample: Sample) -> u32 {
        let limit = u64::from(self.limit);
        let next = if sample.outcome.is_loss() || sample.rtt > self.timeout {
            (limit as f64 * self.backoff_ratio) as u64
        } else if sample.used(limit as f64) {
            limit + 1
        } else {
            limit
        };
        self.limit = self.bounds.clamp(next);
        self.limit
    }

    fn limit(&self) -> u32 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_rule_step_by_step() -> Result<(), ConfigError> {
        let mut aimd = Aimd::builder()
            .min_limit(2)
            .initial_limit(4)
            .max_limit(6)
            .backoff_ratio(0.5)
            .timeout(Duration::from_millis(100))
            .build()?;
        // (sample, limit after): in-flight 2 of 4 is half: +1 -> 5.
        let steps = [
            (Sample::ok(0, 10, 2), 5),
            // 2 of 5 is below half: unchanged.
            (Sample::ok(0, 10, 2), 5),
            (Sample::ok(0, 10, 3), 6),
            // At the maximum.
            (Sample::ok(0, 10, 6), 6),
            // Slower than the timeout counts as a loss even when ok: 6 * 0.5 = 3.
            (Sample::ok(0, 100_001, 6), 3),
            // Exactly the timeout is not above it: 2 * 2 >= 3, so +1.
            (Sample::ok(0, 100_000, 2), 4),
            (Sample::timeout(0, 10, 4), 2),
            // Never below the minimum: 2 * 0.5 = 1 -> 2.
            (Sample::dropped(0, 10, 1), 2),
        ];
        for (i, (sample, limit)) in steps.into_iter().enumerate() {
            assert_eq!(aimd.on_sample(0, sample), limit, "step {i}");
            assert_eq!(aimd.limit(), limit);
        }
        Ok(())
    }

    #[test]
    fn defaults() {
        let mut aimd = Aimd::default();
        assert_eq!(aimd.limit(), 20);
        assert_eq!(aimd.bounds(), LimitBounds::known(1, 20, 200));
        assert_eq!(aimd.on_sample(0, Sample::dropped(0, 1, 20)), 18);
        assert_eq!(aimd.on_sample(0, Sample::ok(0, 1, 9)), 19);
        // Netflix's default timeout is 5 s.
        assert_eq!(aimd.on_sample(0, Sample::ok(0, 5_000_001, 19)), 17);
        // The builder starts from the same defaults.
        let built = Aimd::builder().build().map(|a| (a.bounds(), a.limit()));
        assert_eq!(built, Ok((aimd.bounds(), 20)));
    }

    #[test]
    fn rejects_bad_parameters() {
        for ratio in [0.49, 1.0, f64::NAN, 2.0] {
            assert!(matches!(
                Aimd::builder().backoff_ratio(ratio).build(),
                Err(ConfigError::InvalidParameter {
                    name: "backoff_ratio",
                    ..
                })
            ));
        }
        assert!(matches!(
            Aimd::builder().timeout(Duration::ZERO).build(),
            Err(ConfigError::InvalidParameter {
                name: "timeout",
                ..
            })
        ));
        assert!(matches!(
            Aimd::builder().max_limit(10).build(),
            Err(ConfigError::OutOfOrder { .. })
        ));
        assert!(matches!(
            Aimd::builder().min_limit(30).build(),
            Err(ConfigError::OutOfOrder { .. })
        ));
    }
}

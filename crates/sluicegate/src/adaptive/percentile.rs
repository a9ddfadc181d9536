//! A latency target: keep a window's p90 or p99 under it, as TCP Reno keeps losses away.

use std::time::Duration;

use crate::adaptive::reservoir::Reservoir;
use crate::adaptive::sample::{
    Controller, LimitBounds, Sample, check_fraction, limit_setters, positive_micros,
};
use crate::clock::Micros;
use crate::error::ConfigError;

/// A percentile of each window's latency held under a target.
///
/// Latencies are kept per `window` (which closes on the first sample at or after its end; that
/// sample opens the next) in a bounded uniform sample (`reservoir` values, reservoir sampling
/// seeded by `seed`). A window with fewer than `min_samples` samples is dropped unread. At the
/// end of each other window, with `p` its `percentile` latency:
/// - `p > target`: the limit halves (not below `min_limit`), and the limit it may slow-start
///   back to is the last good one: the limit of the latest window that met the target, if that
///   was below the one that just failed, else the halved limit itself (the old good limit no
///   longer holds);
/// - `p <= target`, and at least half the limit was in flight at some point of the window
///   (below that the service was not tested, as in AIMD): below the slow-start limit the
///   limit doubles (up to that limit); at or above it, it grows by one.
///
/// There is no good limit before the first miss, so the limit starts by doubling, up to
/// `max_limit`, as TCP starts.
///
/// Drops and timeouts count through their latency.
///
/// Defaults: `percentile` 0.99, `window` 1 s, `min_samples` 10, `reservoir` 1000, limits 1 /
/// 10 / 1000, `seed` 0; the target has none.
#[derive(Debug, Clone)]
pub struct Percentile {
    bounds: LimitBounds,
    percentile: f64,
    target: Micros,
    window: Micros,
    min_samples: u64,
    limit: u32,
    window_end: Option<Micros>,
    max_in_flight: u32,
    samples: Reservoir,
    last_good: Option<u32>,
    slow_start_until: u32,
}

/// Builds a [`Percentile`].
#[derive(Debug, Clone)]
pub struct PercentileBuilder {
    min: u32,
    initial: u32,
    max: u32,
    target: Duration,
    percentile: f64,
    window: Duration,
    min_samples: u32,
    reservoir: usize,
    seed: u64,
}

impl PercentileBuilder {
    limit_setters!();

    /// The percentile held under the target, in `(0, 1]` (0.9 for p90, 0.99 for p99).
    pub fn percentile(mut self, percentile: f64) -> Self {
        self.percentile = percentile;
        self
    }

    /// How long each window lasts.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The fewest samples a window needs to be read (at least 1).
    pub fn min_samples(mut self, samples: u32) -> Self {
        self.min_samples = samples;
        self
    }

    /// The most latencies kept per window (at least 1).
    pub fn reservoir(mut self, capacity: usize) -> Self {
        self.reservoir = capacity;
        self
    }

    /// The seed of the reservoir sampling.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The controller, or what is wrong with the parameters.
    pub fn build(self) -> Result<Percentile, ConfigError> {
        let bounds = LimitBounds::new(self.min, self.initial, self.max)?;
        let target = positive_micros("target", self.target)?;
        check_fraction("percentile", self.percentile, 0.0, false, 1.0)?;
        let window = positive_micros("window", self.window)?;
        if self.min_samples == 0 {
            return Err(ConfigError::invalid("min_samples", 0, "must be at least 1"));
        }
        if self.reservoir == 0 {
            return Err(ConfigError::invalid("reservoir", 0, "must be at least 1"));
        }
        Ok(Percentile {
            bounds,
            percentile: self.percentile,
            target,
            window,
            min_samples: self.min_samples.into(),
            limit: bounds.initial(),
            window_end: None,
            max_in_flight: 0,
            samples: Reservoir::new(self.reservoir, self.seed),
            last_good: None,
            slow_start_until: bounds.max(),
        })
    }
}

impl Percentile {
    /// A builder holding the `percentile` latency at or under `target`, other parameters at
    /// their defaults.
    pub fn builder(target: Duration) -> PercentileBuilder {
        PercentileBuilder {
            min: 1,
            initial: 10,
            max: 1000,
            target,
            percentile: 0.99,
            window: Duration::from_secs(1),
            min_samples: 10,
            reservoir: 1000,
            seed: 0,
        }
    }

    /// The latency target, in microseconds.
    pub fn target(&self) -> Micros {
        self.target
    }

    /// The bounds the limit stays within.
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }

    fn close_window(&mut self) {
        let max_in_flight = std::mem::take(&mut self.max_in_flight);
        let seen = self.samples.seen();
        let latency = self.samples.percentile(self.percentile);
        self.samples.clear();
        let Some(latency) = latency.filter(|_| seen >= self.min_samples) else {
            return;
        };
        let limit = self.limit;
        if latency > self.target {
            let halved = self.bounds.clamp(u64::from(limit / 2));
            self.slow_start_until = match self.last_good {
                Some(good) if good < limit => good,
                _ => halved,
            };
            self.last_good = None;
            self.limit = halved;
            return;
        }
        self.last_good = Some(limit);
        if 2 * u64::from(max_in_flight) < u64::from(limit) {
            return;
        }
        let next = if limit < self.slow_start_until {
            (u64::from(limit) * 2).min(self.slow_start_until.into())
        } else {
            u64::from(limit) + 1
        };
        self.limit = self.bounds.clamp(next);
    }
}

impl Controller for Percentile {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        match self.window_end {
            Some(end) if now < end => {}
            Some(_) => {
                self.close_window();
                self.window_end = Some(now.saturating_add(self.window));
            }
            None => self.window_end = Some(now.saturating_add(self.window)),
        }
        self.samples.push(sample.rtt);
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        self.limit
    }

    fn limit(&self) -> u32 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Micros = 1_000_000;
    const MS: Micros = 1_000;

    #[test]
    fn follows_the_rule_step_by_step() -> Result<(), ConfigError> {
        let mut p = Percentile::builder(Duration::from_millis(10))
            .percentile(0.9)
            .initial_limit(4)
            .max_limit(100)
            .build()?;
        let fast = [5 * MS; 10];
        // p90 of ten is the 9th smallest: two slow samples out of ten make it slow.
        let mut slow = [5 * MS; 10];
        slow[3] = 20 * MS;
        slow[7] = 20 * MS;
        // Exactly on target is within it.
        let on_target = [10 * MS; 10];
        // (window's latencies, in flight, limit once the window closes, why)
        let steps: [(&[Micros], u32, u32, &str); 11] = [
            (&fast, 4, 8, "slow start: 4 -> 8"),
            (&fast, 8, 16, "8 -> 16"),
            (&on_target, 16, 32, "16 -> 32"),
            (
                &slow,
                32,
                16,
                "miss: halve; slow start back to 16, the last good limit",
            ),
            (&fast, 16, 17, "at the last good limit: +1"),
            (&fast, 17, 18, "+1"),
            (&slow, 18, 9, "miss at 18: halve, slow start back to 17"),
            (&fast, 9, 17, "9 -> 18, held at 17"),
            (&fast, 17, 18, "+1"),
            (&fast, 8, 18, "2 * 8 < 18: app-limited, no growth"),
            (
                &fast[..9],
                18,
                18,
                "9 samples are too few: the window is not read",
            ),
        ];
        // Window k runs from k seconds; its first sample closes window k - 1.
        let mut expected: Option<(u32, &str)> = None;
        for (index, (rtts, in_flight, limit, why)) in steps.into_iter().enumerate() {
            for (i, &rtt) in rtts.iter().enumerate() {
                let now = index as Micros * SECOND + i as Micros;
                let after = p.on_sample(now, Sample::ok(now.saturating_sub(rtt), rtt, in_flight));
                if let (0, Some((limit, why))) = (i, expected) {
                    assert_eq!(after, limit, "window {}: {why}", index - 1);
                }
            }
            expected = Some((limit, why));
        }
        let end = steps.len() as Micros * SECOND;
        assert_eq!(p.on_sample(end, Sample::ok(end, 0, 0)), 18);
        Ok(())
    }

    #[test]
    fn a_miss_after_a_miss_halves_again() -> Result<(), ConfigError> {
        let mut p = Percentile::builder(Duration::from_millis(10))
            .percentile(0.5)
            .min_samples(1)
            .initial_limit(64)
            .build()?;
        let slow = Sample::ok(0, 50 * MS, 64);
        p.on_sample(0, slow);
        assert_eq!(p.on_sample(SECOND, slow), 32);
        assert_eq!(p.on_sample(2 * SECOND, slow), 16);
        // No window met the target in between, so each miss caps slow start at the halved
        // limit: the window of the third slow sample closes at 8, and the next, good, one
        // adds one.
        assert_eq!(p.on_sample(3 * SECOND, Sample::ok(0, MS, 16)), 8);
        assert_eq!(p.on_sample(4 * SECOND, Sample::ok(0, MS, 16)), 9);
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let target = Duration::from_millis(5);
        let bad = [
            Percentile::builder(Duration::ZERO).build(),
            Percentile::builder(target).percentile(0.0).build(),
            Percentile::builder(target).percentile(1.01).build(),
            Percentile::builder(target).window(Duration::ZERO).build(),
            Percentile::builder(target).min_samples(0).build(),
            Percentile::builder(target).reservoir(0).build(),
            Percentile::builder(target).initial_limit(0).build(),
        ];
        for result in bad {
            assert!(result.is_err(), "{result:?}");
        }
    }
}

//! TCP Vegas on a concurrency limit: estimate the queue from how far latency is above its
//! no-load minimum, and keep it between two small bounds.

use crate::adaptive::reservoir::SeededRng;
use crate::adaptive::sample::{
    Controller, LimitBounds, Sample, check_fraction, check_order, limit_setters, whole,
};
use crate::clock::Micros;
use crate::error::ConfigError;

/// Delay-based Vegas, after Netflix concurrency-limits' `VegasLimit`.
///
/// The no-load latency `rtt_noload` is the lowest latency seen. Each sample then estimates the
/// requests queued at the service as `queue = ceil(limit * (1 - rtt_noload / rtt))`, and with
/// `log = max(1, floor(log10(limit)))`, `alpha = 3 * log` and `beta = 6 * log`:
/// - a loss (dropped or timed out) lowers the limit by `log`, whatever the in-flight count; its
///   latency is not read (neither a minimum nor a probe);
/// - otherwise, when fewer than half the limit were in flight (`2 * in_flight < limit`), the
///   limit stays: an application that does not use its limit says nothing about it;
/// - `queue <= log` (no queue to speak of) raises the limit by `beta`;
/// - `queue < alpha` raises it by `log`;
/// - `queue > beta` lowers it by `log`;
/// - between `alpha` and `beta` it stays.
///
/// The new estimate, kept within `[min_limit, max_limit]`, is blended with the old one:
/// `limit = (1 - smoothing) * limit + smoothing * new`. A sample that lowers the minimum only
/// records it.
///
/// The minimum drifts stale (a deploy, a moved database), so every `jitter * probe_multiplier *
/// limit` samples, with `jitter` drawn uniformly from `[0.5, 1)` each time, the next sample's
/// latency becomes the new `rtt_noload` whatever it is (a re-probe).
///
/// **Where it does not work: latencies with a spread.** The no-load latency is the fastest
/// answer ever seen. When service times vary (exponential, or a long tail), the fastest of
/// thousands is far below a typical one, so nearly every answer shows a queue of about the
/// whole limit, and the limit sinks below what the service can take: in the simulated
/// scenarios of `examples/adaptive/`, per-sample Vegas keeps about 58% of the best fixed
/// limit's goodput on exponential service times and 11% on a lognormal tail (coefficient
/// of variation 3); Netflix's Vegas and the `congestion-limiter` crate's do the same. On
/// exponential-like latencies, wrap it in [`Windowed`](crate::adaptive::Windowed) (windows
/// of 100 ms average the spread out: 94.6% or more of the best fixed limit's goodput in the
/// scenarios with exponential service times and no random failures); on long tails, use
/// [`Gradient2`](crate::adaptive::Gradient2) or [`Percentile`](crate::adaptive::Percentile)
/// instead. It suits services whose latency hardly varies until they queue.
///
/// Defaults (Netflix's), and why: limits 1 / 20 / 1000 (a floor any service can drain, a
/// start most can take, a ceiling far above); `smoothing` 1.0 (each estimate taken whole: the
/// steps are already small, `log10(limit)` at a time); `alpha` 3 and `beta` 6 (times `log`:
/// a queue of a few requests per worker's worth of the limit keeps the service busy without
/// making callers wait long); `probe_multiplier` 30 (the no-load latency re-measured every 15
/// to 30 limits' worth of answers: often enough to follow a deploy, rarely enough to cost
/// little). Netflix's jitter comes from a thread-local generator; here it comes from `seed`
/// (default 0), so a run is repeatable.
#[derive(Debug, Clone)]
pub struct Vegas {
    bounds: LimitBounds,
    smoothing: f64,
    alpha: u32,
    beta: u32,
    probe_multiplier: u32,
    estimate: f64,
    rtt_noload: Option<Micros>,
    probe_count: u64,
    probe_jitter: f64,
    rng: SeededRng,
}

/// Builds a [`Vegas`]; every parameter starts at Netflix's default.
#[derive(Debug, Clone)]
pub struct VegasBuilder {
    min: u32,
    initial: u32,
    max: u32,
    smoothing: f64,
    alpha: u32,
    beta: u32,
    probe_multiplier: u32,
    seed: u64,
}

impl VegasBuilder {
    limit_setters!();

    /// How much of each new estimate is taken, in `(0, 1]` (1: all of it).
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// The queue thresholds as multiples of `log10(limit)`: below `alpha` the limit grows,
    /// above `beta` it shrinks (`1 <= alpha <= beta`).
    pub fn alpha_beta(mut self, alpha: u32, beta: u32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// Re-probe the no-load latency every `[0.5, 1) * probe_multiplier * limit` samples
    /// (at least 1).
    pub fn probe_multiplier(mut self, multiplier: u32) -> Self {
        self.probe_multiplier = multiplier;
        self
    }

    /// The seed of the probe jitter.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The controller, or what is wrong with the parameters.
    pub fn build(self) -> Result<Vegas, ConfigError> {
        let bounds = LimitBounds::new(self.min, self.initial, self.max)?;
        check_fraction("smoothing", self.smoothing, 0.0, false, 1.0)?;
        if self.alpha == 0 {
            return Err(ConfigError::invalid(
                "alpha",
                self.alpha,
                "must be at least 1",
            ));
        }
        check_order("alpha", self.alpha.into(), "beta", self.beta.into())?;
        if self.probe_multiplier == 0 {
            return Err(ConfigError::invalid(
                "probe_multiplier",
                0,
                "must be at least 1",
            ));
        }
        Ok(self.assemble(bounds))
    }

    /// The controller from checked parameters.
    fn assemble(self, bounds: LimitBounds) -> Vegas {
        let mut rng = SeededRng::new(self.seed);
        Vegas {
            bounds,
            smoothing: self.smoothing,
            alpha: self.alpha,
            beta: self.beta,
            probe_multiplier: self.probe_multiplier,
            estimate: f64::from(bounds.initial()),
            rtt_noload: None,
            probe_count: 0,
            probe_jitter: draw_jitter(&mut rng),
            rng,
        }
    }
}

const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(1, 20, 1000);

/// Netflix's `Log10RootIntFunction`: `floor(log10(limit))`, at least 1.
fn log_scale(limit: u32) -> u32 {
    limit.checked_ilog10().unwrap_or(0).max(1)
}

fn draw_jitter(rng: &mut SeededRng) -> f64 {
    0.5 + 0.5 * rng.unit()
}

impl Vegas {
    /// A builder starting from the defaults.
    pub fn builder() -> VegasBuilder {
        VegasBuilder {
            min: DEFAULT_BOUNDS.min(),
            initial: DEFAULT_BOUNDS.initial(),
            max: DEFAULT_BOUNDS.max(),
            smoothing: 1.0,
            alpha: 3,
            beta: 6,
            probe_multiplier: 30,
            seed: 0,
        }
    }

    /// The no-load latency the queue is estimated from (`None` before the first sample).
    pub fn rtt_noload(&self) -> Option<Micros> {
        self.rtt_noload
    }

    /// The bounds the limit stays within.
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }

    fn should_probe(&self) -> bool {
        self.probe_jitter * f64::from(self.probe_multiplier) * self.estimate
            <= self.probe_count as f64
    }

    fn update(&mut self, rtt: f64, rtt_noload: f64, sample: Sample) -> u32 {
        let estimate = self.estimate;
        let current = whole(estimate);
        let log = f64::from(log_scale(current));
        let next = if sample.outcome.is_loss() {
            estimate - log
        } else if !sample.used(estimate) {
            return current;
        } else {
            let queue = (estimate * (1.0 - rtt_noload / rtt)).ceil();
            let alpha = f64::from(self.alpha) * log;
            let beta = f64::from(self.beta) * log;
            if queue <= log {
                estimate + beta
            } else if queue < alpha {
                estimate + log
            } else if queue > beta {
                estimate - log
            } else {
                return current;
            }
        };
        let next = self.bounds.clamp_f64(next);
        // Clamped again: in floating point, a blend of two values within bounds can fall just
        // below the lower one (15 and 15 blend to 14.999...), which `whole` truncates to 14.
        let blended = (1.0 - self.smoothing) * estimate + self.smoothing * next;
        self.estimate = self.bounds.clamp_f64(blended);
        whole(self.estimate)
    }
}

impl Default for Vegas {
    fn default() -> Self {
        Vegas::builder().assemble(DEFAULT_BOUNDS)
    }
}

impl Controller for Vegas {
    fn on_sample(&mut self, _now: Micros, sample: Sample) -> u32 {
        if sample.outcome.is_loss() {
            // Its latency is no measure of the service: neither a probe nor a minimum.
            return self.update(0.0, 0.0, sample);
        }
        let rtt = sample.rtt.max(1);
        self.probe_count = self.probe_count.saturating_add(1);
        if self.should_probe() {
            self.probe_jitter = draw_jitter(&mut self.rng);
            self.probe_count = 0;
            self.rtt_noload = Some(rtt);
            return self.limit();
        }
        match self.rtt_noload {
            Some(noload) if rtt >= noload => self.update(sample.rtt_f64(), noload as f64, sample),
            _ => {
                self.rtt_noload = Some(rtt);
                self.limit()
            }
        }
    }

    fn limit(&self) -> u32 {
        whole(self.estimate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Vegas that will not re-probe within these tests (the first probe comes after at
    /// least 0.5 * 10^6 * 20 samples).
    fn no_probe() -> VegasBuilder {
        Vegas::builder().probe_multiplier(1_000_000)
    }

    #[test]
    fn follows_the_rule_step_by_step() -> Result<(), ConfigError> {
        let mut vegas = no_probe().build()?;
        assert_eq!(vegas.limit(), 20);
        // (rtt, in flight, limit after, why)
        let steps: [(Micros, u32, u32, &str); 8] = [
            (100, 20, 20, "the first sample sets rtt_noload = 100"),
            // queue = ceil(20 * (1 - 100/100)) = 0 <= log 1: + beta 6.
            (100, 10, 26, "no queue: +beta"),
            // queue = ceil(26 * (1 - 100/200)) = 13 > beta 6: - log 1.
            (200, 13, 25, "queue above beta: -log"),
            // queue = ceil(25 * (1 - 100/105)) = ceil(1.19) = 2 < alpha 3: + log.
            (105, 13, 26, "small queue: +log"),
            // queue = ceil(26 * (1 - 100/120)) = ceil(4.33) = 5, within [3, 6].
            (120, 13, 26, "queue between alpha and beta: unchanged"),
            // 2 * 12 < 26: the application does not use its limit.
            (100, 12, 26, "app-limited: unchanged"),
            (50, 26, 26, "a lower latency only moves rtt_noload"),
            // queue = ceil(26 * (1 - 50/400)) = 23 > 6.
            (400, 26, 25, "queue above beta again"),
        ];
        for (rtt, in_flight, limit, why) in steps {
            assert_eq!(
                vegas.on_sample(0, Sample::ok(0, rtt, in_flight)),
                limit,
                "{why}"
            );
        }
        assert_eq!(vegas.rtt_noload(), Some(50));
        // A loss lowers by log even when app-limited.
        assert_eq!(vegas.on_sample(0, Sample::dropped(0, 50, 0)), 24);
        assert_eq!(vegas.on_sample(0, Sample::timeout(0, 50, 0)), 23);
        Ok(())
    }

    #[test]
    fn a_blend_at_the_lower_bound_stays_on_it() -> Result<(), ConfigError> {
        // Found by tests/adaptive_properties.rs: these blend 15 and 15 to 14.999....
        let mut vegas = no_probe()
            .min_limit(15)
            .initial_limit(15)
            .max_limit(23)
            .smoothing(0.2753312099727238)
            .build()?;
        for _ in 0..3 {
            assert_eq!(vegas.on_sample(0, Sample::dropped(0, 1_000, 15)), 15);
        }
        Ok(())
    }

    #[test]
    fn thresholds_scale_with_log10_of_the_limit() -> Result<(), ConfigError> {
        let mut vegas = no_probe().initial_limit(150).build()?;
        vegas.on_sample(0, Sample::ok(0, 1_000, 150));
        // log10(150) = 2: no queue adds beta = 12.
        assert_eq!(vegas.on_sample(0, Sample::ok(0, 1_000, 150)), 162);
        // queue = ceil(162 * (1 - 1000/1100)) = ceil(14.7) = 15 > beta 12: - 2.
        assert_eq!(vegas.on_sample(0, Sample::ok(0, 1_100, 150)), 160);
        // queue = ceil(160 * (1 - 1000/1040)) = ceil(6.15) = 7 in [alpha 6, beta 12].
        assert_eq!(vegas.on_sample(0, Sample::ok(0, 1_040, 150)), 160);
        // queue = ceil(160 * (1 - 1000/1020)) = ceil(3.14) = 4 < alpha 6, > log 2: + 2.
        assert_eq!(vegas.on_sample(0, Sample::ok(0, 1_020, 150)), 162);
        Ok(())
    }

    #[test]
    fn smoothing_blends_old_and_new() -> Result<(), ConfigError> {
        let mut vegas = no_probe().smoothing(0.5).max_limit(30).build()?;
        vegas.on_sample(0, Sample::ok(0, 100, 20));
        // new = 20 + 6 = 26; blended 0.5 * 20 + 0.5 * 26 = 23.
        assert_eq!(vegas.on_sample(0, Sample::ok(0, 100, 20)), 23);
        // new = 23 + 6 = 29; blended 26.
        assert_eq!(vegas.on_sample(0, Sample::ok(0, 100, 20)), 26);
        // new = 26 + 6 = 32, clamped to 30 before blending: 28.
        assert_eq!(vegas.on_sample(0, Sample::ok(0, 100, 20)), 28);
        Ok(())
    }

    #[test]
    fn reprobes_the_minimum_within_the_jittered_interval() -> Result<(), Box<dyn std::error::Error>>
    {
        for seed in 0..20 {
            // probe_multiplier 1 at limit 20: a probe after 10 to 20 samples.
            let mut vegas = Vegas::builder().probe_multiplier(1).seed(seed).build()?;
            vegas.on_sample(0, Sample::ok(0, 100, 0));
            let mut probed_at = None;
            for n in 2..=25 {
                // App-limited samples leave the limit alone, so only the probe can move
                // rtt_noload up.
                vegas.on_sample(0, Sample::ok(0, 1_000, 0));
                if vegas.rtt_noload() == Some(1_000) {
                    probed_at = Some(n);
                    break;
                }
            }
            let n = probed_at.ok_or("no probe")?;
            assert!((10..=20).contains(&n), "seed {seed}: probe at sample {n}");
            assert_eq!(vegas.limit(), 20);
        }
        Ok(())
    }

    #[test]
    fn a_seed_repeats_its_probes() -> Result<(), ConfigError> {
        let run = |seed| -> Result<Vec<Option<Micros>>, ConfigError> {
            let mut vegas = Vegas::builder().probe_multiplier(1).seed(seed).build()?;
            Ok((0..200)
                .map(|i| {
                    vegas.on_sample(0, Sample::ok(0, 100 + i % 7, 0));
                    vegas.rtt_noload()
                })
                .collect())
        };
        assert_eq!(run(3)?, run(3)?);
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = [
            Vegas::builder().smoothing(0.0).build(),
            Vegas::builder().smoothing(1.5).build(),
            Vegas::builder().alpha_beta(0, 6).build(),
            Vegas::builder().alpha_beta(7, 6).build(),
            Vegas::builder().probe_multiplier(0).build(),
            Vegas::builder().min_limit(0).build(),
        ];
        for result in bad {
            assert!(result.is_err(), "{result:?}");
        }
    }
}

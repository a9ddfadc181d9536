//! Envoy's adaptive concurrency gradient controller: measure the ideal latency by pinning the
//! limit low for a moment, then scale the limit by how far each window's latency is from it.

use std::time::Duration;

use crate::adaptive::reservoir::{Reservoir, SeededRng};
use crate::adaptive::sample::{
    Controller, LimitBounds, Outcome, Sample, check_fraction, check_order, limit_setters,
    positive_micros,
};
use crate::clock::{Micros, micros_ceil};
use crate::error::ConfigError;

/// The gradient controller of Envoy's adaptive concurrency filter.
///
/// **minRTT.** The ideal latency is measured by pinning the limit to `pinned_concurrency`
/// until `min_rtt_request_count` requests that started after the pin have finished; the
/// `percentile` of their latencies is the new `min_rtt`, and the limit goes back to what it
/// was. The first measurement starts at construction (it then restores `initial_limit`); the
/// next ones every `min_rtt_interval` plus a random delay of up to `jitter` times that
/// interval (so that a fleet of hosts does not pin at the same moment), and also as soon as
/// the limit has sat at `min_limit` for 5 windows in a row (the `min_rtt` is likely stale).
///
/// **Limit.** Outside a measurement, the latencies of each `update_interval` are summarized
/// by their `percentile` (`sample_rtt`), and with
/// `gradient = clamp(min_rtt * (1 + min_rtt_buffer) / sample_rtt, 0.5, 2)`:
/// `limit = floor(limit * gradient + sqrt(limit * gradient))`, kept within bounds. The square
/// root is the headroom that keeps the limit probing upward while latency holds.
///
/// A window with no samples leaves the limit alone. Only requests that started after the
/// latest pin count. [`Outcome::Dropped`] samples are not recorded (Envoy cancels the sample
/// of a request that got no answer); timeouts are, with their latency.
///
/// Envoy runs timers; here the windows close on the first sample at or after their end (the
/// limit cannot matter before a request asks for it). Latencies are summarized from a bounded
/// reservoir of each window (Envoy uses a histogram).
///
/// Defaults (Envoy's): `pinned_concurrency` 3, limits 3 / 3 / 1000 (`min_limit` is also the
/// default pin), `percentile` 0.5, `min_rtt_buffer` 0.25, `min_rtt_request_count` 50, `jitter`
/// 0.15. Envoy requires the two intervals; their defaults here, `min_rtt_interval` 60 s and
/// `update_interval` 100 ms, are those of its documented example. Reservoir 1000 samples,
/// `seed` 0.
#[derive(Debug, Clone)]
pub struct EnvoyGradient {
    bounds: LimitBounds,
    pinned: u32,
    percentile: f64,
    buffer: f64,
    request_count: u64,
    jitter: f64,
    min_rtt_interval: Micros,
    update_interval: Micros,
    limit: u32,
    /// The limit to restore when the measurement ends.
    deferred: u32,
    measuring: bool,
    /// Samples of requests started before this are ignored.
    epoch: Micros,
    min_rtt: Option<Micros>,
    window_end: Micros,
    next_min_rtt: Micros,
    at_min_windows: u32,
    samples: Reservoir,
    rng: SeededRng,
}

/// Builds an [`EnvoyGradient`]; every parameter starts at its default.
#[derive(Debug, Clone)]
pub struct EnvoyGradientBuilder {
    min: u32,
    initial: u32,
    max: u32,
    pinned: Option<u32>,
    percentile: f64,
    buffer: f64,
    request_count: u32,
    jitter: f64,
    min_rtt_interval: Duration,
    update_interval: Duration,
    reservoir: usize,
    seed: u64,
}

const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(3, 3, 1000);

/// Windows in a row at the minimum limit that start a new minRTT measurement.
const WINDOWS_AT_MIN: u32 = 5;

impl EnvoyGradientBuilder {
    limit_setters!();

    /// The limit while minRTT is measured, within `[min_limit, max_limit]` (default:
    /// `min_limit`).
    pub fn pinned_concurrency(mut self, pinned: u32) -> Self {
        self.pinned = Some(pinned);
        self
    }

    /// The percentile, in `(0, 1]`, that summarizes a window's latencies (0.5: the median).
    pub fn percentile(mut self, percentile: f64) -> Self {
        self.percentile = percentile;
        self
    }

    /// The latency allowed above minRTT before the limit shrinks, as a fraction of minRTT
    /// (at least 0).
    pub fn min_rtt_buffer(mut self, buffer: f64) -> Self {
        self.buffer = buffer;
        self
    }

    /// Requests a minRTT measurement waits for (at least 1).
    pub fn min_rtt_request_count(mut self, count: u32) -> Self {
        self.request_count = count;
        self
    }

    /// The random delay added to `min_rtt_interval`, as a fraction of it, in `[0, 1]`.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// Time between minRTT measurements (before jitter).
    pub fn min_rtt_interval(mut self, interval: Duration) -> Self {
        self.min_rtt_interval = interval;
        self
    }

    /// The window over which latencies are summarized for each update of the limit.
    pub fn update_interval(mut self, interval: Duration) -> Self {
        self.update_interval = interval;
        self
    }

    /// The most latencies kept per window (at least 1).
    pub fn reservoir(mut self, capacity: usize) -> Self {
        self.reservoir = capacity;
        self
    }

    /// The seed of the jitter and of the reservoir.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The controller, or what is wrong with the parameters.
    pub fn build(self) -> Result<EnvoyGradient, ConfigError> {
        let bounds = LimitBounds::new(self.min, self.initial, self.max)?;
        let pinned = self.pinned.unwrap_or(bounds.min());
        check_order(
            "min_limit",
            bounds.min().into(),
            "pinned_concurrency",
            pinned.into(),
        )?;
        check_order(
            "pinned_concurrency",
            pinned.into(),
            "max_limit",
            bounds.max().into(),
        )?;
        check_fraction("percentile", self.percentile, 0.0, false, 1.0)?;
        if !(self.buffer.is_finite() && self.buffer >= 0.0) {
            return Err(ConfigError::invalid(
                "min_rtt_buffer",
                self.buffer,
                "must be at least 0",
            ));
        }
        if self.request_count == 0 {
            return Err(ConfigError::invalid(
                "min_rtt_request_count",
                0,
                "must be at least 1",
            ));
        }
        check_fraction("jitter", self.jitter, 0.0, true, 1.0)?;
        positive_micros("min_rtt_interval", self.min_rtt_interval)?;
        positive_micros("update_interval", self.update_interval)?;
        if self.reservoir == 0 {
            return Err(ConfigError::invalid("reservoir", 0, "must be at least 1"));
        }
        Ok(self.assemble(bounds, pinned))
    }

    /// The controller from checked parameters, pinned at construction for its first minRTT.
    fn assemble(self, bounds: LimitBounds, pinned: u32) -> EnvoyGradient {
        EnvoyGradient {
            bounds,
            pinned,
            percentile: self.percentile,
            buffer: self.buffer,
            request_count: self.request_count.into(),
            jitter: self.jitter,
            min_rtt_interval: micros_ceil(self.min_rtt_interval),
            update_interval: micros_ceil(self.update_interval),
            limit: pinned,
            deferred: bounds.initial(),
            measuring: true,
            epoch: 0,
            min_rtt: None,
            window_end: 0,
            next_min_rtt: 0,
            at_min_windows: 0,
            samples: Reservoir::new(self.reservoir, self.seed),
            // A different stream from the reservoir's, from the same seed.
            rng: SeededRng::new(self.seed ^ 0x9e37_79b9_7f4a_7c15),
        }
    }
}

impl EnvoyGradient {
    /// A builder starting from the defaults.
    pub fn builder() -> EnvoyGradientBuilder {
        EnvoyGradientBuilder {
            min: DEFAULT_BOUNDS.min(),
            initial: DEFAULT_BOUNDS.initial(),
            max: DEFAULT_BOUNDS.max(),
            pinned: None,
            percentile: 0.5,
            buffer: 0.25,
            request_count: 50,
            jitter: 0.15,
            min_rtt_interval: Duration::from_secs(60),
            update_interval: Duration::from_millis(100),
            reservoir: 1000,
            seed: 0,
        }
    }

    /// The latest minRTT measured (`None` until the first measurement ends).
    pub fn min_rtt(&self) -> Option<Micros> {
        self.min_rtt
    }

    /// Whether the limit is pinned for a minRTT measurement.
    pub fn measuring_min_rtt(&self) -> bool {
        self.measuring
    }

    /// The bounds the limit stays within (outside a measurement; during one it is
    /// `pinned_concurrency`, also within them).
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }

    fn start_measuring(&mut self, now: Micros) {
        if self.measuring {
            return;
        }
        self.deferred = self.limit;
        self.limit = self.pinned;
        self.samples.clear();
        self.epoch = now;
        self.measuring = true;
        self.at_min_windows = 0;
    }

    fn finish_measuring(&mut self, now: Micros) {
        self.min_rtt = self.samples.percentile(self.percentile);
        self.samples.clear();
        self.measuring = false;
        self.limit = self.deferred;
        self.at_min_windows = 0;
        self.next_min_rtt = now.saturating_add(self.jittered_interval());
        self.window_end = now.saturating_add(self.update_interval);
    }

    /// `min_rtt_interval` plus up to `jitter` of it (Envoy: `interval + random % ceil(interval
    /// * jitter)`).
    fn jittered_interval(&mut self) -> Micros {
        let range = (self.min_rtt_interval as f64 * self.jitter).ceil() as u64;
        self.min_rtt_interval.saturating_add(self.rng.below(range))
    }

    fn close_window(&mut self, now: Micros) {
        self.window_end = now.saturating_add(self.update_interval);
        let Some(sample_rtt) = self.samples.percentile(self.percentile) else {
            return;
        };
        self.samples.clear();
        let min_rtt = self.min_rtt.unwrap_or(sample_rtt) as f64;
        let buffered = min_rtt + min_rtt * self.buffer;
        let gradient = (buffered / sample_rtt as f64).clamp(0.5, 2.0);
        let scaled = f64::from(self.limit) * gradient;
        let next = self.bounds.clamp((scaled + scaled.sqrt()) as u64);
        let at_min = self.limit == self.bounds.min() && next == self.bounds.min();
        self.limit = next;
        self.at_min_windows = if at_min { self.at_min_windows + 1 } else { 0 };
        if self.at_min_windows >= WINDOWS_AT_MIN {
            self.start_measuring(now);
        }
    }
}

impl Default for EnvoyGradient {
    fn default() -> Self {
        EnvoyGradient::builder().assemble(DEFAULT_BOUNDS, DEFAULT_BOUNDS.min())
    }
}

impl Controller for EnvoyGradient {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        if sample.outcome == Outcome::Dropped {
            return self.limit;
        }
        if !self.measuring {
            // The two timers in the order they would have fired.
            if now >= self.window_end && self.window_end <= self.next_min_rtt {
                self.close_window(now);
            }
            if !self.measuring && now >= self.next_min_rtt {
                self.start_measuring(now);
            }
        }
        if sample.start < self.epoch {
            return self.limit;
        }
        self.samples.push(sample.rtt.max(1));
        if self.measuring && self.samples.seen() >= self.request_count {
            self.finish_measuring(now);
        }
        self.limit
    }

    fn limit(&self) -> u32 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Micros = 1_000;

    fn exact() -> EnvoyGradientBuilder {
        EnvoyGradient::builder()
            .initial_limit(10)
            .min_rtt_request_count(5)
            .jitter(0.0)
            .min_rtt_interval(Duration::from_secs(10))
            .update_interval(Duration::from_millis(100))
    }

    #[test]
    fn follows_the_rule_step_by_step() -> Result<(), ConfigError> {
        let mut g = exact().build()?;
        // Pinned from the start.
        assert_eq!(g.limit(), 3);
        assert!(g.measuring_min_rtt());
        for (i, rtt) in [100, 120, 80, 110, 90].into_iter().enumerate() {
            let now = (i as Micros + 1) * MS;
            g.on_sample(now, Sample::ok(now - rtt, rtt, 3));
        }
        // The median of 80, 90, 100, 110, 120; the limit back to the initial 10.
        assert_eq!(g.min_rtt(), Some(100));
        assert!(!g.measuring_min_rtt());
        assert_eq!(g.limit(), 10);
        // Measurement ended at 5 ms: windows end at 105 ms, 205 ms, ...; the next one at
        // 10.005 s.
        let ok = |now: Micros, rtt: Micros| Sample::ok(now - rtt, rtt, 10);
        for _ in 0..3 {
            assert_eq!(g.on_sample(50 * MS, ok(50 * MS, 100)), 10);
        }
        // The window's median is 100: gradient = 125 / 100 = 1.25, 10 * 1.25 = 12.5,
        // 12.5 + sqrt(12.5) = 16.04 -> 16. This sample opens the next window.
        assert_eq!(g.on_sample(105 * MS, ok(105 * MS, 250)), 16);
        g.on_sample(150 * MS, ok(150 * MS, 250));
        g.on_sample(150 * MS, ok(150 * MS, 250));
        // 125 / 250 = 0.5: 16 * 0.5 = 8, 8 + sqrt(8) = 10.83 -> 10.
        assert_eq!(g.on_sample(205 * MS, ok(205 * MS, 500)), 10);
        // 125 / 500 = 0.25, clamped to 0.5: 5 + sqrt(5) = 7.24 -> 7.
        assert_eq!(g.on_sample(305 * MS, ok(305 * MS, 50)), 7);
        // 125 / 50 = 2.5, clamped to 2: 14 + sqrt(14) = 17.74 -> 17.
        assert_eq!(g.on_sample(405 * MS, ok(405 * MS, 125)), 17);
        // A window with a timeout counts its latency: 125 / 125 = 1: 17 + 4.12 -> 21.
        assert_eq!(
            g.on_sample(505 * MS, Sample::timeout(505 * MS - 10_000, 10_000, 17)),
            21
        );
        // Dropped samples are not recorded; the window still holds only the 10 ms timeout.
        g.on_sample(550 * MS, Sample::dropped(550 * MS - 1, 1, 21));
        // 125 / 10000 -> 0.5: 10.5 + 3.24 = 13.74 -> 13.
        assert_eq!(g.on_sample(605 * MS, ok(605 * MS, 125)), 13);

        // At 10.005 s the window closes (125: gradient 1, 13 + 3.6 -> 16), then the limit
        // is pinned for a new measurement; this sample started before the pin and is ignored.
        let t = 10_005 * MS;
        assert_eq!(g.on_sample(t, ok(t, 125)), 3);
        assert!(g.measuring_min_rtt());
        // Only samples started after the pin count.
        g.on_sample(t + 1, Sample::ok(t - 1, 2, 3));
        for i in 0..4 {
            assert_eq!(g.on_sample(t + 10 + i, Sample::ok(t, 200, 3)), 3);
        }
        assert_eq!(g.on_sample(t + 20, Sample::ok(t, 200, 3)), 16);
        assert_eq!(g.min_rtt(), Some(200));
        Ok(())
    }

    #[test]
    fn five_windows_at_the_minimum_start_a_measurement() -> Result<(), ConfigError> {
        let mut g = exact().initial_limit(3).build()?;
        for i in 0..5 {
            g.on_sample(i, Sample::ok(0, 100, 3));
        }
        assert_eq!(g.min_rtt(), Some(100));
        // Windows of 1000 µs latency: gradient 0.5, 1.5 + 1.22 -> 2, held at 3. This sample
        // closes the (empty) window left by the measurement and opens the first one.
        let mut now = 4 + 100 * MS;
        g.on_sample(now, Sample::ok(now - 1000, 1000, 3));
        for closed in 1..=5 {
            now += 100 * MS;
            g.on_sample(now, Sample::ok(now - 1000, 1000, 3));
            assert_eq!(g.limit(), 3);
            // The 5th window in a row that keeps the limit at the minimum starts a
            // measurement.
            assert_eq!(g.measuring_min_rtt(), closed == 5, "window {closed}");
        }
        Ok(())
    }

    #[test]
    fn jitter_delays_the_next_measurement_by_up_to_its_fraction() -> Result<(), ConfigError> {
        let mut seen = Vec::new();
        for seed in 0..50 {
            let mut g = exact().jitter(0.15).seed(seed).build()?;
            for i in 0..5 {
                g.on_sample(i, Sample::ok(0, 100, 3));
            }
            let delay = g.next_min_rtt - 4;
            assert!((10_000 * MS..11_500 * MS).contains(&delay), "{delay}");
            seen.push(delay);
        }
        seen.sort_unstable();
        seen.dedup();
        assert!(seen.len() > 40, "jitter varies with the seed");
        // The same seed, the same delay.
        let delay = |seed| -> Result<Micros, ConfigError> {
            let mut g = exact().jitter(0.15).seed(seed).build()?;
            for i in 0..5 {
                g.on_sample(i, Sample::ok(0, 100, 3));
            }
            Ok(g.next_min_rtt)
        };
        assert_eq!(delay(9)?, delay(9)?);
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = [
            EnvoyGradient::builder().pinned_concurrency(2).build(),
            EnvoyGradient::builder().pinned_concurrency(1001).build(),
            EnvoyGradient::builder().percentile(0.0).build(),
            EnvoyGradient::builder().min_rtt_buffer(-0.1).build(),
            EnvoyGradient::builder().min_rtt_request_count(0).build(),
            EnvoyGradient::builder().jitter(1.5).build(),
            EnvoyGradient::builder()
                .min_rtt_interval(Duration::ZERO)
                .build(),
            EnvoyGradient::builder()
                .update_interval(Duration::ZERO)
                .build(),
            EnvoyGradient::builder().reservoir(0).build(),
        ];
        for result in bad {
            assert!(result.is_err(), "{result:?}");
        }
        assert_eq!(EnvoyGradient::default().limit(), 3);
    }
}

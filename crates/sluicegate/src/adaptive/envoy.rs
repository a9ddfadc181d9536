//! Envoy's adaptive concurrency gradient controller: measure the ideal latency by pinning the
//! limit low for a moment, then scale the limit by how far each window's latency is from it.

use std::time::Duration;

use crate::adaptive::reservoir::{Reservoir, SeededRng};
use crate::adaptive::sample::{
    Controller, DEFAULT_BACKOFF, LimitBounds, LossGate, Outcome, Sample, check_backoff,
    check_fraction, check_order, limit_setters, positive_micros,
};
use crate::clock::{Micros, micros_ceil};
use crate::error::ConfigError;

/// The gradient controller of Envoy's adaptive concurrency filter, made to hold up where
/// Envoy's own does not: it checks that the limit is used before growing it, backs off on
/// losses, and its first minRTT measurement turns nothing away.
///
/// **minRTT.** The ideal latency is measured by pinning the limit to `pinned_concurrency`
/// until `min_rtt_request_count` requests that started after the pin have been answered; the
/// `percentile` of their latencies is the new `min_rtt`, and the limit goes back to what it
/// was. The next measurement comes `min_rtt_interval` later plus a random delay of up to
/// `jitter` times that interval (so that a fleet of hosts does not pin at the same moment),
/// or as soon as the limit has sat at `min_limit` for 5 windows in a row (the `min_rtt` is
/// likely stale); in either case not before `min_rtt_request_count` answers have been heard
/// at the limit since the latest one and a window of them has updated it (a quiet service
/// would otherwise spend most of its answers pinned, and its limit never move).
///
/// The first measurement starts at construction and holds the limit at `initial_limit`
/// instead of the pin: nothing has been admitted yet, so the first requests see the service
/// as unloaded as the initial limit lets them, and pinning lower would only turn traffic away
/// for as long as `min_rtt_request_count` answers take at the pin (seconds, on a slow
/// service). A first `min_rtt` inflated by a queue is corrected by the next rule: a window of
/// at least `min_rtt_request_count` answers whose summary is below `min_rtt` lowers it to
/// that summary (the ideal latency is never above a latency the service was seen to keep;
/// smaller windows wander, and the lowest of their wanderings would ratchet it down).
///
/// **Limit.** Outside a measurement, the answered latencies of each `update_interval` are
/// summarized by their `percentile` (`sample_rtt`), and with
/// `gradient = clamp(min_rtt * (1 + min_rtt_buffer) / sample_rtt, 0.5, 2)`:
/// `limit = floor(limit * gradient + sqrt(limit * gradient))`, kept within bounds. The square
/// root is the headroom that keeps the limit probing upward while latency holds. The limit
/// grows only when at least half of it was in flight at some point of the window and the
/// window saw no loss (Envoy grows it regardless, to its maximum whenever the load is below
/// the service's capacity); it shrinks whenever latency says so.
///
/// **Losses.** A dropped request (a rejection, however fast) is overload: it cuts the limit
/// (or the limit to restore, during a measurement) by `backoff_ratio` at once, whatever the
/// in-flight count, at most once per round trip (a loss of a request that started before the
/// latest cut does not cut again), and its latency is never recorded. A timeout counts
/// through its latency, as in Envoy: it is at least the caller's timeout, a lower bound of
/// the service's, so it never flatters the service, and on a long-tailed service some
/// answers time out at any load (backing off on each would starve it).
///
/// A measurement that hears `min_rtt_request_count` losses before as many answers ends
/// without a new minRTT (a failing service gives nothing to measure, and a limit held at the
/// pin would never reach `min_limit`). A window with no answers leaves the limit to the
/// losses. Only requests that started after
/// the latest pin count towards the measurement. Envoy runs timers; here the windows close
/// on the first sample at or after their end (the limit cannot matter before a request asks
/// for it). Latencies are summarized from a bounded reservoir of each window (Envoy uses a
/// histogram).
///
/// Defaults, and why: limits 3 / 3 / 1000 and `pinned_concurrency` 3 (Envoy's: 3 is enough
/// to see a service's latency without queueing at it); the pin does not follow `min_limit`
/// (it is 3, or the nearest bound if 3 lies outside them). `percentile` 0.5, `min_rtt_buffer`
/// 0.25, `min_rtt_request_count` 50 and `jitter` 0.15 are Envoy's. Envoy requires the two
/// intervals; `min_rtt_interval` 60 s and `update_interval` 100 ms are those of its
/// documented example. `backoff_ratio` 0.9: AIMD's. Reservoir 1000 samples, `seed` 0.
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
    backoff: f64,
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
    /// The most permits in flight any sample of the window found.
    max_in_flight: u32,
    /// Whether the window saw a loss (then it does not grow).
    window_loss: bool,
    /// Losses heard during the measurement.
    measure_losses: u64,
    /// Answers heard since the latest measurement ended.
    answers_since: u64,
    /// Whether a window has moved the limit since the latest measurement ended.
    updated_since: bool,
    losses: LossGate,
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
    backoff: f64,
    reservoir: usize,
    seed: u64,
}

const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(3, 3, 1000);

/// Envoy's default pin (`min_concurrency`).
const DEFAULT_PIN: u32 = 3;

/// Windows in a row at the minimum limit that start a new minRTT measurement.
const WINDOWS_AT_MIN: u32 = 5;

impl EnvoyGradientBuilder {
    limit_setters!();

    /// The limit while minRTT is measured, within `[min_limit, max_limit]` (default 3, or the
    /// nearest bound if 3 lies outside them).
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

    /// What the limit is multiplied by on a loss, in `[0.5, 1)`.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff = ratio;
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
        let pinned = self
            .pinned
            .unwrap_or(DEFAULT_PIN.clamp(bounds.min(), bounds.max()));
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
        check_backoff(self.backoff)?;
        positive_micros("min_rtt_interval", self.min_rtt_interval)?;
        positive_micros("update_interval", self.update_interval)?;
        if self.reservoir == 0 {
            return Err(ConfigError::invalid("reservoir", 0, "must be at least 1"));
        }
        Ok(self.assemble(bounds, pinned))
    }

    /// The controller from checked parameters, measuring its first minRTT at the initial limit.
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
            backoff: self.backoff,
            limit: bounds.initial(),
            deferred: bounds.initial(),
            measuring: true,
            epoch: 0,
            min_rtt: None,
            window_end: 0,
            next_min_rtt: 0,
            at_min_windows: 0,
            max_in_flight: 0,
            window_loss: false,
            measure_losses: 0,
            answers_since: 0,
            updated_since: false,
            losses: LossGate::default(),
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
            backoff: DEFAULT_BACKOFF,
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

    /// The limit while minRTT is measured (after the first measurement, which holds the
    /// initial limit).
    pub fn pinned_concurrency(&self) -> u32 {
        self.pinned
    }

    /// The bounds the limit stays within (outside a measurement; during one it is
    /// `pinned_concurrency`, also within them).
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }

    fn start_measuring(&mut self, now: Micros) {
        // A quiet service would otherwise spend most of its answers pinned.
        if self.measuring || !self.may_measure() {
            return;
        }
        self.deferred = self.limit;
        self.limit = self.pinned;
        self.samples.clear();
        self.epoch = now;
        self.measuring = true;
        self.at_min_windows = 0;
        self.max_in_flight = 0;
        self.window_loss = false;
        self.measure_losses = 0;
    }

    fn finish_measuring(&mut self, now: Micros) {
        if let Some(min_rtt) = self.samples.percentile(self.percentile) {
            self.min_rtt = Some(min_rtt);
        }
        self.measure_losses = 0;
        self.answers_since = 0;
        self.updated_since = false;
        self.samples.clear();
        self.measuring = false;
        self.limit = self.deferred;
        self.at_min_windows = 0;
        self.max_in_flight = 0;
        self.window_loss = false;
        self.next_min_rtt = now.saturating_add(self.jittered_interval());
        self.window_end = now.saturating_add(self.update_interval);
    }

    /// `min_rtt_interval` plus up to `jitter` of it (Envoy: `interval + random % ceil(interval
    /// * jitter)`).
    fn jittered_interval(&mut self) -> Micros {
        let range = (self.min_rtt_interval as f64 * self.jitter).ceil() as u64;
        self.min_rtt_interval.saturating_add(self.rng.below(range))
    }

    /// Whether the limit has had its turn since the latest measurement: as many answers as a
    /// measurement waits for, and a window that moved the limit.
    fn may_measure(&self) -> bool {
        self.answers_since >= self.request_count && self.updated_since
    }

    fn close_window(&mut self, now: Micros) {
        self.window_end = now.saturating_add(self.update_interval);
        let used = 2 * u64::from(std::mem::take(&mut self.max_in_flight)) >= u64::from(self.limit);
        let loss = std::mem::take(&mut self.window_loss);
        let seen = self.samples.seen();
        let Some(sample_rtt) = self.samples.percentile(self.percentile) else {
            return;
        };
        self.samples.clear();
        self.updated_since = true;
        // Only a window of as many answers as a measurement trusts: the percentile of a few
        // wanders, and the lowest of such wanderings would ratchet minRTT down.
        let min_rtt = match self.min_rtt {
            Some(min_rtt) if seen < self.request_count => min_rtt,
            Some(min_rtt) => min_rtt.min(sample_rtt),
            None => sample_rtt,
        };
        self.min_rtt = Some(min_rtt);
        let buffered = min_rtt as f64 * (1.0 + self.buffer);
        let gradient = (buffered / sample_rtt as f64).clamp(0.5, 2.0);
        let scaled = f64::from(self.limit) * gradient;
        let mut next = self.bounds.clamp((scaled + scaled.sqrt()) as u64);
        if next > self.limit && (loss || !used) {
            next = self.limit;
        }
        let at_min = self.limit == self.bounds.min() && next == self.bounds.min();
        self.limit = next;
        self.at_min_windows = if at_min { self.at_min_windows + 1 } else { 0 };
        if self.at_min_windows >= WINDOWS_AT_MIN {
            self.start_measuring(now);
        }
    }

    /// A loss: the limit, or the one to restore after a measurement, times `backoff_ratio`.
    fn cut(&mut self) {
        self.window_loss = true;
        let limit = if self.measuring {
            &mut self.deferred
        } else {
            &mut self.limit
        };
        *limit = self.bounds.clamp((f64::from(*limit) * self.backoff) as u64);
    }
}

impl Default for EnvoyGradient {
    fn default() -> Self {
        EnvoyGradient::builder().assemble(DEFAULT_BOUNDS, DEFAULT_PIN)
    }
}

impl Controller for EnvoyGradient {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        if !self.measuring {
            // The two timers in the order they would have fired; a measurement that is due
            // but may not start yet (too few answers since the last) lets windows close.
            let measure = now >= self.next_min_rtt && self.may_measure();
            if now >= self.window_end && (self.window_end <= self.next_min_rtt || !measure) {
                self.close_window(now);
            }
            if !self.measuring && now >= self.next_min_rtt {
                self.start_measuring(now);
            }
        }
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        if sample.outcome == Outcome::Dropped {
            if self.losses.cuts(now, &sample) {
                self.cut();
            }
            if self.measuring {
                // A service that only fails gives nothing to measure: after as many losses
                // as answers were awaited, the measurement ends, keeping the old minRTT.
                self.measure_losses += 1;
                if self.measure_losses >= self.request_count {
                    self.finish_measuring(now);
                }
            }
            return self.limit;
        }
        if !self.measuring {
            self.answers_since = self.answers_since.saturating_add(1);
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
        // The first measurement holds the initial limit, not the pin.
        assert_eq!(g.limit(), 10);
        assert!(g.measuring_min_rtt());
        for (i, rtt) in [100, 120, 80, 110, 90].into_iter().enumerate() {
            let now = (i as Micros + 1) * MS;
            g.on_sample(now, Sample::ok(now - rtt, rtt, 3));
        }
        // The median of 80, 90, 100, 110, 120; the limit stays at the initial 10.
        assert_eq!(g.min_rtt(), Some(100));
        assert!(!g.measuring_min_rtt());
        assert_eq!(g.limit(), 10);
        // Measurement ended at 5 ms: windows end at 105 ms, 205 ms, ...; the next one at
        // 10.005 s. Every sample finds 10 in flight: the limit is in use.
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
        assert_eq!(g.on_sample(305 * MS, ok(305 * MS, 140)), 7);
        // 125 / 140: 6.25 + 2.5 = 8.75 -> 8.
        assert_eq!(g.on_sample(405 * MS, ok(405 * MS, 125)), 8);
        // A fast rejection, nothing in flight: 8 * 0.9 = 7.2 -> 7 at once, and it is not
        // recorded.
        assert_eq!(
            g.on_sample(450 * MS, Sample::dropped(450 * MS - 1, 1, 1)),
            7
        );
        // 125 / 125 = 1 would grow it to 7 + 2.65 -> 9, but the window saw a loss.
        assert_eq!(g.on_sample(505 * MS, ok(505 * MS, 80)), 7);
        for _ in 0..4 {
            g.on_sample(550 * MS, ok(550 * MS, 80));
        }
        // A window of 5 answers (as many as a measurement trusts) whose median is under
        // minRTT lowers it: min_rtt = 80, gradient 100 / 80 = 1.25: 8.75 + 2.96 -> 11.
        assert_eq!(g.on_sample(605 * MS, ok(605 * MS, 125)), 11);
        assert_eq!(g.min_rtt(), Some(80));

        // At 10.005 s the window closes (100 / 125 = 0.8: 8.8 + 2.97 -> 11), then the limit
        // is pinned for a new measurement; this sample started before the pin and is ignored.
        let t = 10_005 * MS;
        assert_eq!(g.on_sample(t, ok(t, 125)), 3);
        assert!(g.measuring_min_rtt());
        // Only samples started after the pin count.
        g.on_sample(t + 1, Sample::ok(t - 1, 2, 3));
        for i in 0..4 {
            assert_eq!(g.on_sample(t + 10 + i, Sample::ok(t, 200, 3)), 3);
        }
        assert_eq!(g.on_sample(t + 20, Sample::ok(t, 200, 3)), 11);
        assert_eq!(g.min_rtt(), Some(200));
        Ok(())
    }

    #[test]
    fn grows_only_while_the_limit_is_used() -> Result<(), ConfigError> {
        let mut g = exact().build()?;
        for i in 1..=5 {
            g.on_sample(i, Sample::ok(0, 100, 3));
        }
        // Fast, but at most 4 of 10 in flight: no growth (Envoy's would go to 16).
        let mut now = 5;
        for _ in 0..3 {
            now += 100 * MS;
            assert_eq!(g.on_sample(now, Sample::ok(now - 100, 100, 4)), 10);
        }
        // Slow, though unused: it shrinks all the same, 10 * 0.5 = 5 + 2.24 -> 7.
        now += 100 * MS;
        g.on_sample(now, Sample::ok(now - 1000, 1000, 4));
        now += 100 * MS;
        assert_eq!(g.on_sample(now, Sample::ok(now - 1000, 1000, 4)), 7);
        Ok(())
    }

    #[test]
    fn a_measurement_that_hears_only_losses_ends() -> Result<(), ConfigError> {
        let mut g = exact().build()?;
        // Each loss cuts the limit to restore (10 -> 9 -> 8 -> 7 -> 6 -> 5); after 5 of them
        // (the answers the measurement waits for) it ends, with no minRTT to show.
        for i in 1..=5 {
            g.on_sample(i * MS, Sample::dropped(i * MS - 1, 1, 3));
        }
        assert!(!g.measuring_min_rtt());
        assert_eq!((g.limit(), g.min_rtt()), (5, None));
        Ok(())
    }

    #[test]
    fn the_pin_does_not_follow_the_minimum() -> Result<(), ConfigError> {
        let pin = |b: EnvoyGradientBuilder| b.build().map(|g| g.pinned_concurrency());
        assert_eq!(pin(EnvoyGradient::builder().min_limit(1))?, 3);
        assert_eq!(
            pin(EnvoyGradient::builder().min_limit(5).initial_limit(5))?,
            5
        );
        assert_eq!(
            pin(EnvoyGradient::builder()
                .min_limit(1)
                .initial_limit(1)
                .max_limit(2))?,
            2
        );
        assert_eq!(pin(EnvoyGradient::builder().pinned_concurrency(7))?, 7);
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
            EnvoyGradient::builder().backoff_ratio(1.0).build(),
        ];
        for result in bad {
            assert!(result.is_err(), "{result:?}");
        }
        assert_eq!(EnvoyGradient::default().limit(), 3);
    }
}

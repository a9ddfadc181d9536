//! A latency target: keep a window's p90 or p99 under it, as TCP Reno keeps losses away.

use std::time::Duration;

use crate::adaptive::reservoir::Reservoir;
use crate::adaptive::sample::{
    Controller, DEFAULT_BACKOFF, LimitBounds, LossGate, Outcome, Sample, check_backoff,
    check_fraction, limit_setters, positive_micros,
};
use crate::clock::Micros;
use crate::error::ConfigError;

/// A percentile of each window's latency held under a target.
///
/// Answered latencies are kept per `window` (which closes on the first sample at or after its
/// end; that sample opens the next) in a bounded uniform sample (`reservoir` values,
/// reservoir sampling seeded by `seed`). A window with fewer than `min_samples` answers keeps
/// collecting until it has them, or for 10 windows' time, and is then read on what it has
/// (thrown away, at a low limit no window would ever be read again). At the end of each
/// window, with `p` its `percentile` latency:
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
/// **The target.** Either fixed ([`Percentile::builder`]), or, by default, relative
/// ([`Percentile::relative_builder`], [`Percentile::default`]): `target_multiple` times the
/// lowest median of 9 windows in a row (until there are 9, the median of those there are):
/// the service's own latency at the lightest load it was seen under, so that it runs with
/// no tuning. Only a window of at least
/// `2 / (1 - percentile)` answers (200 for a p99, at most 1000) counts towards the baseline:
/// the p99 of fewer runs low (of 10 it is their maximum) and wanders far on a long tail. A
/// relative target is re-based when the limit misses it at `min_limit`: no limit can meet it
/// then, so the service itself is slower than it was, and that window's latency becomes the
/// new lowest. Until a window has set it, a relative target is met by any latency (the limit
/// then follows losses and demand alone).
///
/// **Losses.** A dropped request (a rejection, however fast) is overload: it cuts the limit
/// by `backoff_ratio` at once, whatever the in-flight count, at most once per round trip (a
/// loss of a request that started before the latest cut does not cut again), and its latency
/// is not kept. A timeout counts through its latency (at least the caller's timeout, which
/// a long tail reaches at any load).
///
/// Defaults, and why: `percentile` 0.99 (the tail is what callers feel); `target_multiple` 2
/// (a queue may double the tail the service shows unloaded, and no more: on an M/M/c service
/// that keeps the workers busy at overload); `window` 1 s and `min_samples` 10 (a p99 needs
/// samples; fewer than 10 in a second say little); `reservoir` 1000 (bounded memory, exact up
/// to 1000 answers a window); limits 1 / 10 / 1000 (doubling reaches any limit within a few
/// windows); `backoff_ratio` 0.9 (AIMD's); `seed` 0.
#[derive(Debug, Clone)]
pub struct Percentile {
    bounds: LimitBounds,
    percentile: f64,
    target: Target,
    /// The lowest window latency read, for a relative target.
    lowest: Option<Micros>,
    /// The latest windows' latencies that may set `lowest` (their median does).
    recent: [Option<Micros>; RECENT],
    backoff: f64,
    losses: LossGate,
    window: Micros,
    min_samples: u64,
    limit: u32,
    /// When the current window opened and when it may close (`None` before any sample).
    open: Option<(Micros, Micros)>,
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
    target: TargetSpec,
    backoff: f64,
    percentile: f64,
    window: Duration,
    min_samples: u32,
    reservoir: usize,
    seed: u64,
}

/// The target as built: fixed, or a multiple of the lowest window latency.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Fixed(Micros),
    Relative(f64),
}

/// The target as given to the builder.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TargetSpec {
    Fixed(Duration),
    Relative(f64),
}

/// How many windows a window short of `min_samples` answers collects before it is read on
/// what it has.
const MAX_COLLECT_WINDOWS: u64 = 10;

/// How many windows' latencies (each of enough answers) make one candidate for the lowest.
const RECENT: usize = 9;

/// How many times the lowest window latency a relative target allows.
const DEFAULT_MULTIPLE: f64 = 2.0;

impl PercentileBuilder {
    limit_setters!();

    /// A fixed target: the `percentile` latency held at or under `target` (replaces a
    /// `target_multiple`).
    pub fn target(mut self, target: Duration) -> Self {
        self.target = TargetSpec::Fixed(target);
        self
    }

    /// A relative target: `multiple` (more than 1) times the lowest `percentile` latency of
    /// any window read (replaces a fixed `target`).
    pub fn target_multiple(mut self, multiple: f64) -> Self {
        self.target = TargetSpec::Relative(multiple);
        self
    }

    /// What the limit is multiplied by on a loss, in `[0.5, 1)`.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff = ratio;
        self
    }

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
        let target = match self.target {
            TargetSpec::Fixed(target) => Target::Fixed(positive_micros("target", target)?),
            TargetSpec::Relative(multiple) => {
                if !(multiple.is_finite() && multiple > 1.0) {
                    return Err(ConfigError::invalid(
                        "target_multiple",
                        multiple,
                        "must be more than 1",
                    ));
                }
                Target::Relative(multiple)
            }
        };
        check_backoff(self.backoff)?;
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
            lowest: None,
            recent: [None; RECENT],
            backoff: self.backoff,
            losses: LossGate::default(),
            window,
            min_samples: self.min_samples.into(),
            limit: bounds.initial(),
            open: None,
            max_in_flight: 0,
            samples: Reservoir::new(self.reservoir, self.seed),
            last_good: None,
            slow_start_until: bounds.max(),
        })
    }
}

impl Percentile {
    /// A builder holding the `percentile` latency at or under a fixed `target`, other
    /// parameters at their defaults.
    pub fn builder(target: Duration) -> PercentileBuilder {
        Percentile::relative_builder().target(target)
    }

    /// A builder with a relative target (twice the lowest window latency), every parameter
    /// at its default.
    pub fn relative_builder() -> PercentileBuilder {
        PercentileBuilder {
            min: 1,
            initial: 10,
            max: 1000,
            target: TargetSpec::Relative(DEFAULT_MULTIPLE),
            backoff: DEFAULT_BACKOFF,
            percentile: 0.99,
            window: Duration::from_secs(1),
            min_samples: 10,
            reservoir: 1000,
            seed: 0,
        }
    }

    /// The latency target in force, in microseconds: the fixed one, or the relative one as
    /// it stands (`Micros::MAX` before the first window is read).
    pub fn target(&self) -> Micros {
        match self.target {
            Target::Fixed(target) => target,
            Target::Relative(multiple) => self
                .lowest
                .or_else(|| self.provisional())
                .map_or(Micros::MAX, |lowest| {
                    (lowest as f64 * multiple).min(Micros::MAX as f64) as Micros
                }),
        }
    }

    /// The bounds the limit stays within.
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }

    /// The answers a window needs to set a relative target's baseline: `min_samples`, and
    /// enough for its percentile to lie well inside them, `2 / (1 - percentile)` (200 for a
    /// p99, at most 1000). The p99 of fewer runs low (of 10 it is their maximum) and wanders
    /// far on a long tail.
    fn needed_samples(&self) -> u64 {
        if let Target::Fixed(_) = self.target {
            return self.min_samples;
        }
        let needed = (2.0 / (1.0 - self.percentile)).ceil();
        if needed.is_finite() {
            (needed as u64).clamp(self.min_samples, 1000)
        } else {
            1000
        }
    }

    /// The median of the latest windows' latencies, once there are `RECENT` of them.
    fn recent_median(&self) -> Option<Micros> {
        let mut values = [0; RECENT];
        for (value, recent) in values.iter_mut().zip(&self.recent) {
            *value = (*recent)?;
        }
        values.sort_unstable();
        Some(values[RECENT / 2])
    }

    /// Until `RECENT` windows have set the baseline: the median of those there are (the
    /// lower of the middle two), so that the limit has a target from the first window on.
    fn provisional(&self) -> Option<Micros> {
        let mut values: Vec<Micros> = self.recent.iter().flatten().copied().collect();
        values.sort_unstable();
        values.get(values.len().saturating_sub(1) / 2).copied()
    }

    fn close_window(&mut self) {
        let max_in_flight = std::mem::take(&mut self.max_in_flight);
        let seen = self.samples.seen();
        let latency = self.samples.percentile(self.percentile);
        self.samples.clear();
        let Some(latency) = latency else {
            return;
        };
        let limit = self.limit;
        let enough = seen >= self.needed_samples();
        if let Target::Relative(_) = self.target {
            // Only once everything in the window was admitted at the minimum: a queue left
            // from a higher limit drains through the first windows at the minimum.
            let rebase = limit == self.bounds.min()
                && max_in_flight <= self.bounds.min()
                && latency > self.target();
            if enough {
                self.recent.rotate_right(1);
                self.recent[0] = Some(latency);
            }
            // The median of the latest windows, not one window: a long tail makes a single
            // window's percentile wander, and the lowest of such wanderings runs low.
            let median = self.recent_median();
            if rebase {
                self.lowest = Some(latency);
                self.recent = [None; RECENT];
            } else if let Some(median) = median.filter(|m| self.lowest.is_none_or(|l| *m < l)) {
                self.lowest = Some(median);
            }
        }
        if latency > self.target() {
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

impl Default for Percentile {
    /// A relative target, every parameter at its default.
    fn default() -> Self {
        let bounds = LimitBounds::known(1, 10, 1000);
        Percentile {
            bounds,
            percentile: 0.99,
            target: Target::Relative(DEFAULT_MULTIPLE),
            lowest: None,
            recent: [None; RECENT],
            backoff: DEFAULT_BACKOFF,
            losses: LossGate::default(),
            window: 1_000_000,
            min_samples: 10,
            limit: bounds.initial(),
            open: None,
            max_in_flight: 0,
            samples: Reservoir::new(1000, 0),
            last_good: None,
            slow_start_until: bounds.max(),
        }
    }
}

impl Controller for Percentile {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        let (opened, end) = *self
            .open
            .get_or_insert((now, now.saturating_add(self.window)));
        if now >= end || now < opened {
            let enough = self.samples.seen() >= self.min_samples;
            // A clock that went back before the window opened counts as a stale window.
            let stale = now
                .checked_sub(opened)
                .is_none_or(|age| age >= self.window.saturating_mul(MAX_COLLECT_WINDOWS));
            if enough || stale {
                self.close_window();
                self.open = Some((now, now.saturating_add(self.window)));
            }
        }
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        if sample.outcome == Outcome::Dropped {
            if self.losses.cuts(now, &sample) {
                self.limit = self
                    .bounds
                    .clamp((f64::from(self.limit) * self.backoff) as u64);
            }
            return self.limit;
        }
        self.samples.push(sample.rtt);
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
                "9 answers are too few: the window keeps collecting",
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
        // With its 10th answer the window is read at the next sample: fast, and 18 in
        // flight: +1.
        assert_eq!(p.on_sample(end + SECOND, Sample::ok(end, 0, 0)), 19);
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

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
/// reservoir sampling seeded by `seed`). A window is read once its verdict is in and it has
/// at least `min_samples` answers: in slow start (below the limit it may slow-start to) at
/// once; at or above it, where the limit probes the edge, once it has `2 / (1 - percentile)`
/// answers (200 for a p99; at most 1000), or more answers over the target than the
/// percentile allows in that many (3 of them for a p99: it misses whatever comes). Until then
/// it keeps collecting, for at most 10 windows' time, and is then read on what it has
/// (thrown away, at a low limit no window would ever be read again). Read on fewer answers, a
/// p99 is their slowest one, an easier bar than the percentile: after a service falls to
/// one worker (50 answers a second) a limit whose p99 is over the target passes about half
/// such windows, and the p99 of the answers settles over the target. At the end of each
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
/// the p99 of fewer runs low (of 10 it is their maximum) and wanders far on a long tail.
/// Windows too short for that (a service answering fewer than 200 a `window`) count
/// together: their answers are kept until they are that many, and read as one window, so
/// that a slow service gets a target too. A
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
/// that keeps the workers busy at overload); `window` 1 s and `min_samples` 10 (fewer than 10
/// answers say little, even that the target is missed); `reservoir` 1000 (bounded memory, exact up
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
    /// The answers of windows too short to count towards `lowest` alone (copied in as each
    /// closes), until together they are enough: without them a service answering fewer than enough a window would
    /// never get a relative target, and the limit would only grow.
    short_windows: Reservoir,
    backoff: f64,
    losses: LossGate,
    window: Micros,
    min_samples: u64,
    limit: u32,
    /// When the current window opened and when it may close (`None` before any sample).
    open: Option<(Micros, Micros)>,
    max_in_flight: u32,
    samples: Reservoir,
    /// Answers of the current window slower than `in_force`.
    over: u64,
    /// The target as it stood when the current window opened.
    in_force: Micros,
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

/// The most answers a window needs to count towards the baseline (a percentile near 1 would
/// otherwise ask for more than a reservoir keeps exactly).
const MAX_ENOUGH_SAMPLES: usize = 1000;

/// How many windows' latencies (each of enough answers) make one candidate for the lowest.
const RECENT: usize = 9;

/// How many times the lowest window latency a relative target allows.
const DEFAULT_MULTIPLE: f64 = 2.0;
const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(1, 10, 1000);
const DEFAULT_WINDOW_MICROS: Micros = 1_000_000;

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

    /// The fewest samples a window needs to be read as a miss, and to pass (at least 1; a
    /// pass also needs `1 / (1 - percentile)` of them).
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
        Ok(self.assemble(bounds, target, window))
    }

    /// The controller of parameters already checked.
    fn assemble(self, bounds: LimitBounds, target: Target, window: Micros) -> Percentile {
        let mut built = Percentile {
            bounds,
            percentile: self.percentile,
            target,
            lowest: None,
            recent: [None; RECENT],
            short_windows: Reservoir::new(MAX_ENOUGH_SAMPLES, self.seed),
            backoff: self.backoff,
            losses: LossGate::default(),
            window,
            min_samples: self.min_samples.into(),
            limit: bounds.initial(),
            open: None,
            max_in_flight: 0,
            samples: Reservoir::new(self.reservoir, self.seed),
            over: 0,
            in_force: Micros::MAX,
            last_good: None,
            slow_start_until: bounds.max(),
        };
        built.in_force = built.target();
        built
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
            min: DEFAULT_BOUNDS.min(),
            initial: DEFAULT_BOUNDS.initial(),
            max: DEFAULT_BOUNDS.max(),
            target: TargetSpec::Relative(DEFAULT_MULTIPLE),
            backoff: DEFAULT_BACKOFF,
            percentile: 0.99,
            window: Duration::from_micros(DEFAULT_WINDOW_MICROS),
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

    /// The answers a window needs for its percentile to lie well inside them, `2 / (1 -
    /// percentile)` (200 for a p99; at least `min_samples`, at most 1000): to set a relative
    /// target's baseline, and to pass at the edge. The nearest-rank p99 of fewer runs low (of
    /// 50 it is their slowest, which a limit whose p99 is over the target keeps under it in
    /// about half its windows) and wanders far on a long tail.
    fn enough_samples(&self) -> u64 {
        // Less a hair, so that 2 / (1 - 0.9) = 20.000000000000004 needs 20, not 21.
        let needed = (2.0 / (1.0 - self.percentile) - 1e-9).ceil();
        if needed.is_finite() {
            (needed as u64).clamp(self.min_samples, MAX_ENOUGH_SAMPLES as u64)
        } else {
            1000
        }
    }

    /// Whether the window's verdict is in (it has at least `min_samples` answers): in slow
    /// start, below the last good limit, at once (a doubling wasted costs one window); at or
    /// above it, where the limit probes the edge, once it holds enough answers for its
    /// percentile to be more than its slowest few ([`Percentile::enough_samples`]), or already
    /// more answers over the target than the percentile allows in that many (it misses
    /// whatever comes).
    fn decided(&self) -> bool {
        let seen = self.samples.seen();
        if seen < self.min_samples {
            return false;
        }
        let needed = self.enough_samples();
        // As the nearest rank reads them: of `needed` answers, those above its rank.
        let allowed = needed.saturating_sub((self.percentile * needed as f64).ceil() as u64);
        self.limit < self.slow_start_until || seen >= needed || self.over > allowed
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
        self.read_window();
        self.in_force = self.target();
    }

    fn read_window(&mut self) {
        let max_in_flight = std::mem::take(&mut self.max_in_flight);
        let seen = self.samples.seen();
        let latency = self.samples.percentile(self.percentile);
        let short = seen < self.enough_samples();
        if short && matches!(self.target, Target::Relative(_)) {
            for &rtt in self.samples.kept() {
                self.short_windows.push(rtt);
            }
        }
        self.samples.clear();
        self.over = 0;
        let Some(latency) = latency else {
            return;
        };
        let limit = self.limit;
        let enough = !short;
        if let Target::Relative(_) = self.target {
            // Only once everything in the window was admitted at the minimum: a queue left
            // from a higher limit drains through the first windows at the minimum.
            let rebase = limit == self.bounds.min()
                && max_in_flight <= self.bounds.min()
                && latency > self.target();
            let counted = if enough {
                self.short_windows.clear();
                Some(latency)
            } else if self.short_windows.seen() >= self.enough_samples() {
                let together = self.short_windows.percentile(self.percentile);
                self.short_windows.clear();
                together
            } else {
                None
            };
            if let Some(counted) = counted {
                self.recent.rotate_right(1);
                self.recent[0] = Some(counted);
            }
            // The median of the latest windows, not one window: a long tail makes a single
            // window's percentile wander, and the lowest of such wanderings runs low.
            let median = self.recent_median();
            if rebase {
                // Short windows kept from before the service slowed would bring its old
                // latency back into the baseline.
                self.lowest = Some(latency);
                self.recent = [None; RECENT];
                self.short_windows.clear();
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
        Percentile::relative_builder().assemble(
            DEFAULT_BOUNDS,
            Target::Relative(DEFAULT_MULTIPLE),
            DEFAULT_WINDOW_MICROS,
        )
    }
}

impl Controller for Percentile {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        let (opened, end) = *self
            .open
            .get_or_insert((now, now.saturating_add(self.window)));
        if now >= end || now < opened {
            let enough = self.decided();
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
        if sample.rtt > self.in_force {
            self.over += 1;
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
    fn a_service_answering_few_a_window_still_gets_a_target() {
        // 50 answers a second, 20 ms each, at most 4 in flight: no one window holds the 200
        // answers a p99 baseline needs, so windows count together.
        let mut p = Percentile::default();
        let mut now = 0;
        for _ in 0..(10 * 50) {
            now += 20 * MS;
            p.on_sample(now, Sample::ok(now - 20 * MS, 20 * MS, 4));
        }
        assert_eq!(
            p.target(),
            40 * MS,
            "twice the p99 of the short windows together"
        );
        // A queue that triples latency is then a miss, and the limit comes down.
        let before = p.limit();
        for _ in 0..(3 * 50) {
            now += 20 * MS;
            p.on_sample(now, Sample::ok(now - 60 * MS, 60 * MS, before));
        }
        assert!(
            p.limit() < before,
            "limit {} after misses, was {before}",
            p.limit()
        );
    }

    #[test]
    fn follows_the_rule_step_by_step() -> Result<(), ConfigError> {
        let mut p = Percentile::builder(Duration::from_millis(10))
            .percentile(0.9)
            .initial_limit(4)
            .max_limit(100)
            .build()?;
        let fast = [5 * MS; 20];
        // p90 of 20 is the 18th smallest: three slow samples out of 20 make it slow.
        let mut slow = [5 * MS; 20];
        for i in [3, 7, 11] {
            slow[i] = 20 * MS;
        }
        // Exactly on target is within it.
        let on_target = [10 * MS; 20];
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
            (
                &fast[..10],
                9,
                17,
                "slow start reads 10 answers: 9 -> 18, held at 17",
            ),
            (
                &fast[..10],
                17,
                17,
                "at the edge 10 answers are too few (a p90 needs 20): the window keeps collecting",
            ),
            (&fast[..10], 17, 18, "20 answers: +1"),
            (&fast, 8, 18, "2 * 8 < 18: app-limited, no growth"),
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
        // At the edge, 2 slow answers of 10: 20 answers with 2 over would still pass.
        for i in 0..10 {
            let rtt = if i < 2 { 20 * MS } else { 5 * MS };
            let after = p.on_sample(end + i, Sample::ok(end, rtt, 18));
            if i == 0 {
                assert_eq!(after, 18, "the last window");
            }
        }
        assert_eq!(p.on_sample(end + SECOND, Sample::ok(end, 20 * MS, 18)), 18);
        // A third: a miss whatever comes, read at the next sample.
        assert_eq!(
            p.on_sample(end + SECOND + 1, Sample::ok(end, 5 * MS, 18)),
            9
        );
        Ok(())
    }

    #[test]
    fn a_miss_after_a_miss_halves_again() -> Result<(), ConfigError> {
        let mut p = Percentile::builder(Duration::from_millis(10))
            .percentile(0.5)
            .min_samples(1)
            .initial_limit(64)
            .build()?;
        // Four answers a window (what a median needs at the edge, 2 / (1 - 0.5)); the first
        // of each window closes the previous one.
        let mut window = |at: Micros, sample: Sample| {
            let limit = p.on_sample(at, sample);
            for i in 1..4 {
                p.on_sample(at + i, sample);
            }
            limit
        };
        let slow = Sample::ok(0, 50 * MS, 64);
        let fast = Sample::ok(0, MS, 16);
        window(0, slow);
        assert_eq!(window(SECOND, slow), 32);
        assert_eq!(window(2 * SECOND, slow), 16);
        // No window met the target in between, so each miss caps slow start at the halved
        // limit: the third slow window closes at 8, and the next, good, one adds one.
        assert_eq!(window(3 * SECOND, fast), 8);
        assert_eq!(window(4 * SECOND, fast), 9);
        Ok(())
    }

    #[test]
    fn at_the_edge_a_window_waits_for_enough_answers() -> Result<(), ConfigError> {
        // 50 answers a second, as from one worker of 20 ms.
        let mut p = Percentile::builder(Duration::from_millis(10))
            .initial_limit(8)
            .max_limit(100)
            .build()?;
        let mut now: Micros = 0;
        let mut second = |p: &mut Percentile, slow: usize, in_flight: u32| {
            let mut limits = Vec::new();
            for i in 0..50 {
                let rtt = if i < slow { 50 * MS } else { MS };
                limits.push(p.on_sample(now, Sample::ok(now, rtt, in_flight)));
                now += SECOND / 50;
            }
            limits
        };
        // Slow start: a window is read on its 50 answers; one slow one is their p99, a miss.
        second(&mut p, 1, 8);
        assert_eq!(second(&mut p, 0, 8)[0], 4, "halved; 4 is now the edge");
        // At the edge a p99 needs 200 answers: 50 fast ones are not yet a pass, nor one
        // slow answer in 100, then two in 150, a miss (200 with 2 over still pass).
        for slow in [1, 1, 0] {
            assert!(second(&mut p, slow, 4).iter().all(|l| *l == 4));
        }
        // 200 answers, 2 of them over (the p99 is the third slowest): a pass, +1.
        assert_eq!(second(&mut p, 0, 4)[0], 5);
        // The window is due; a third slow answer makes it a miss whatever comes, read at
        // the next answer.
        let limits = second(&mut p, 3, 5);
        assert_eq!((limits[2], limits[3]), (5, 2));
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

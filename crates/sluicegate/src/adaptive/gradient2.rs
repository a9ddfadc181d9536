//! Gradient2: compare the latency now with a no-load estimate, and shrink the limit by their
//! ratio when the short term runs slower.

use crate::adaptive::sample::{
    Controller, DEFAULT_BACKOFF, LimitBounds, LossGate, Outcome, Sample, check_backoff,
    check_fraction, limit_setters, whole,
};
use crate::clock::Micros;
use crate::error::ConfigError;

/// How far the limit may grow past itself while no queue shows: the growth per round trip
/// (at least 1 whatever is set, or the limit could never grow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueHeadroom {
    /// Always this many.
    Fixed(u32),
    /// `floor(sqrt(limit))`, but at least `at_least`: grows with the limit, more slowly than it.
    SquareRoot {
        /// The least headroom, for small limits.
        at_least: u32,
    },
}

impl QueueHeadroom {
    /// The headroom at `limit`, at least 1: with none the limit could never grow.
    fn at(self, limit: u32) -> f64 {
        let headroom = match self {
            QueueHeadroom::Fixed(n) => n,
            QueueHeadroom::SquareRoot { at_least } => limit.isqrt().max(at_least),
        };
        f64::from(headroom.max(1))
    }
}

/// Delay-based Gradient2, after Netflix concurrency-limits' `Gradient2Limit`, made to hold
/// up on noisy latencies and against a service that rejects quickly.
///
/// It keeps two averages of the latencies answered (or timed out): `short`, an exponential
/// average over the last `short_window` of them, and `no_load`, the no-load estimate, over
/// `long_window`, of the answers no limit of
/// ours can have queued: those admitted with fewer than half the limit in flight (the
/// application did not use the limit), or at `min_limit` with no more than that in flight
/// (the service itself is that slow). It starts as the plain mean of the first `long_window`
/// answers, whatever they found: the first answers of a service with a long tail are its
/// fast ones (the slow ones are still out), and an estimate made of them alone would take
/// the whole service for a queue. A controller started on a service already overloaded
/// therefore counts the queue of its first `long_window` answers as no-load latency, as
/// Netflix's average does; it does not learn more of it after.
/// (`short` is the plain mean of its first samples, up to 10, then exponential.) Netflix
/// compares a single answer with a long-term average of every answer, `long`: on a service
/// with noisy latency every slow answer then shrinks the
/// limit, and it settles at a low number whatever the demand. And `long` learns the latency
/// at the operating point, so a standing queue becomes its normal: after a service falls from
/// 10 workers to one the limit comes down at once, then creeps back up as `long` learns the
/// queue, to the callers' timeout. A queue of our own never reaches `no_load`, so there is no
/// `long` here. On every sample:
/// 1. if fewer than half the limit were in flight (`in_flight < limit / 2`) the limit stays:
///    the application does not use it, so its latency says nothing about it;
/// 2. `gradient = clamp(rtt_tolerance * no_load / short, 0.5, 1)`: 1 while the service is no
///    slower than the tolerance allows, down to 0.5;
/// 3. `new = limit * gradient`, plus `headroom(limit)` when the gradient is 1 (no queue
///    shows), then smoothed per round trip,
///    `limit += smoothing * share * (new - limit)`, and kept within bounds, where `share` is
///    the time since the previous answer over `short`, within `[1 / limit, 1]`: a round
///    trip of answers moves the limit by about `smoothing` of the way, whatever their rate
///    (and a windowed summary, a round trip or more after the previous one, by all of it).
///    Netflix moves it by `smoothing` of the way on every answer: at 500 answers a second
///    the headroom alone then adds hundreds a second, and the limit swings between its
///    bounds faster than the queue can follow. Netflix also adds the headroom whatever the
///    gradient, which puts a floor of `headroom / (1 - gradient)` under the limit (4 at the
///    steepest gradient, with a headroom of `sqrt(limit)`) that a service of fewer workers
///    never drains: 4 in flight on one worker of 20 ms is a p99 of 200 ms.
///
/// The limit settles where the short-term latency is `rtt_tolerance` times the no-load one:
/// a queue of half the service's own latency, at any capacity. The cost of a no-load
/// estimate that a queue cannot raise: a service that becomes slower for good (not from
/// load) looks like a queue, and the limit falls to `min_limit` before the estimate learns
/// the new latency there (or from answers that come while the limit is not in use) and
/// the limit grows again. A slowdown within the tolerance (up to 1.5x) costs nothing.
///
/// Netflix also cuts `long` by 5% whenever it is over twice `short`; on a long-tailed
/// service that holds for most answers (the median is far below the mean), and the cuts
/// ratchet `long` down until the limit collapses; the no-load estimate has no such cut.
///
/// A dropped request is overload whatever its latency (a rejection that comes back in a
/// millisecond looks fast): it multiplies the limit by `backoff_ratio`, whatever the
/// in-flight count, at most once per round trip (a loss of a request that started before the
/// latest cut does not cut again), and its latency enters neither average. A timeout counts
/// through its latency, as in Netflix's rule (at least the caller's timeout, a lower bound of
/// the service's, never flattering), unless more than 5% of the last 100 or so answers timed
/// out: then it is overload too, as a drop, and the limit does not grow while that lasts.
/// A long-tailed service times out a few answers in
/// a thousand at any load, which a back-off on each would take for overload; a queue that
/// outlasts its callers times out most of them, and its latency, the same for every answer,
/// shows no gradient at all.
///
/// Defaults, and why: limits 1 / 20 / 1000 (Netflix's 20 / 20 / 200 put a floor under the
/// limit that a service of fewer than 20 workers cannot drain, and a ceiling on one of
/// more); `smoothing` 0.2, `rtt_tolerance` 1.5 and `long_window` 600 (Netflix's);
/// `short_window` 10 (averages out a single slow answer, yet follows a queue within a few
/// round trips); `backoff_ratio` 0.9 (AIMD's). The headroom defaults to
/// [`QueueHeadroom::SquareRoot`] at least 1 (Gradient2's documentation says at least 4; in
/// front of one worker, at a limit of 1 or 2, a headroom of 4 aims at several times what
/// the worker takes, and 1 keeps the growth there to a step at a time).
#[derive(Debug, Clone)]
pub struct Gradient2 {
    bounds: LimitBounds,
    smoothing: f64,
    tolerance: f64,
    headroom: QueueHeadroom,
    backoff: f64,
    /// When the latest answer came.
    last_answer: Option<Micros>,
    /// The share of recent answers that timed out (an exponential average).
    timeouts: f64,
    short_rtt: ExpAverage,
    /// The no-load estimate (see [`Gradient2::no_load_rtt`]).
    base_rtt: ExpAverage,
    estimate: f64,
    losses: LossGate,
}

/// Builds a [`Gradient2`]; every parameter starts at its default.
#[derive(Debug, Clone)]
pub struct Gradient2Builder {
    min: u32,
    initial: u32,
    max: u32,
    smoothing: f64,
    tolerance: f64,
    headroom: QueueHeadroom,
    long_window: u32,
    short_window: u32,
    backoff: f64,
}

const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(1, 20, 1000);

/// The answers over which the share of timeouts is averaged.
const TIMEOUT_WINDOW: f64 = 100.0;
/// The share of timeouts past which a timeout is overload: a long tail alone times out a few
/// answers in a thousand at any load; a queue that outlasts callers times out most.
const TIMEOUT_SHARE: f64 = 0.05;

impl Gradient2Builder {
    limit_setters!();

    /// How much of each new estimate is taken, in `(0, 1]`.
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// How much slower than the no-load estimate the short-term average may be before the
    /// limit shrinks (at least 1: 2.0 lets latency double).
    pub fn rtt_tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The growth allowed on top of the gradient.
    pub fn queue_headroom(mut self, headroom: QueueHeadroom) -> Self {
        self.headroom = headroom;
        self
    }

    /// The samples the no-load estimate spans (at least 1): the plain mean of the first this
    /// many, then an exponential average over this many.
    pub fn long_window(mut self, samples: u32) -> Self {
        self.long_window = samples;
        self
    }

    /// The answers the short-term average spans (at least 1; 1 is Netflix's rule, the
    /// latest answer alone).
    pub fn short_window(mut self, samples: u32) -> Self {
        self.short_window = samples;
        self
    }

    /// What the limit is multiplied by on a loss, in `[0.5, 1)`.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff = ratio;
        self
    }

    /// The controller, or what is wrong with the parameters.
    pub fn build(self) -> Result<Gradient2, ConfigError> {
        let bounds = LimitBounds::new(self.min, self.initial, self.max)?;
        check_fraction("smoothing", self.smoothing, 0.0, false, 1.0)?;
        if !(self.tolerance.is_finite() && self.tolerance >= 1.0) {
            return Err(ConfigError::invalid(
                "rtt_tolerance",
                self.tolerance,
                "must be at least 1",
            ));
        }
        if self.long_window == 0 {
            return Err(ConfigError::invalid("long_window", 0, "must be at least 1"));
        }
        if self.short_window == 0 {
            return Err(ConfigError::invalid(
                "short_window",
                0,
                "must be at least 1",
            ));
        }
        check_backoff(self.backoff)?;
        Ok(self.assemble(bounds))
    }

    fn assemble(self, bounds: LimitBounds) -> Gradient2 {
        Gradient2 {
            bounds,
            smoothing: self.smoothing,
            tolerance: self.tolerance,
            headroom: self.headroom,
            backoff: self.backoff,
            last_answer: None,
            timeouts: 0.0,
            short_rtt: ExpAverage::new(self.short_window),
            base_rtt: ExpAverage::cumulative(self.long_window),
            estimate: f64::from(bounds.initial()),
            losses: LossGate::default(),
        }
    }
}

impl Gradient2 {
    /// A builder starting from the defaults.
    pub fn builder() -> Gradient2Builder {
        Gradient2Builder {
            min: DEFAULT_BOUNDS.min(),
            initial: DEFAULT_BOUNDS.initial(),
            max: DEFAULT_BOUNDS.max(),
            smoothing: 0.2,
            tolerance: 1.5,
            headroom: QueueHeadroom::SquareRoot { at_least: 1 },
            long_window: 600,
            short_window: 10,
            backoff: DEFAULT_BACKOFF,
        }
    }

    /// The short-term latency average, in microseconds.
    pub fn short_rtt(&self) -> f64 {
        self.short_rtt.value
    }

    /// The no-load latency estimate the short-term average is compared with, in
    /// microseconds: the plain mean of the first `long_window` latencies, then an average of
    /// those answered with fewer than half the limit in flight (or at the minimum).
    pub fn no_load_rtt(&self) -> f64 {
        self.base_rtt.value
    }

    /// The bounds the limit stays within.
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }
}

impl Default for Gradient2 {
    fn default() -> Self {
        Gradient2::builder().assemble(DEFAULT_BOUNDS)
    }
}

impl Controller for Gradient2 {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        let estimate = self.estimate;
        let timeout = sample.outcome == Outcome::Timeout;
        if sample.outcome != Outcome::Dropped {
            let weight = 2.0 / (TIMEOUT_WINDOW + 1.0);
            let seen = if timeout { 1.0 } else { 0.0 };
            self.timeouts = self.timeouts * (1.0 - weight) + seen * weight;
        }
        let overload = timeout && self.timeouts > TIMEOUT_SHARE;
        if sample.outcome == Outcome::Dropped || overload {
            if self.losses.cuts(now, &sample) {
                self.estimate = self.bounds.clamp_f64(estimate * self.backoff);
            }
            return whole(self.estimate);
        }
        let rtt = sample.rtt_f64();
        let last_answer = self.last_answer.replace(now);
        let short = self.short_rtt.add(rtt);
        let used = sample.used(estimate);
        // Admitted at the minimum with no more in flight: no limit of ours could have queued it.
        let at_min = whole(estimate) <= self.bounds.min() && sample.in_flight <= self.bounds.min();
        // The no-load estimate learns only latencies no limit of ours can have queued: with
        // fewer than half the limit in flight, or at the minimum; and, to start, the first
        // `long_window` answers whatever they found, or a controller started on a busy service
        // would never have one.
        if !used || at_min || self.base_rtt.warming() {
            self.base_rtt.add(rtt);
        }
        if !used {
            return whole(estimate);
        }
        let gradient = (self.tolerance * self.base_rtt.value / short).clamp(0.5, 1.0);
        // Headroom only while no queue shows: added whatever the gradient, it puts a floor of
        // `h / (1 - g)` under the limit that a service of fewer workers never drains (a limit
        // of 4 at a gradient of 0.5), and a limit held there would never reach `min_limit`,
        // where the no-load estimate learns what a slower service now answers in.
        // (Within a rounding error: an average that learns a constant latency only closes in
        // on it, and with a tolerance of 1 it would never quite reach it.)
        let headroom = if gradient >= 1.0 - 1e-9 {
            self.headroom.at(whole(estimate))
        } else {
            0.0
        };
        let mut next = estimate * gradient + headroom;
        if self.timeouts > TIMEOUT_SHARE {
            // Callers are giving up: whatever the gradient says, the limit is not too low.
            next = next.min(estimate);
        }
        // Per round trip: each answer weighs the share of a round trip since the previous
        // one, at least 1 / limit (answers that come together share one round trip).
        let elapsed = last_answer.map_or(0, |last| now.saturating_sub(last));
        let share = (elapsed as f64 / short).clamp(1.0 / estimate.max(1.0), 1.0);
        let smoothing = self.smoothing * share;
        let next = estimate * (1.0 - smoothing) + next * smoothing;
        self.estimate = self.bounds.clamp_f64(next);
        whole(self.estimate)
    }

    fn limit(&self) -> u32 {
        whole(self.estimate)
    }
}

/// Netflix's `ExpAvgMeasurement`: the plain mean of the first samples (10, or the window if
/// shorter; or the whole window, [`ExpAverage::cumulative`]), then an exponential average with
/// weight `2 / (window + 1)` (or less, when told).
#[derive(Debug, Clone)]
struct ExpAverage {
    value: f64,
    sum: f64,
    count: u32,
    warmup: u32,
    factor: f64,
}

impl ExpAverage {
    fn new(window: u32) -> ExpAverage {
        ExpAverage {
            warmup: window.min(10),
            ..ExpAverage::cumulative(window)
        }
    }

    /// The plain mean of everything until there are `window` samples: an average that
    /// learns rarely (the no-load estimate, from quiet moments only) is otherwise held for
    /// long by whichever 10 samples came first.
    fn cumulative(window: u32) -> ExpAverage {
        ExpAverage {
            value: 0.0,
            sum: 0.0,
            count: 0,
            warmup: window,
            factor: 2.0 / (f64::from(window) + 1.0),
        }
    }

    /// Whether it is still the plain mean of its first samples.
    fn warming(&self) -> bool {
        self.count < self.warmup
    }

    /// Adds a sample.
    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            self.value = self.value * (1.0 - self.factor) + sample * self.factor;
        }
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn follows_the_rule_step_by_step() -> Result<(), ConfigError> {
        // Netflix's short average (the latest answer alone) to show the rule itself; the
        // no-load estimate is still the plain mean of every answer (its first 600).
        let mut g = Gradient2::builder().short_window(1).build()?;
        // (rtt, in flight, estimate after, no-load estimate after)
        // Each answer moves the limit by smoothing / limit = 0.2 / 20 of the way to the new
        // estimate: a round trip of 20 answers moves it by about 0.2 of the way.
        let steps: [(Micros, u32, f64, f64); 6] = [
            // no_load = 100, gradient = min(1.5 * 100/100, 1) = 1, headroom sqrt 20 = 4:
            // new = 20 + 4 = 24, 20 + 0.2 / 20 * 4 = 20.04.
            (100, 20, 20.04, 100.0),
            // 20.04 + 0.2 / 20.04 * 4 = 20.0799...
            (100, 20, 20.07992015968064, 100.0),
            // no_load = 600 / 3 = 200, gradient = 1.5 * 200/400 = 0.75, and with a queue showing
            // no headroom: new = 20.0799 * 0.75 = 15.06, a step of 0.2 / 20.0799 of -5.02.
            (400, 20, 20.02992015968064, 200.0),
            // no_load = 1600 / 4 = 400, gradient = 1.5 * 0.4 = 0.6: new = 12.02.
            (1000, 20, 19.94992015968064, 400.0),
            // no_load = 5600 / 5 = 1120, gradient 1.5 * 1120/4000 = 0.42, clamped to 0.5.
            (4000, 20, 19.849920159680643, 1120.0),
            // 2 * 9 < 19.85: app-limited, unchanged; no_load = 5700 / 6 = 950 (Netflix's rule
            // would cut its long-term average by 5% here, as 950 / 100 > 2: on a noisy service that cut
            // ratchets the average down until the limit collapses).
            (100, 9, 19.849920159680643, 950.0),
        ];
        for (i, (rtt, in_flight, estimate, no_load)) in steps.into_iter().enumerate() {
            let limit = g.on_sample(0, Sample::ok(0, rtt, in_flight));
            assert!(close(g.estimate, estimate), "step {i}: {}", g.estimate);
            assert_eq!(limit, estimate as u32, "step {i}");
            assert!(
                close(g.no_load_rtt(), no_load),
                "step {i}: {}",
                g.no_load_rtt()
            );
        }
        // Still warming up: the mean of the sum, 6700 / 7.
        g.on_sample(0, Sample::ok(0, 1000, 0));
        assert!(close(g.no_load_rtt(), 6700.0 / 7.0));
        // Eight more app-limited answers of 100: the plain mean of its 15, 7500 / 15.
        for _ in 0..8 {
            g.on_sample(0, Sample::ok(0, 100, 0));
        }
        assert!(close(g.no_load_rtt(), 500.0), "{}", g.no_load_rtt());
        Ok(())
    }

    /// A default Gradient2 after 1000 app-limited answers of 20 ms (1 in flight of 20), which
    /// set its no-load estimate (past its plain mean of 600); and the time of the last.
    fn after_quiet_answers() -> (Gradient2, Micros) {
        let mut g = Gradient2::default();
        let mut now = 1_000_000;
        for _ in 0..1000 {
            now += 1_000;
            g.on_sample(now, Sample::ok(now - 20_000, 20_000, 1));
        }
        assert!(close(g.no_load_rtt(), 20_000.0));
        (g, now)
    }

    #[test]
    fn a_standing_queue_does_not_become_the_no_load_latency() -> Result<(), ConfigError> {
        let (mut g, mut now) = after_quiet_answers();
        // Then the limit in use on 4 workers: past 4 in flight a queue of our own, 20 ms
        // more per 4. For 20 000 answers (over a thousand seconds) the limit holds the queue
        // near the tolerance (1.5 times the 20 ms: 6 in flight) and does not creep: the
        // no-load estimate learns none of the queue.
        for _ in 0..20_000 {
            let limit = g.limit();
            let rtt = 20_000 * Micros::from(limit.max(4)) / 4;
            now += rtt / Micros::from(limit);
            g.on_sample(now, Sample::ok(now - rtt, rtt, limit));
            if now > 10_000_000 {
                assert!((4..=7).contains(&g.limit()), "{} at {now}", g.limit());
            }
        }
        assert!(close(g.no_load_rtt(), 20_000.0), "{}", g.no_load_rtt());
        Ok(())
    }

    #[test]
    fn a_service_slower_for_good_is_learnt_at_the_minimum() -> Result<(), ConfigError> {
        let (mut g, mut now) = after_quiet_answers();
        // Every answer now takes 100 ms whatever the limit: the limit falls to the minimum,
        // where what is admitted alone is no queue of ours, and the estimate learns it.
        let mut lowest = u32::MAX;
        for _ in 0..5_000 {
            now += 10_000;
            let limit = g.limit();
            lowest = lowest.min(limit);
            g.on_sample(now, Sample::ok(now - 100_000, 100_000, limit));
        }
        assert_eq!(lowest, 1);
        assert!(g.no_load_rtt() * 1.5 >= 100_000.0, "{}", g.no_load_rtt());
        assert!(g.limit() > 20, "{}", g.limit());
        Ok(())
    }

    #[test]
    fn a_noisy_answer_does_not_shrink_the_limit() -> Result<(), ConfigError> {
        // One answer 5 times the usual among steady ones, with the limit in use: Netflix's
        // rule (the latest answer alone) takes the steepest gradient, 0.5, on it; over 10
        // answers the short-term average moves by 2/11 of the outlier, and the estimate
        // loses less.
        let run = |short_window| -> Result<f64, ConfigError> {
            let mut g = Gradient2::builder().short_window(short_window).build()?;
            for i in 0..40 {
                let rtt = if i == 30 { 5_000 } else { 1_000 };
                g.on_sample(0, Sample::ok(0, rtt, 1_000));
            }
            Ok(g.estimate)
        };
        let (averaged, single) = (run(10)?, run(1)?);
        assert!(averaged > single, "{averaged} vs {single}");
        Ok(())
    }

    #[test]
    fn drops_back_off_once_per_round_trip_whatever_their_latency() -> Result<(), ConfigError> {
        let mut g = Gradient2::default();
        // A fast rejection with nothing in flight: 20 * 0.9 = 18.
        assert_eq!(g.on_sample(10, Sample::dropped(0, 1, 0)), 18);
        // Started before that cut: already answered by it.
        assert_eq!(g.on_sample(20, Sample::dropped(5, 1, 0)), 18);
        // Started at the cut or after: 18 * 0.9 = 16.2.
        assert_eq!(g.on_sample(30, Sample::dropped(10, 1, 0)), 16);
        assert_eq!(g.on_sample(40, Sample::dropped(30, 10, 20)), 14);
        // No drop's latency is read; a timeout's is, as a latency (here app-limited).
        assert_eq!((g.no_load_rtt(), g.short_rtt()), (0.0, 0.0));
        assert_eq!(g.on_sample(50, Sample::timeout(40, 10, 0)), 14);
        assert_eq!((g.no_load_rtt(), g.short_rtt()), (10.0, 10.0));
        Ok(())
    }

    #[test]
    fn headroom_grows_with_the_square_root() -> Result<(), ConfigError> {
        // Smoothing 1: a round trip of answers moves the limit by about the whole headroom,
        // each answer by 1 / limit of it.
        let mut g = Gradient2::builder()
            .smoothing(1.0)
            .initial_limit(100)
            .max_limit(1000)
            .build()?;
        g.on_sample(0, Sample::ok(0, 100, 100));
        assert!(close(g.estimate, 100.1), "{}", g.estimate); // + sqrt(100) / 100
        let mut fixed = Gradient2::builder()
            .smoothing(1.0)
            .queue_headroom(QueueHeadroom::Fixed(4))
            .initial_limit(100)
            .max_limit(1000)
            .build()?;
        fixed.on_sample(0, Sample::ok(0, 100, 100));
        assert!(close(fixed.estimate, 100.04), "{}", fixed.estimate);
        for _ in 0..99 {
            g.on_sample(0, Sample::ok(0, 100, 100));
        }
        // A round trip of 100 answers: about + sqrt(100).
        assert_eq!(g.limit(), 109);
        assert_eq!(QueueHeadroom::SquareRoot { at_least: 4 }.at(9), 4.0);
        // Never none: the limit could not grow.
        assert_eq!(QueueHeadroom::Fixed(0).at(9), 1.0);
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = [
            Gradient2::builder().smoothing(0.0).build(),
            Gradient2::builder().rtt_tolerance(0.9).build(),
            Gradient2::builder().rtt_tolerance(f64::INFINITY).build(),
            Gradient2::builder().long_window(0).build(),
            Gradient2::builder().short_window(0).build(),
            Gradient2::builder().backoff_ratio(1.0).build(),
            Gradient2::builder().min_limit(30).build(),
        ];
        for result in bad {
            assert!(result.is_err(), "{result:?}");
        }
    }
}

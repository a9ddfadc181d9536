//! Feeding a controller one summary per window instead of every sample.

use std::time::Duration;

use crate::adaptive::reservoir::Reservoir;
use crate::adaptive::sample::{
    Controller, Outcome, Sample, check_fraction, check_order, positive_micros,
};
use crate::clock::{Micros, micros_ceil};
use crate::error::ConfigError;

/// How a window's latencies are summarized for the wrapped controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowAggregate {
    /// Their mean (Netflix's default).
    Average,
    /// Their nearest-rank percentile, in `(0, 1]`, from a bounded reservoir sample.
    Percentile(f64),
}

/// Aggregates samples per window and hands the wrapped controller one sample per window, after
/// Netflix concurrency-limits' `WindowedLimit`: per-sample rules (AIMD, Vegas, Gradient2) then
/// move once per window, on a summary less noisy than any one request.
///
/// A window opens with its first sample and lasts twice the lowest latency of the window
/// before it (the first: `min_window`), kept within `[min_window, max_window]`. It closes with
/// the first sample after its end (that sample included) once it holds `min_samples` samples;
/// a window still short of them keeps collecting, and after `max_collect` it closes on
/// whatever it holds. So a window never waits forever: at a limit of 1 and a latency of
/// 125 ms, 10 samples take 1.25 s, and the limit moves then, where Netflix's wrapper throws
/// such windows away and the limit can never move again.
///
/// The summary is one sample: its [`WindowAggregate`] latency over the answered and
/// timed-out samples (a drop's latency is no measure of the service), its largest in-flight
/// count, and an outcome: a timeout if more than one sample in 20 timed out, else a drop if
/// any was dropped, else ok. So a window with a drop backs the wrapped controller off as one
/// drop would; a few timeouts among many answers are a long tail, which the summary's
/// latency already holds.
/// Answers faster than `min_rtt_threshold` are ignored (cache hits and other answers that
/// never reached the service); losses count however fast.
///
/// What a window costs: the wrapped controller moves once per window, so AIMD grows by one
/// per window, not per answer (from 1 to 40 takes 40 windows), and at a low limit a window
/// takes `min_samples` round trips of the limit. Prefer the per-sample rule where it works.
///
/// Defaults: `min_window` and `max_window` 1 s, `min_samples` 10, `min_rtt_threshold` 100 µs,
/// [`WindowAggregate::Average`] (Netflix's); `max_collect` 10 s (ten windows: long enough
/// for 10 samples at any limit of a service answering within a second, short enough that a
/// quiet limit still moves); reservoir 1000 and `seed` 0 for a percentile.
///
/// ```
/// use sluicegate::adaptive::{Aimd, Controller, Sample, Windowed};
/// use std::time::Duration;
///
/// let aimd = Aimd::builder().min_limit(1).initial_limit(10).build()?;
/// let mut windowed = Windowed::builder(aimd).min_samples(2).build()?;
/// for t in [0, 1, 2, 3] {
///     windowed.on_sample(t * 300_000, Sample::ok(0, 1_000, 10));
/// }
/// assert_eq!(windowed.limit(), 10); // the first window, open from 0, ends at 1 s
/// windowed.on_sample(1_000_001, Sample::ok(0, 1_000, 10));
/// assert_eq!(windowed.limit(), 11); // one increase for the whole window
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Windowed<C> {
    inner: C,
    min_window: Micros,
    max_window: Micros,
    max_collect: Micros,
    min_samples: u64,
    min_rtt_threshold: Micros,
    aggregate: WindowAggregate,
    /// When the current window opened and when it may close (`None` before its first sample).
    open: Option<(Micros, Micros)>,
    /// The length of the next window.
    next_length: Micros,
    window: Window,
}

/// Builds a [`Windowed`] around a controller.
#[derive(Debug, Clone)]
pub struct WindowedBuilder<C> {
    inner: C,
    min_window: Duration,
    max_window: Duration,
    max_collect: Duration,
    min_samples: u32,
    min_rtt_threshold: Duration,
    aggregate: WindowAggregate,
    reservoir: usize,
    seed: u64,
}

impl<C: Controller> WindowedBuilder<C> {
    /// The shortest window.
    pub fn min_window(mut self, window: Duration) -> Self {
        self.min_window = window;
        self
    }

    /// The longest window (at least `min_window`).
    pub fn max_window(mut self, window: Duration) -> Self {
        self.max_window = window;
        self
    }

    /// The longest a window collects (at least `max_window`): one still short of
    /// `min_samples` then passes on what it has.
    pub fn max_collect(mut self, duration: Duration) -> Self {
        self.max_collect = duration;
        self
    }

    /// The fewest samples a window waits for before it is passed on (at least 1).
    pub fn min_samples(mut self, samples: u32) -> Self {
        self.min_samples = samples;
        self
    }

    /// Samples faster than this are ignored (zero keeps them all).
    pub fn min_rtt_threshold(mut self, threshold: Duration) -> Self {
        self.min_rtt_threshold = threshold;
        self
    }

    /// How a window's latencies are summarized.
    pub fn aggregate(mut self, aggregate: WindowAggregate) -> Self {
        self.aggregate = aggregate;
        self
    }

    /// The most latencies kept per window for a percentile (at least 1).
    pub fn reservoir(mut self, capacity: usize) -> Self {
        self.reservoir = capacity;
        self
    }

    /// The seed of the percentile's reservoir sampling.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The wrapper, or what is wrong with the parameters.
    pub fn build(self) -> Result<Windowed<C>, ConfigError> {
        let min_window = positive_micros("min_window", self.min_window)?;
        let max_window = positive_micros("max_window", self.max_window)?;
        check_order("min_window", min_window, "max_window", max_window)?;
        let max_collect = positive_micros("max_collect", self.max_collect)?;
        check_order("max_window", max_window, "max_collect", max_collect)?;
        if self.min_samples == 0 {
            return Err(ConfigError::invalid("min_samples", 0, "must be at least 1"));
        }
        if self.reservoir == 0 {
            return Err(ConfigError::invalid("reservoir", 0, "must be at least 1"));
        }
        let reservoir = match self.aggregate {
            WindowAggregate::Average => None,
            WindowAggregate::Percentile(p) => {
                check_fraction("percentile", p, 0.0, false, 1.0)?;
                Some(Reservoir::new(self.reservoir, self.seed))
            }
        };
        Ok(Windowed {
            inner: self.inner,
            min_window,
            max_window,
            max_collect,
            min_samples: self.min_samples.into(),
            min_rtt_threshold: micros_ceil(self.min_rtt_threshold),
            aggregate: self.aggregate,
            open: None,
            next_length: min_window,
            window: Window::new(reservoir),
        })
    }
}

impl<C: Controller> Windowed<C> {
    /// A builder around `inner`, other parameters at their defaults.
    pub fn builder(inner: C) -> WindowedBuilder<C> {
        WindowedBuilder {
            inner,
            min_window: Duration::from_secs(1),
            max_window: Duration::from_secs(1),
            max_collect: Duration::from_secs(10),
            min_samples: 10,
            min_rtt_threshold: Duration::from_micros(100),
            aggregate: WindowAggregate::Average,
            reservoir: 1000,
            seed: 0,
        }
    }

    /// The wrapped controller.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: Controller> Controller for Windowed<C> {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        if sample.outcome == Outcome::Ok && sample.rtt < self.min_rtt_threshold {
            return self.inner.limit();
        }
        self.window.add(sample);
        let (opened, end) = *self
            .open
            .get_or_insert((now, now.saturating_add(self.next_length)));
        // A clock that went back before the window opened reopens it from now.
        let age = now.checked_sub(opened);
        let full = self.window.count >= self.min_samples;
        let due = match age {
            Some(age) => now > end && full || age >= self.max_collect,
            None => true,
        };
        if !due {
            return self.inner.limit();
        }
        let window = &mut self.window;
        self.next_length = window
            .min_rtt
            .unwrap_or(self.min_window)
            .saturating_mul(2)
            .clamp(self.min_window, self.max_window);
        self.open = None;
        let summary = Sample {
            start: sample.start,
            rtt: window.summary(self.aggregate),
            in_flight: window.max_in_flight,
            outcome: window.outcome(),
        };
        window.reset();
        self.inner.on_sample(now, summary)
    }

    fn limit(&self) -> u32 {
        self.inner.limit()
    }
}

/// What a window has seen so far.
#[derive(Debug, Clone)]
struct Window {
    /// The lowest latency answered or timed out (`None` with none yet).
    min_rtt: Option<Micros>,
    /// The sum and count of those latencies.
    sum: u128,
    answered: u64,
    /// The highest latency of any sample: the summary of a window with no answer, read by no
    /// controller (each ignores a loss's latency) but the closest thing to one.
    max_rtt: Micros,
    count: u64,
    max_in_flight: u32,
    dropped: bool,
    timeouts: u64,
    reservoir: Option<Reservoir>,
}

impl Window {
    fn new(reservoir: Option<Reservoir>) -> Window {
        Window {
            min_rtt: None,
            sum: 0,
            answered: 0,
            max_rtt: 0,
            count: 0,
            max_in_flight: 0,
            dropped: false,
            timeouts: 0,
            reservoir,
        }
    }

    fn add(&mut self, sample: Sample) {
        self.count += 1;
        self.max_rtt = self.max_rtt.max(sample.rtt);
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        match sample.outcome {
            Outcome::Dropped => self.dropped = true,
            Outcome::Timeout => self.timeouts += 1,
            Outcome::Ok => {}
        }
        // A drop's latency is no measure of the service; a timeout's is (a lower bound).
        if sample.outcome == Outcome::Dropped {
            return;
        }
        self.min_rtt = Some(self.min_rtt.map_or(sample.rtt, |m| m.min(sample.rtt)));
        self.sum += u128::from(sample.rtt);
        self.answered += 1;
        if let Some(reservoir) = &mut self.reservoir {
            reservoir.push(sample.rtt);
        }
    }

    /// A timeout if more than one sample in 20 timed out (a few of many are a long tail,
    /// whose latency the summary holds), else a drop if any was dropped, else ok.
    fn outcome(&self) -> Outcome {
        if self.timeouts * 20 > self.count {
            Outcome::Timeout
        } else if self.dropped {
            Outcome::Dropped
        } else {
            Outcome::Ok
        }
    }

    fn reset(&mut self) {
        let mut reservoir = self.reservoir.take();
        if let Some(r) = &mut reservoir {
            r.clear();
        }
        *self = Window::new(reservoir);
    }

    /// The answered latencies' summary, or the highest latency of a window with no answer.
    fn summary(&mut self, aggregate: WindowAggregate) -> Micros {
        let answered = match aggregate {
            WindowAggregate::Average => self
                .sum
                .checked_div(u128::from(self.answered))
                .map(|mean| u64::try_from(mean).unwrap_or(Micros::MAX)),
            WindowAggregate::Percentile(p) => self.reservoir.as_mut().and_then(|r| r.percentile(p)),
        };
        answered.unwrap_or(self.max_rtt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adaptive::Aimd;

    /// A controller that records what it is given, to see the summaries.
    #[derive(Debug, Default)]
    struct Recorder {
        seen: Vec<(Micros, Sample)>,
    }

    impl Controller for Recorder {
        fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
            self.seen.push((now, sample));
            1
        }
        fn limit(&self) -> u32 {
            1
        }
    }

    const MS: Micros = 1_000;
    const SECOND: Micros = 1_000_000;

    #[test]
    fn summarizes_each_window() -> Result<(), ConfigError> {
        let mut w = Windowed::builder(Recorder::default())
            .min_samples(2)
            .min_window(Duration::from_millis(100))
            .max_window(Duration::from_millis(500))
            .build()?;
        // The first window opens with its first sample and lasts min_window: 0 to 100 ms.
        w.on_sample(0, Sample::ok(0, 10 * MS, 3));
        w.on_sample(50 * MS, Sample::ok(40 * MS, 10 * MS, 7));
        w.on_sample(100 * MS, Sample::dropped(70 * MS, 30 * MS, 5));
        assert!(w.inner().seen.is_empty(), "100 ms is not after the end");
        // 101 ms closes it, this sample included: the answers' mean (10 + 10 + 60) / 3 ms
        // (the drop's 30 ms is no answer), max in flight 7, a drop. Its lowest latency,
        // 10 ms, makes the next window 100 ms long again (2 x 10 ms, held at the minimum).
        w.on_sample(101 * MS, Sample::ok(41 * MS, 60 * MS, 2));
        assert_eq!(
            w.inner().seen,
            vec![(101 * MS, Sample::dropped(41 * MS, 80 * MS / 3, 7))]
        );
        // A loss counts however fast: 90 µs is under the 100 µs threshold. It opens the next
        // window, 150 to 250 ms, and a timeout's latency counts.
        w.on_sample(150 * MS, Sample::timeout(0, 90, 9));
        w.on_sample(160 * MS, Sample::ok(0, 50, 9)); // a fast answer: ignored
        w.on_sample(240 * MS, Sample::ok(0, 300 * MS, 1));
        assert_eq!(w.inner().seen.len(), 1);
        w.on_sample(251 * MS, Sample::ok(0, 200 * MS, 1));
        assert_eq!(
            w.inner().seen[1],
            (251 * MS, Sample::timeout(0, (90 + 500 * MS) / 3, 9))
        );
        Ok(())
    }

    #[test]
    fn a_window_short_of_samples_keeps_collecting() -> Result<(), ConfigError> {
        // At a limit of 1 and 300 ms a request, a 1 s window holds 4 samples: the window
        // waits for its 10th (at 2.7 s) instead of being thrown away.
        let aimd = Aimd::builder().min_limit(1).initial_limit(1).build()?;
        let mut w = Windowed::builder(aimd).build()?;
        for i in 0..9 {
            w.on_sample(i * 300 * MS, Sample::ok(0, 300 * MS, 1));
            assert_eq!(w.limit(), 1, "sample {i}");
        }
        assert_eq!(w.on_sample(2_700 * MS, Sample::ok(0, 300 * MS, 1)), 2);
        // Past max_collect a window closes on what it has.
        let mut w = Windowed::builder(Recorder::default())
            .min_samples(100)
            .max_collect(Duration::from_secs(3))
            .build()?;
        w.on_sample(10 * SECOND, Sample::ok(0, MS, 1));
        w.on_sample(12 * SECOND, Sample::ok(0, 3 * MS, 1));
        assert!(w.inner().seen.is_empty());
        w.on_sample(13 * SECOND, Sample::ok(0, 5 * MS, 1));
        assert_eq!(
            w.inner().seen,
            vec![(13 * SECOND, Sample::ok(0, 3 * MS, 1))]
        );
        Ok(())
    }

    #[test]
    fn a_window_of_losses_only_is_passed_on() -> Result<(), ConfigError> {
        let mut w = Windowed::builder(Recorder::default())
            .min_samples(2)
            .build()?;
        w.on_sample(0, Sample::dropped(0, MS, 4));
        w.on_sample(SECOND + 1, Sample::dropped(SECOND, 2 * MS, 4));
        assert_eq!(
            w.inner().seen,
            vec![(SECOND + 1, Sample::dropped(SECOND, 2 * MS, 4))]
        );
        Ok(())
    }

    #[test]
    fn percentile_summary() -> Result<(), ConfigError> {
        let mut w = Windowed::builder(Recorder::default())
            .aggregate(WindowAggregate::Percentile(0.9))
            .min_samples(1)
            .build()?;
        for rtt in 1..=10 {
            w.on_sample(500 * MS, Sample::ok(0, rtt * 1_000, 1));
        }
        w.on_sample(600 * MS, Sample::dropped(0, 50 * MS, 1));
        w.on_sample(2_000 * MS, Sample::ok(0, 1_000, 1));
        // 1..10 ms and the closing sample's 1 ms (the drop is no answer): the 10th of 11
        // (ceil(0.9 * 11) = 10) is 9 ms.
        let rtts: Vec<Micros> = w.inner().seen.iter().map(|(_, s)| s.rtt).collect();
        assert_eq!(rtts, [9_000]);
        Ok(())
    }

    #[test]
    fn aimd_moves_once_per_window() -> Result<(), ConfigError> {
        let aimd = Aimd::builder().min_limit(1).initial_limit(10).build()?;
        let mut w = Windowed::builder(aimd).build()?;
        for i in 0..=50 {
            w.on_sample(i * 10 * MS, Sample::ok(0, 1_000, 10));
        }
        assert_eq!(w.limit(), 10);
        w.on_sample(1_001 * MS, Sample::ok(0, 1_000, 10));
        assert_eq!(w.limit(), 11);
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let build = |f: fn(WindowedBuilder<Aimd>) -> WindowedBuilder<Aimd>| {
            f(Windowed::builder(Aimd::default())).build().err()
        };
        assert!(matches!(
            build(|b| b.min_window(Duration::from_secs(2))),
            Some(ConfigError::OutOfOrder { .. })
        ));
        assert!(build(|b| b.min_window(Duration::ZERO)).is_some());
        assert!(build(|b| b.min_samples(0)).is_some());
        assert!(build(|b| b.aggregate(WindowAggregate::Percentile(0.0))).is_some());
        assert!(build(|b| b.aggregate(WindowAggregate::Percentile(f64::NAN))).is_some());
        assert!(build(|b| b.reservoir(0)).is_some());
        assert!(matches!(
            build(|b| b.max_collect(Duration::from_millis(500))),
            Some(ConfigError::OutOfOrder { .. })
        ));
    }
}

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
/// Samples faster than `min_rtt_threshold` are ignored (cache hits and other answers that never
/// reached the service). A window closes with the first sample finishing after its end
/// (that sample included); the next one then lasts twice the closed window's lowest latency,
/// kept within `[min_window, max_window]`. A closed window with at least `min_samples`
/// samples becomes one sample: its [`WindowAggregate`] latency, its largest in-flight count,
/// and the worst outcome in it (a timeout, else a drop, else ok). The first sample makes a
/// window of its own, as in Netflix's code, which starts with a window already over.
///
/// Defaults (Netflix's): `min_window` and `max_window` 1 s, `min_samples` 10,
/// `min_rtt_threshold` 100 µs, [`WindowAggregate::Average`]; reservoir 1000 and `seed` 0 for a
/// percentile.
///
/// ```
/// use sluicegate::adaptive::{Aimd, Controller, Sample, Windowed};
/// use std::time::Duration;
///
/// let aimd = Aimd::builder().min_limit(1).initial_limit(10).build()?;
/// let mut windowed = Windowed::builder(aimd)
///     .min_samples(2)
///     .max_window(Duration::from_secs(2))
///     .build()?;
/// windowed.on_sample(0, Sample::ok(0, 1_000, 10)); // a window of its own, too small
/// for t in [1, 2, 3] {
///     windowed.on_sample(t * 100_000, Sample::ok(0, 1_000, 10));
/// }
/// assert_eq!(windowed.limit(), 10); // one window still open
/// windowed.on_sample(1_000_001, Sample::ok(0, 1_000, 10));
/// assert_eq!(windowed.limit(), 11); // one increase for the whole window
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Windowed<C> {
    inner: C,
    min_window: Micros,
    max_window: Micros,
    min_samples: u64,
    min_rtt_threshold: Micros,
    aggregate: WindowAggregate,
    /// When the current window ends (`None` before the first sample).
    next_update: Option<Micros>,
    window: Window,
}

/// Builds a [`Windowed`] around a controller.
#[derive(Debug, Clone)]
pub struct WindowedBuilder<C> {
    inner: C,
    min_window: Duration,
    max_window: Duration,
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

    /// The fewest samples a window needs to be passed on (at least 1).
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
            min_samples: self.min_samples.into(),
            min_rtt_threshold: micros_ceil(self.min_rtt_threshold),
            aggregate: self.aggregate,
            next_update: None,
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
        if sample.rtt < self.min_rtt_threshold {
            return self.inner.limit();
        }
        self.window.add(sample);
        if self.next_update.is_none_or(|end| now > end) {
            let window = &mut self.window;
            let length = window.min_rtt.saturating_mul(2);
            self.next_update =
                Some(now.saturating_add(length.clamp(self.min_window, self.max_window)));
            let rtt = window.summary(self.aggregate);
            let ready = window.count >= self.min_samples;
            let (in_flight, outcome) = (window.max_in_flight, window.outcome);
            window.reset();
            if let Some(rtt) = rtt.filter(|_| ready) {
                let summary = Sample {
                    start: sample.start,
                    rtt,
                    in_flight,
                    outcome,
                };
                return self.inner.on_sample(now, summary);
            }
        }
        self.inner.limit()
    }

    fn limit(&self) -> u32 {
        self.inner.limit()
    }
}

/// What a window has seen so far.
#[derive(Debug, Clone)]
struct Window {
    min_rtt: Micros,
    sum: u128,
    count: u64,
    max_in_flight: u32,
    outcome: Outcome,
    reservoir: Option<Reservoir>,
}

impl Window {
    fn new(reservoir: Option<Reservoir>) -> Window {
        Window {
            min_rtt: Micros::MAX,
            sum: 0,
            count: 0,
            max_in_flight: 0,
            outcome: Outcome::Ok,
            reservoir,
        }
    }

    fn add(&mut self, sample: Sample) {
        self.min_rtt = self.min_rtt.min(sample.rtt);
        self.sum += u128::from(sample.rtt);
        self.count += 1;
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        self.outcome = match (self.outcome, sample.outcome) {
            (Outcome::Timeout, _) | (_, Outcome::Timeout) => Outcome::Timeout,
            (Outcome::Dropped, _) | (_, Outcome::Dropped) => Outcome::Dropped,
            _ => Outcome::Ok,
        };
        if let Some(reservoir) = &mut self.reservoir {
            reservoir.push(sample.rtt);
        }
    }

    fn reset(&mut self) {
        let mut reservoir = self.reservoir.take();
        if let Some(r) = &mut reservoir {
            r.clear();
        }
        *self = Window::new(reservoir);
    }

    fn summary(&mut self, aggregate: WindowAggregate) -> Option<Micros> {
        match aggregate {
            WindowAggregate::Average => {
                let mean = self.sum.checked_div(u128::from(self.count))?;
                Some(u64::try_from(mean).unwrap_or(Micros::MAX))
            }
            WindowAggregate::Percentile(p) => self.reservoir.as_mut()?.percentile(p),
        }
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

    #[test]
    fn summarizes_each_window() -> Result<(), ConfigError> {
        let mut w = Windowed::builder(Recorder::default())
            .min_samples(2)
            .min_window(Duration::from_millis(100))
            .max_window(Duration::from_millis(500))
            .build()?;
        // The first sample makes a window of its own, too small to pass on; the next closes
        // after 0 + clamp(2 * 10 ms, 100 ms, 500 ms) = 100 ms.
        w.on_sample(0, Sample::ok(0, 10 * MS, 3));
        w.on_sample(50 * MS, Sample::ok(40 * MS, 10 * MS, 7));
        w.on_sample(100 * MS, Sample::dropped(70 * MS, 30 * MS, 5));
        assert!(w.inner().seen.is_empty(), "100 ms is not after the end");
        // 101 ms closes it, this sample included: mean (10 + 30 + 60) / 3 ms, max in flight 7,
        // a drop. Its lowest latency, 10 ms, makes the next window 100 ms long again.
        w.on_sample(101 * MS, Sample::ok(41 * MS, 60 * MS, 2));
        assert_eq!(
            w.inner().seen,
            vec![(101 * MS, Sample::dropped(41 * MS, 100 * MS / 3, 7))]
        );
        // The next window ends at 201 ms. 90 µs is under the 100 µs threshold: ignored.
        w.on_sample(150 * MS, Sample::timeout(0, 90, 9));
        w.on_sample(202 * MS, Sample::ok(0, 300 * MS, 1));
        // A window of one sample is too small to pass on; its 300 ms minimum makes the next
        // window 500 ms (the maximum, under 600).
        assert_eq!(w.inner().seen.len(), 1);
        w.on_sample(700 * MS, Sample::timeout(0, 250 * MS, 1));
        w.on_sample(702 * MS, Sample::ok(0, 250 * MS, 1));
        w.on_sample(703 * MS, Sample::ok(0, 250 * MS, 1));
        assert_eq!(w.inner().seen.len(), 2);
        assert_eq!(
            w.inner().seen[1],
            (703 * MS, Sample::timeout(0, 250 * MS, 1))
        );
        Ok(())
    }

    #[test]
    fn percentile_summary() -> Result<(), ConfigError> {
        let mut w = Windowed::builder(Recorder::default())
            .aggregate(WindowAggregate::Percentile(0.9))
            .min_samples(1)
            .build()?;
        w.on_sample(0, Sample::ok(0, 1_000, 1));
        for rtt in 1..=10 {
            w.on_sample(500 * MS, Sample::ok(0, rtt * 1_000, 1));
        }
        w.on_sample(2_000 * MS, Sample::ok(0, 1_000, 1));
        // The first sample was a window of its own; then 1..10 ms and the closing sample's
        // 1 ms: the 10th of 11 (ceil(0.9 * 11) = 10) is 9 ms.
        let rtts: Vec<Micros> = w.inner().seen.iter().map(|(_, s)| s.rtt).collect();
        assert_eq!(rtts, [1_000, 9_000]);
        Ok(())
    }

    #[test]
    fn aimd_moves_once_per_window() -> Result<(), ConfigError> {
        let aimd = Aimd::builder().min_limit(1).initial_limit(10).build()?;
        let mut w = Windowed::builder(aimd).build()?;
        w.on_sample(0, Sample::ok(0, 1_000, 10));
        for i in 1..=50 {
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
    }
}

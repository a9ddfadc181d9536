//! Decision latency percentiles over the last minute.
//!
//! A ring of 60 one-second histograms, each a fixed log-linear histogram of
//! [`LATENCY_BUCKETS`] counters: values 0 to 7 µs exactly, then four buckets per power of two
//! up to 2^24 µs (16.8 s), then one overflow bucket. Four per octave keep a reported value
//! within 12.5% of the true one with a small, fixed table (an HDR histogram at this resolution
//! would be the same idea with a bigger table). Every counter is a [`LapCell`], the same packed
//! lap-and-count word as [`super::SecondCounts`]: recording is lock-free and allocation-free,
//! exact under concurrency with the same bounds (see `windows`), and a second's histogram
//! needs no reset phase when its slot is reused, since each counter restarts on its own CAS.

use sluicegate::Micros;

use super::windows::{LapCell, ring_position, second_of};

/// The window the percentiles cover: the current second and the 59 before it.
pub(crate) const LATENCY_WINDOW_SECONDS: usize = 60;

/// Two mantissa bits: four buckets per power of two.
const SUB_BUCKET_BITS: u32 = 2;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;

/// Latencies from here up share the overflow bucket and are reported as this value.
pub(crate) const LATENCY_OVERFLOW_MICROS: u64 = 1 << 24;

/// The number of buckets per second: 93 (8 exact, 84 log-linear, 1 overflow).
pub(crate) const LATENCY_BUCKETS: usize = bucket_of(LATENCY_OVERFLOW_MICROS) + 1;

/// The bucket a latency of `micros` falls in.
const fn bucket_of(micros: u64) -> usize {
    if micros < SUB_BUCKETS {
        return micros as usize;
    }
    let value = if micros > LATENCY_OVERFLOW_MICROS {
        LATENCY_OVERFLOW_MICROS
    } else {
        micros
    };
    // The exponent of the leading bit, then the next SUB_BUCKET_BITS bits below it.
    let exponent = 63 - value.leading_zeros();
    let sub = (value >> (exponent - SUB_BUCKET_BITS)) & (SUB_BUCKETS - 1);
    ((exponent - SUB_BUCKET_BITS + 1) as u64 * SUB_BUCKETS + sub) as usize
}

/// The smallest latency in bucket `index`.
const fn bucket_low(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return index;
    }
    let exponent = index / SUB_BUCKETS + SUB_BUCKET_BITS as u64 - 1;
    let sub = index % SUB_BUCKETS;
    (SUB_BUCKETS + sub) << (exponent - SUB_BUCKET_BITS as u64)
}

/// The value reported for bucket `index`: the middle of the bucket (exact where a bucket holds
/// one value), or the overflow bound. Within `value / 8` of every value in the bucket below
/// the overflow.
const fn bucket_value(index: usize) -> u64 {
    if index + 1 >= LATENCY_BUCKETS {
        return LATENCY_OVERFLOW_MICROS;
    }
    let low = bucket_low(index);
    low + (bucket_low(index + 1) - low - 1) / 2
}

/// Decision latencies over the last [`LATENCY_WINDOW_SECONDS`] seconds. Memory fixed at
/// 60 × 93 × 8 bytes (44.6 KB).
#[derive(Debug)]
pub(crate) struct LatencyWindow {
    /// Second `s`'s histogram is `cells[(s % 60) * LATENCY_BUCKETS..][..LATENCY_BUCKETS]`.
    cells: Box<[LapCell]>,
}

impl Default for LatencyWindow {
    fn default() -> LatencyWindow {
        LatencyWindow::new()
    }
}

impl LatencyWindow {
    /// An empty window.
    pub(crate) fn new() -> LatencyWindow {
        LatencyWindow {
            cells: (0..LATENCY_WINDOW_SECONDS * LATENCY_BUCKETS)
                .map(|_| LapCell::default())
                .collect(),
        }
    }

    /// Records one decision that took `micros`, finished at `now`. Lock-free and
    /// allocation-free: a few integer operations, one load and one atomic add (plus a CAS the
    /// first time a bucket is used in a second).
    pub(crate) fn record(&self, now: Micros, micros: u64) {
        let (slot, lap) = ring_position(second_of(now), LATENCY_WINDOW_SECONDS);
        self.cells[slot * LATENCY_BUCKETS + bucket_of(micros)].add(lap, 1);
    }

    /// The window's histogram at `now`: second by second from `now`'s back 60 seconds.
    fn histogram(&self, now: Micros) -> [u64; LATENCY_BUCKETS] {
        let mut sum = [0; LATENCY_BUCKETS];
        let current = second_of(now);
        for back in 0..LATENCY_WINDOW_SECONDS as u64 {
            let Some(second) = current.checked_sub(back) else {
                break;
            };
            let (slot, lap) = ring_position(second, LATENCY_WINDOW_SECONDS);
            let cells = &self.cells[slot * LATENCY_BUCKETS..][..LATENCY_BUCKETS];
            for (total, cell) in sum.iter_mut().zip(cells) {
                *total += cell.get(lap);
            }
        }
        sum
    }

    /// The number of decisions recorded in the window at `now`.
    pub(crate) fn count(&self, now: Micros) -> u64 {
        self.histogram(now).iter().sum()
    }

    /// The latency at each quantile of `quantiles` (0.5 is the median; each clamped to 0..=1,
    /// NaN read as 0) over the window at `now`, in microseconds: the smallest bucket holding at
    /// least `ceil(q × count)` decisions, as [`bucket_value`] reports it (within 12.5% below
    /// 16.8 s; the overflow bucket reports 16.8 s). All zeros when the window is empty (check
    /// [`Self::count`]). Cost: 5,580 atomic loads, whatever the traffic.
    pub(crate) fn percentiles(&self, now: Micros, quantiles: &[f64]) -> Vec<u64> {
        let histogram = self.histogram(now);
        let count: u64 = histogram.iter().sum();
        if count == 0 {
            return vec![0; quantiles.len()];
        }
        quantiles
            .iter()
            .map(|&q| {
                let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
                // The f64 product is exact enough: a rank off by one ULP lands in the same
                // or the adjacent decision, not a different order of magnitude.
                let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
                let mut seen = 0;
                for (index, &n) in histogram.iter().enumerate() {
                    seen += n;
                    if seen >= rank {
                        return bucket_value(index);
                    }
                }
                bucket_value(LATENCY_BUCKETS - 1)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::live::windows::MICROS_PER_SECOND as S;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, LogNormal};

    const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

    /// The exact percentile of a sorted sample, by the same rank rule.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn assert_within_bucket(reported: u64, truth: u64) {
        assert_eq!(
            bucket_of(reported),
            bucket_of(truth),
            "reported {reported} for {truth}: not the same bucket"
        );
        assert!(
            reported.abs_diff(truth) <= truth / 8,
            "reported {reported} for {truth}: more than 12.5% off"
        );
    }

    #[test]
    fn the_buckets_tile_the_range_and_report_within_an_eighth() {
        assert_eq!(LATENCY_BUCKETS, 93);
        assert_eq!(bucket_low(0), 0);
        for index in 0..LATENCY_BUCKETS - 1 {
            let (low, high) = (bucket_low(index), bucket_low(index + 1));
            assert!(low < high);
            assert_eq!(bucket_of(low), index);
            assert_eq!(bucket_of(high - 1), index);
            let value = bucket_value(index);
            assert!((low..high).contains(&value));
            assert!(value - low <= low / 8 && high - 1 - value <= low / 8);
        }
        assert_eq!(bucket_of(LATENCY_OVERFLOW_MICROS), LATENCY_BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
        for micros in (0..1 << 16).chain((0..4_000).map(|i| i * 4_100 + 65_536)) {
            assert_within_bucket(bucket_value(bucket_of(micros)), micros);
        }
    }

    #[test]
    fn percentiles_of_a_uniform_spread_are_within_the_bucket_error() {
        let window = LatencyWindow::new();
        let t = 1_760_000_000 * S;
        let sample: Vec<u64> = (1..=10_000).collect();
        for &micros in &sample {
            window.record(t + micros, micros);
        }
        assert_eq!(window.count(t), 10_000);
        let got = window.percentiles(t, &QUANTILES);
        for (&q, &reported) in QUANTILES.iter().zip(&got) {
            assert_within_bucket(reported, exact(&sample, q));
        }
        // 0 and 1 are the smallest and largest buckets; 1 µs is its own bucket.
        assert_eq!(window.percentiles(t, &[0.0, f64::NAN, -1.0]), vec![1, 1, 1]);
        assert_within_bucket(window.percentiles(t, &[1.0, 2.0])[1], 10_000);
    }

    #[test]
    fn percentiles_of_a_log_normal_minute_are_within_the_bucket_error() {
        // Redis-like latencies: median about 400 µs with a long tail, spread over 60 seconds.
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let distribution = LogNormal::new(6.0, 1.0).expect("valid parameters");
        let window = LatencyWindow::new();
        let t0 = 1_760_000_000 * S;
        let mut sample = Vec::with_capacity(120_000);
        for i in 0..120_000u64 {
            let micros = distribution.sample(&mut rng) as u64;
            window.record(t0 + i * 500, micros);
            sample.push(micros);
        }
        sample.sort_unstable();
        let now = t0 + 59 * S + S / 2;
        assert_eq!(window.count(now), 120_000);
        let got = window.percentiles(now, &QUANTILES);
        for (&q, &reported) in QUANTILES.iter().zip(&got) {
            assert_within_bucket(reported, exact(&sample, q));
        }
    }

    #[test]
    fn the_window_is_the_last_sixty_seconds() {
        let window = LatencyWindow::new();
        assert_eq!(window.percentiles(0, &QUANTILES), vec![0; 4]);
        window.record(0, 1_000);
        window.record(59 * S + 3, 10);
        assert_eq!(window.count(59 * S), 2);
        let thousand = bucket_value(bucket_of(1_000));
        assert_eq!(window.percentiles(59 * S, &[0.5, 1.0]), vec![10, thousand]);
        // At second 60, second 0 has left the window.
        assert_eq!(window.count(60 * S), 1);
        assert_eq!(window.percentiles(60 * S, &[0.5, 1.0]), vec![10, 10]);
        // Second 60 reuses second 0's slot; the old count does not come back.
        window.record(60 * S, 6_000);
        window.record(60 * S, 100_000_000);
        assert_eq!(window.count(60 * S), 3);
        let got = window.percentiles(60 * S, &[0.3, 0.6, 1.0]);
        assert_eq!((got[0], got[2]), (10, LATENCY_OVERFLOW_MICROS));
        assert_within_bucket(got[1], 6_000);
        // A late record for second 0 stays in second 0, outside the window, not in second 60.
        window.record(S / 2, 1_000);
        assert_eq!(window.count(60 * S), 3);
        // Long after, everything is gone.
        assert_eq!(window.count(600 * S), 0);
        window.record(u64::MAX, u64::MAX);
        assert_eq!(window.count(u64::MAX), 1);
    }
}

//! A bounded uniform sample of a window's latencies (reservoir sampling, Vitter's algorithm R),
//! and the seeded random source it and the jittered controllers draw from.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use crate::clock::Micros;

/// A seeded generator: the same seed gives the same jitter and the same reservoir, run after
/// run. ChaCha8 rather than a faster generator because its output is fixed by its
/// specification, not by the version of a crate.
#[derive(Debug, Clone)]
pub(crate) struct SeededRng(ChaCha8Rng);

impl SeededRng {
    pub(crate) fn new(seed: u64) -> SeededRng {
        SeededRng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform in `[0, 1)`, from the top 53 bits (a double's precision).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)` (0 for `n == 0`), by multiplying out (Lemire): the bias, below
    /// `n / 2^64`, is far under anything a latency sample can notice.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.0.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// At most `capacity` values, each of those offered so far equally likely to be among them.
#[derive(Debug, Clone)]
pub(crate) struct Reservoir {
    values: Vec<Micros>,
    capacity: usize,
    seen: u64,
    rng: SeededRng,
}

impl Reservoir {
    pub(crate) fn new(capacity: usize, seed: u64) -> Reservoir {
        Reservoir {
            // Grown on demand: a large capacity costs nothing on a quiet limiter.
            values: Vec::new(),
            capacity: capacity.max(1),
            seen: 0,
            rng: SeededRng::new(seed),
        }
    }

    pub(crate) fn push(&mut self, value: Micros) {
        self.seen = self.seen.saturating_add(1);
        if self.values.len() < self.capacity {
            self.values.push(value);
            return;
        }
        let slot = self.rng.below(self.seen);
        if let Some(kept) = usize::try_from(slot)
            .ok()
            .and_then(|slot| self.values.get_mut(slot))
        {
            *kept = value;
        }
    }

    /// Values offered since the last clear (not only those kept).
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }

    /// The nearest-rank `percentile` (in `(0, 1]`) of the values kept: the smallest value with
    /// at least that fraction of them at or below it. `None` when empty.
    pub(crate) fn percentile(&mut self, percentile: f64) -> Option<Micros> {
        if self.values.is_empty() {
            return None;
        }
        self.values.sort_unstable();
        let n = self.values.len();
        let rank = (percentile * n as f64).ceil() as usize;
        self.values.get(rank.clamp(1, n) - 1).copied()
    }

    /// The values kept (all of them while fewer than `capacity` were offered), unordered.
    pub(crate) fn kept(&self) -> &[Micros] {
        &self.values
    }

    pub(crate) fn clear(&mut self) {
        self.values.clear();
        self.seen = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut r = Reservoir::new(100, 0);
        assert_eq!(r.percentile(0.9), None);
        for v in (1..=10).rev() {
            r.push(v * 10);
        }
        assert_eq!(r.percentile(0.9), Some(90));
        assert_eq!(r.percentile(0.99), Some(100));
        assert_eq!(r.percentile(0.5), Some(50));
        assert_eq!(r.percentile(0.01), Some(10));
        assert_eq!(r.percentile(1.0), Some(100));
        r.clear();
        assert_eq!(r.seen(), 0);
        assert_eq!(r.percentile(0.5), None);
    }

    #[test]
    fn bounded_and_roughly_uniform() {
        let mut r = Reservoir::new(1000, 7);
        for v in 0..100_000 {
            r.push(v);
        }
        assert_eq!(r.values.len(), 1000);
        assert_eq!(r.seen(), 100_000);
        // A uniform sample of 0..100000 has its median near 50000 (the standard error of
        // a 1000-value sample's median is about 1600).
        let median = r.percentile(0.5).unwrap_or(0);
        assert!((40_000..60_000).contains(&median), "{median}");
    }

    #[test]
    fn seeded_is_repeatable() {
        let mut a = SeededRng::new(42);
        let mut b = SeededRng::new(42);
        for _ in 0..10 {
            let x = a.unit();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x, b.unit());
            assert!(a.below(7) < 7);
            b.below(7);
        }
        assert_eq!(a.below(0), 0);
    }
}

//! Counts per one-second bucket over the last N seconds, recorded on the hot path of every
//! decision.
//!
//! The ring's buckets are single `AtomicU64`s that pack the bucket's *lap* (which pass of the
//! ring, `second / N`) with its count, so a bucket is moved to a new second and its old count
//! dropped by one compare-and-swap: no lock, no reset phase during which other threads' counts
//! could be lost, no allocation.
//!
//! Bounds, stated once for [`SecondCounts`] and the latency window built on the same cell:
//! - Single-threaded: exact.
//! - Concurrent: no count is ever lost when a bucket is reused, since reuse is a CAS from the
//!   old lap to the new one and every add either lands before it (in the old second, which was
//!   leaving the window anyway) or after it. The one inexactness: a thread that reads a bucket
//!   as holding its second, then stalls for about N seconds (other threads meanwhile recording
//!   N seconds later and reusing that bucket) before its `fetch_add`, adds its count to the
//!   newer second. An add whose second is older than the bucket's is dropped, as it is outside
//!   the window of any reader at the newer time.
//! - A bucket saturates at `u32::MAX` (4.29e9) counts per second.
//! - Laps are `u32`: a ring of N seconds is correct until second `2^32 × N` (N = 1: the year
//!   2106; N = 300: forty thousand years).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use sluicegate::Micros;

/// Microseconds in one bucket.
pub(crate) const MICROS_PER_SECOND: Micros = 1_000_000;

/// The page's window: five minutes at one-second resolution (issue 12).
pub(crate) const DEFAULT_SECONDS: usize = 300;

const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The fast path (`fetch_add` without a CAS) is taken only below this count and for adds of at
/// most [`FAST_ADD_MAX`]: a carry into the lap bits would then need more than
/// `(2^32 - 2^31) / 2^16 = 32768` fast adds in flight between their check and their add, that
/// is, more threads than a process has. Above it adds go through the saturating CAS loop.
const FAST_COUNT_LIMIT: u64 = 1 << 31;
const FAST_ADD_MAX: u64 = 1 << 16;

/// One count of a ring of seconds, tagged with the lap of the ring it belongs to.
#[derive(Debug, Default)]
pub(super) struct LapCell(AtomicU64);

impl LapCell {
    fn pack(lap: u32, count: u64) -> u64 {
        (u64::from(lap) << COUNT_BITS) | count.min(COUNT_MASK)
    }

    fn lap_of(word: u64) -> u32 {
        (word >> COUNT_BITS) as u32
    }

    fn count_of(word: u64) -> u64 {
        word & COUNT_MASK
    }

    /// Adds `n` to this cell's count for `lap`: continues it if the cell holds `lap`, starts it
    /// at `n` if the cell holds an older lap, drops `n` if it holds a newer one. One load and one
    /// `fetch_add` in the common case; a CAS once per lap, or when near saturation.
    pub(super) fn add(&self, lap: u32, n: u64) {
        if n == 0 {
            return;
        }
        // Relaxed throughout: each cell is an independent statistic; readers need no ordering
        // with anything else, and the packed word makes lap and count change together.
        let mut current = self.0.load(Ordering::Relaxed);
        if Self::lap_of(current) == lap
            && Self::count_of(current) < FAST_COUNT_LIMIT
            && n <= FAST_ADD_MAX
        {
            self.0.fetch_add(n, Ordering::Relaxed);
            return;
        }
        loop {
            let held = Self::lap_of(current);
            let next = if held == lap {
                Self::pack(lap, Self::count_of(current).saturating_add(n))
            } else if held < lap {
                Self::pack(lap, n)
            } else {
                return;
            };
            if next == current {
                // Saturated: nothing to write.
                return;
            }
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// This cell's count if it holds `lap`, else zero (it holds another second).
    pub(super) fn get(&self, lap: u32) -> u64 {
        let word = self.0.load(Ordering::Relaxed);
        if Self::lap_of(word) == lap {
            Self::count_of(word)
        } else {
            0
        }
    }
}

/// Where `second` lives in a ring of `len` seconds: its index and its lap.
pub(super) fn ring_position(second: u64, len: usize) -> (usize, u32) {
    let len = len as u64;
    ((second % len) as usize, (second / len) as u32)
}

/// The whole second `now` falls in.
pub(super) fn second_of(now: Micros) -> u64 {
    now / MICROS_PER_SECOND
}

/// Counts per one-second bucket over the last `seconds()` seconds (see the module docs for the
/// exactness bounds). Memory: 8 bytes per second of window, fixed at construction.
#[derive(Debug)]
pub(crate) struct SecondCounts {
    cells: Box<[LapCell]>,
}

impl Default for SecondCounts {
    fn default() -> SecondCounts {
        SecondCounts::new(DEFAULT_SECONDS)
    }
}

impl SecondCounts {
    /// A window of `seconds` one-second buckets (at least one).
    pub(crate) fn new(seconds: usize) -> SecondCounts {
        SecondCounts {
            cells: (0..seconds.max(1)).map(|_| LapCell::default()).collect(),
        }
    }

    /// The window's length in seconds, which is also the length of [`Self::per_second`].
    #[cfg(test)]
    pub(crate) fn seconds(&self) -> usize {
        self.cells.len()
    }

    /// Counts `n` at `now`. Lock-free and allocation-free: one load and one atomic add, plus a
    /// CAS the first time each second is counted.
    pub(crate) fn add(&self, now: Micros, n: u64) {
        let (index, lap) = ring_position(second_of(now), self.cells.len());
        self.cells[index].add(lap, n);
    }

    /// The count of the whole second `second` (seconds since the epoch), zero if it has left the
    /// ring or was never counted.
    pub(crate) fn count_at(&self, second: u64) -> u64 {
        let (index, lap) = ring_position(second, self.cells.len());
        self.cells[index].get(lap)
    }

    /// The count of each of the last `seconds()` seconds, oldest first; the last entry is the
    /// second `now` falls in (still filling). Always `seconds()` entries: zero for seconds with
    /// nothing counted, before the epoch, or overwritten by a later second. O(N) loads.
    pub(crate) fn per_second(&self, now: Micros) -> Vec<u64> {
        let current = second_of(now);
        let len = self.cells.len();
        (0..len)
            .map(|i| {
                let back = (len - 1 - i) as u64;
                current.checked_sub(back).map_or(0, |s| self.count_at(s))
            })
            .collect()
    }

    /// The total of the last `seconds` seconds up to and including `now`'s (clamped to the
    /// window). O(seconds) loads.
    #[cfg(test)]
    pub(crate) fn sum_last(&self, now: Micros, seconds: usize) -> u64 {
        let current = second_of(now);
        (0..seconds.min(self.cells.len()) as u64)
            .filter_map(|back| current.checked_sub(back))
            .map(|s| self.count_at(s))
            .sum()
    }
}

/// What the live page shows per rule, each a [`SecondCounts`] over the same window. Recording
/// is one [`SecondCounts::add`] on the right field. Memory: 4 × 8 bytes per second of window
/// (9.6 KB for five minutes).
#[derive(Debug)]
pub(crate) struct RuleStats {
    /// Allowed decisions.
    pub(crate) allowed: SecondCounts,
    /// Decisions answered over the limit.
    pub(crate) denied: SecondCounts,
    /// Decisions over the limit but answered OK because the rule is in shadow mode.
    pub(crate) shadow_denied: SecondCounts,
    /// Allowed decisions that used more than 80% of the limit, as the `near_limit` metric counts
    /// them (so also counted in `allowed`).
    pub(crate) near_limit: SecondCounts,
}

impl Default for RuleStats {
    fn default() -> RuleStats {
        RuleStats::new(DEFAULT_SECONDS)
    }
}

impl RuleStats {
    /// Four empty windows of `seconds` seconds.
    pub(crate) fn new(seconds: usize) -> RuleStats {
        RuleStats {
            allowed: SecondCounts::new(seconds),
            denied: SecondCounts::new(seconds),
            shadow_denied: SecondCounts::new(seconds),
            near_limit: SecondCounts::new(seconds),
        }
    }

    /// The four series at `now`, ready to serialize for the page or a script.
    pub(crate) fn series(&self, now: Micros) -> RuleSeries {
        RuleSeries {
            end_second: second_of(now),
            allowed: self.allowed.per_second(now),
            denied: self.denied.per_second(now),
            shadow_denied: self.shadow_denied.per_second(now),
            near_limit: self.near_limit.per_second(now),
        }
    }
}

/// A [`RuleStats`] read at one time: per-second counts, oldest first, all the same length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RuleSeries {
    /// The second (since the epoch) of each series' last entry, so a reader can date the others.
    pub(crate) end_second: u64,
    /// See [`RuleStats::allowed`].
    pub(crate) allowed: Vec<u64>,
    /// See [`RuleStats::denied`].
    pub(crate) denied: Vec<u64>,
    /// See [`RuleStats::shadow_denied`].
    pub(crate) shadow_denied: Vec<u64>,
    /// See [`RuleStats::near_limit`].
    pub(crate) near_limit: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    const S: Micros = MICROS_PER_SECOND;

    #[test]
    fn exact_counts_per_second_over_a_manual_sequence() {
        let counts = SecondCounts::new(5);
        counts.add(0, 1);
        counts.add(S / 2, 2);
        counts.add(S + S / 5, 3);
        counts.add(4 * S - 1, 4);
        counts.add(4 * S, 0);
        assert_eq!(counts.per_second(4 * S), vec![3, 3, 0, 4, 0]);
        assert_eq!(counts.per_second(4 * S + S - 1), vec![3, 3, 0, 4, 0]);
        assert_eq!(counts.sum_last(4 * S, 2), 4);
        assert_eq!(counts.sum_last(4 * S, 5), 10);
        assert_eq!(counts.sum_last(4 * S, 500), 10);
        assert_eq!(counts.sum_last(4 * S, 0), 0);
        // Early in time the seconds before the epoch read as zeros, still N entries.
        assert_eq!(counts.per_second(S), vec![0, 0, 0, 3, 3]);

        // Second 5 reuses second 0's bucket: second 0's count is gone, not added to.
        counts.add(5 * S + 7, 10);
        assert_eq!(counts.per_second(5 * S), vec![3, 0, 4, 0, 10]);
        // Read back at an earlier time, the bucket no longer holds second 0.
        assert_eq!(counts.per_second(4 * S), vec![0, 3, 0, 4, 0]);
        // A late add for second 0 (older than the bucket's second) is dropped.
        counts.add(0, 100);
        assert_eq!(counts.count_at(5), 10);
        assert_eq!(counts.count_at(0), 0);
        // A late add for a second still in its bucket counts.
        counts.add(3 * S, 1);
        assert_eq!(counts.per_second(5 * S), vec![3, 0, 5, 0, 10]);

        // A gap longer than the window: every older count drops out, reused buckets start over.
        counts.add(100 * S, 6);
        assert_eq!(counts.per_second(100 * S), vec![0, 0, 0, 0, 6]);
        counts.add(101 * S, 1);
        counts.add(101 * S, 1);
        assert_eq!(counts.per_second(102 * S), vec![0, 0, 6, 2, 0]);
        assert_eq!(counts.per_second(1000 * S), vec![0; 5]);
    }

    #[test]
    fn the_default_window_is_five_minutes_and_reuses_a_bucket_after_300_seconds() {
        let counts = SecondCounts::default();
        assert_eq!(counts.seconds(), 300);
        let t0 = 1_760_000_000 * S; // a real epoch time: laps are not zero
        counts.add(t0, 5);
        counts.add(t0 + 299 * S, 7);
        let series = counts.per_second(t0 + 299 * S);
        assert_eq!(series.len(), 300);
        assert_eq!((series[0], series[299]), (5, 7));
        assert_eq!(series.iter().sum::<u64>(), 12);

        counts.add(t0 + 300 * S, 1);
        let series = counts.per_second(t0 + 300 * S);
        assert_eq!((series[298], series[299]), (7, 1));
        assert_eq!(series.iter().sum::<u64>(), 8);
        assert_eq!(counts.count_at(t0 / S), 0);
    }

    #[test]
    fn large_adds_and_extreme_times_saturate_and_never_panic() {
        let counts = SecondCounts::new(3);
        counts.add(S, FAST_ADD_MAX + 1);
        counts.add(S, FAST_COUNT_LIMIT);
        assert_eq!(counts.count_at(1), FAST_ADD_MAX + 1 + FAST_COUNT_LIMIT);
        counts.add(S, u64::MAX);
        counts.add(S, 1);
        assert_eq!(counts.count_at(1), u64::from(u32::MAX));
        // The neighbouring seconds are untouched by the saturation.
        assert_eq!(counts.per_second(2 * S), vec![0, u64::from(u32::MAX), 0]);

        for now in [0, u64::MAX, u64::MAX / 2, S - 1] {
            counts.add(now, 3);
            assert_eq!(counts.per_second(now).len(), 3);
            let _ = counts.sum_last(now, usize::MAX);
        }
        let one = SecondCounts::new(0);
        assert_eq!(one.seconds(), 1);
        one.add(9 * S, 2);
        assert_eq!(one.per_second(9 * S), vec![2]);
    }

    #[test]
    fn concurrent_adds_are_exact_across_bucket_reuse() {
        // Four threads count each second in lock-step, on a four-second ring so that every
        // second after the fourth reuses a bucket with all threads racing for the reset.
        const THREADS: usize = 4;
        const ADDS: u64 = 2_000;
        const SECONDS: u64 = 40;
        let counts = Arc::new(SecondCounts::new(4));
        let barrier = Arc::new(Barrier::new(THREADS));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (counts, barrier) = (Arc::clone(&counts), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    let mut wrong = Vec::new();
                    for second in 0..SECONDS {
                        for i in 0..ADDS {
                            counts.add(second * S + (i * 997 + t as u64) % S, 1);
                        }
                        if barrier.wait().is_leader() {
                            let got = counts.count_at(second);
                            if got != THREADS as u64 * ADDS {
                                wrong.push((second, got));
                            }
                        }
                        barrier.wait();
                    }
                    wrong
                })
            })
            .collect();
        for worker in workers {
            assert_eq!(worker.join().ok(), Some(Vec::new()));
        }
        let full = THREADS as u64 * ADDS;
        assert_eq!(counts.per_second((SECONDS - 1) * S), vec![full; 4]);
    }

    #[test]
    fn rule_stats_series_line_up() {
        let stats = RuleStats::new(3);
        stats.allowed.add(10 * S, 4);
        stats.near_limit.add(10 * S, 1);
        stats.denied.add(11 * S, 2);
        stats.shadow_denied.add(12 * S, 3);
        let series = stats.series(12 * S + 5);
        assert_eq!(
            series,
            RuleSeries {
                end_second: 12,
                allowed: vec![4, 0, 0],
                denied: vec![0, 2, 0],
                shadow_denied: vec![0, 0, 3],
                near_limit: vec![1, 0, 0],
            }
        );
        let json = serde_json::to_string(&series).expect("serializes");
        assert!(json.starts_with(r#"{"end_second":12,"allowed":[4,0,0]"#));
        assert_eq!(RuleStats::default().allowed.seconds(), DEFAULT_SECONDS);
    }
}

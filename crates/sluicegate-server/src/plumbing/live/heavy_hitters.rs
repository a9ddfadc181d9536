//! The heaviest limited keys of the last minute, in memory fixed whatever the number of keys.
//!
//! Two Space-Saving sketches (Metwally, Agrawal, El Abbadi, 2005) of [`HEAVY_COUNTERS`]
//! counters each, one per minute of the epoch (`now / 60 s`), used as a ring of two: a key's
//! weight over "the last minute" at `now` is its count in the current minute plus its count
//! in the previous minute scaled by the share of that minute still inside the last 60 seconds
//! (the sliding-window-counter estimate, which assumes the previous minute's weight arrived
//! evenly). So a key last seen at `t` is reported at full weight until its minute ends, then
//! fades linearly, and is gone from the second minute boundary after `t` (60 to 120 s after
//! it).
//!
//! Accuracy. In one minute's sketch, with total weight `W`: every key heavier than
//! `W / 256` is tracked; a tracked key's count overestimates its weight by at most the
//! smallest counter, itself at most `W / 256`; an untracked key weighs at most that much. The
//! merged estimate is off by at most `W_current / 256 + share × W_previous / 256`. 256 counters
//! rather than the 4 × 20 one might start from: under a Zipf(1.1) spray over a million keys,
//! 80 counters keep only the top 14 of the true top 20, because the long tail churning
//! through the smallest counter lifts it above the 20th key (simulated; 160 was borderline,
//! 256 keeps the smallest counter near half the 20th key's weight).
//!
//! Memory: keys are truncated to [`MAX_KEY_BYTES`] (at a character boundary; keys sharing that
//! prefix are counted together) and stored inline, with an open-addressing index, so each
//! sketch is 22.8 KB and the pair 45.6 KB, allocated at construction and never again. Adding
//! is allocation-free for every key, tracked or not: a hash outside the lock, then under it a
//! probe of the index and an O(log 256) heap update.

use std::fmt;
use std::hash::BuildHasher;

use parking_lot::Mutex;
use sluicegate::Micros;

use super::windows::MICROS_PER_SECOND;

/// Counters per minute's sketch.
pub(crate) const HEAVY_COUNTERS: usize = 256;

/// Keys are kept to this many bytes.
pub(crate) const MAX_KEY_BYTES: usize = 64;

const MINUTE: Micros = 60 * MICROS_PER_SECOND;

/// The index has twice as many slots as counters, so linear probes stay short and always
/// reach an empty slot.
const TABLE_SLOTS: usize = 2 * HEAVY_COUNTERS;
const TABLE_MASK: usize = TABLE_SLOTS - 1;
const EMPTY: u16 = u16::MAX;

const _: () = assert!(TABLE_SLOTS.is_power_of_two() && TABLE_SLOTS < EMPTY as usize);
const _: () = assert!(MAX_KEY_BYTES <= u8::MAX as usize);

/// One minute's Space-Saving sketch: `used` counters, each a key (inline bytes), its hash and
/// its count; a min-heap of the counters by count, to find the one a new key takes over; an
/// index from key to counter.
struct SpaceSaving {
    /// The minute of the epoch this sketch counts; `None` before the first add.
    minute: Option<u64>,
    used: usize,
    /// All the weight added this minute (the sum of the counts, which Space-Saving keeps).
    total: u64,
    keys: Box<[[u8; MAX_KEY_BYTES]]>,
    key_lens: Box<[u8]>,
    hashes: Box<[u64]>,
    counts: Box<[u64]>,
    /// Counter numbers, a binary min-heap by count.
    heap: Box<[u16]>,
    /// Each counter's position in `heap`.
    heap_pos: Box<[u16]>,
    /// Linear-probing index: counter numbers, or `EMPTY`.
    table: Box<[u16]>,
}

impl SpaceSaving {
    fn new() -> SpaceSaving {
        SpaceSaving {
            minute: None,
            used: 0,
            total: 0,
            keys: vec![[0; MAX_KEY_BYTES]; HEAVY_COUNTERS].into_boxed_slice(),
            key_lens: vec![0; HEAVY_COUNTERS].into_boxed_slice(),
            hashes: vec![0; HEAVY_COUNTERS].into_boxed_slice(),
            counts: vec![0; HEAVY_COUNTERS].into_boxed_slice(),
            heap: vec![0; HEAVY_COUNTERS].into_boxed_slice(),
            heap_pos: vec![0; HEAVY_COUNTERS].into_boxed_slice(),
            table: vec![EMPTY; TABLE_SLOTS].into_boxed_slice(),
        }
    }

    /// Empties the sketch for `minute`: only the index needs clearing, as counters past `used`
    /// are never read.
    fn clear(&mut self, minute: u64) {
        self.minute = Some(minute);
        self.used = 0;
        self.total = 0;
        self.table.fill(EMPTY);
    }

    fn key(&self, counter: usize) -> &[u8] {
        &self.keys[counter][..usize::from(self.key_lens[counter])]
    }

    fn home(hash: u64) -> usize {
        hash as usize & TABLE_MASK
    }

    fn find(&self, key: &[u8], hash: u64) -> Option<usize> {
        let mut pos = Self::home(hash);
        loop {
            let counter = self.table[pos];
            if counter == EMPTY {
                return None;
            }
            let counter = usize::from(counter);
            if self.hashes[counter] == hash && self.key(counter) == key {
                return Some(counter);
            }
            pos = (pos + 1) & TABLE_MASK;
        }
    }

    fn index(&mut self, counter: usize) {
        let mut pos = Self::home(self.hashes[counter]);
        while self.table[pos] != EMPTY {
            pos = (pos + 1) & TABLE_MASK;
        }
        self.table[pos] = counter as u16;
    }

    /// Removes `counter` from the index by backward-shift deletion (no tombstones, so probes
    /// never lengthen however many keys churn through).
    fn unindex(&mut self, counter: usize) {
        let mut hole = Self::home(self.hashes[counter]);
        while usize::from(self.table[hole]) != counter {
            if self.table[hole] == EMPTY {
                return;
            }
            hole = (hole + 1) & TABLE_MASK;
        }
        let mut next = hole;
        loop {
            next = (next + 1) & TABLE_MASK;
            let moved = self.table[next];
            if moved == EMPTY {
                break;
            }
            // An entry may move back into the hole unless its home lies cyclically in
            // (hole, next]: then the hole is before its home, where a probe would not look.
            let home = Self::home(self.hashes[usize::from(moved)]);
            let stays = if hole <= next {
                hole < home && home <= next
            } else {
                hole < home || home <= next
            };
            if !stays {
                self.table[hole] = moved;
                hole = next;
            }
        }
        self.table[hole] = EMPTY;
    }

    fn set_key(&mut self, counter: usize, key: &[u8], hash: u64) {
        self.keys[counter][..key.len()].copy_from_slice(key);
        self.key_lens[counter] = key.len() as u8;
        self.hashes[counter] = hash;
    }

    fn add(&mut self, key: &[u8], hash: u64, weight: u64) {
        self.total = self.total.saturating_add(weight);
        if let Some(counter) = self.find(key, hash) {
            self.counts[counter] = self.counts[counter].saturating_add(weight);
            self.sift_down(usize::from(self.heap_pos[counter]));
            return;
        }
        if self.used < HEAVY_COUNTERS {
            let counter = self.used;
            self.used += 1;
            self.set_key(counter, key, hash);
            self.counts[counter] = weight;
            self.index(counter);
            self.heap[counter] = counter as u16;
            self.heap_pos[counter] = counter as u16;
            self.sift_up(counter);
            return;
        }
        // Space-Saving: the new key takes over the smallest counter, keeping its count (an
        // upper bound of what the new key may have had while untracked).
        let counter = usize::from(self.heap[0]);
        self.unindex(counter);
        self.set_key(counter, key, hash);
        self.counts[counter] = self.counts[counter].saturating_add(weight);
        self.index(counter);
        self.sift_down(0);
    }

    fn heap_count(&self, pos: usize) -> u64 {
        self.counts[usize::from(self.heap[pos])]
    }

    fn heap_swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.heap_pos[usize::from(self.heap[a])] = a as u16;
        self.heap_pos[usize::from(self.heap[b])] = b as u16;
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if self.heap_count(parent) <= self.heap_count(pos) {
                break;
            }
            self.heap_swap(pos, parent);
            pos = parent;
        }
    }

    /// Counts only grow, so a counter only ever moves down the min-heap.
    fn sift_down(&mut self, mut pos: usize) {
        loop {
            let left = 2 * pos + 1;
            if left >= self.used {
                return;
            }
            let right = left + 1;
            let child = if right < self.used && self.heap_count(right) < self.heap_count(left) {
                right
            } else {
                left
            };
            if self.heap_count(pos) <= self.heap_count(child) {
                return;
            }
            self.heap_swap(pos, child);
            pos = child;
        }
    }
}

/// `key` cut to at most [`MAX_KEY_BYTES`] bytes at a character boundary.
fn truncate(key: &str) -> &str {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = MAX_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

/// The heaviest keys of the last minute (see the module docs for what that means exactly and
/// the accuracy). Thread-safe behind one short lock.
pub(crate) struct HeavyHitters {
    /// Seeded per instance, so keys chosen to collide in one process's index do not in another.
    hasher: foldhash::fast::RandomState,
    /// Indexed by minute % 2.
    minutes: Mutex<[SpaceSaving; 2]>,
}

impl fmt::Debug for HeavyHitters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeavyHitters").finish_non_exhaustive()
    }
}

impl Default for HeavyHitters {
    fn default() -> HeavyHitters {
        HeavyHitters::new()
    }
}

impl HeavyHitters {
    /// An empty pair of sketches (45.6 KB, all of it allocated here).
    pub(crate) fn new() -> HeavyHitters {
        HeavyHitters {
            hasher: foldhash::fast::RandomState::default(),
            minutes: Mutex::new([SpaceSaving::new(), SpaceSaving::new()]),
        }
    }

    /// Adds `weight` to `key` (truncated to [`MAX_KEY_BYTES`]) at `now`. Allocation-free;
    /// under the lock: an index probe, a key compare, a heap update of at most 8 levels, and
    /// once a minute a 1 KB clear. An add for a minute older than the one its sketch now holds
    /// (more than a minute late) is dropped.
    pub(crate) fn add(&self, now: Micros, key: &str, weight: u64) {
        if weight == 0 {
            return;
        }
        let key = truncate(key).as_bytes();
        let hash = self.hasher.hash_one(key);
        let minute = now / MINUTE;
        let mut minutes = self.minutes.lock();
        let sketch = &mut minutes[(minute % 2) as usize];
        match sketch.minute {
            Some(held) if held == minute => {}
            Some(held) if held > minute => return,
            _ => sketch.clear(minute),
        }
        sketch.add(key, hash, weight);
    }

    /// The `n` heaviest keys of the last minute at `now`, heaviest first (ties by key), with
    /// their estimated weights; at most 2 × 256 entries whatever `n`. Costs about 512 index
    /// probes and a partial sort under the lock, and `n` string allocations.
    pub(crate) fn top(&self, now: Micros, n: usize) -> Vec<(String, u64)> {
        let minute = now / MINUTE;
        let remaining = MINUTE - now % MINUTE;
        let scaled =
            |count: u64| (u128::from(count) * u128::from(remaining) / u128::from(MINUTE)) as u64;
        let minutes = self.minutes.lock();
        let current = minutes.iter().find(|s| s.minute == Some(minute));
        let previous = minute
            .checked_sub(1)
            .and_then(|before| minutes.iter().find(|s| s.minute == Some(before)));

        let mut weighted: Vec<(&[u8], u64)> = Vec::with_capacity(2 * HEAVY_COUNTERS);
        if let Some(current) = current {
            for counter in 0..current.used {
                let (key, hash) = (current.key(counter), current.hashes[counter]);
                let before = previous
                    .and_then(|p| p.find(key, hash).map(|c| scaled(p.counts[c])))
                    .unwrap_or(0);
                weighted.push((key, current.counts[counter].saturating_add(before)));
            }
        }
        if let Some(previous) = previous {
            for counter in 0..previous.used {
                let (key, hash) = (previous.key(counter), previous.hashes[counter]);
                if current.is_some_and(|c| c.find(key, hash).is_some()) {
                    continue;
                }
                let weight = scaled(previous.counts[counter]);
                if weight > 0 {
                    weighted.push((key, weight));
                }
            }
        }

        // Ties broken by key so that a polling page's order does not flicker.
        let order = |a: &(&[u8], u64), b: &(&[u8], u64)| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0));
        let n = n.min(weighted.len());
        if n == 0 {
            return Vec::new();
        }
        if n < weighted.len() {
            weighted.select_nth_unstable_by(n - 1, order);
            weighted.truncate(n);
        }
        weighted.sort_unstable_by(order);
        weighted
            .into_iter()
            .map(|(key, weight)| (String::from_utf8_lossy(key).into_owned(), weight))
            .collect()
    }

    /// All the weight of the last minute at `now`, on the same sliding estimate as
    /// [`Self::top`] (so a key's share of the limited traffic can be shown).
    #[cfg(test)]
    pub(crate) fn total(&self, now: Micros) -> u64 {
        let minute = now / MINUTE;
        let remaining = MINUTE - now % MINUTE;
        let minutes = self.minutes.lock();
        let current = minutes
            .iter()
            .find(|s| s.minute == Some(minute))
            .map_or(0, |s| s.total);
        let previous = minute
            .checked_sub(1)
            .and_then(|before| minutes.iter().find(|s| s.minute == Some(before)))
            .map_or(0, |s| {
                (u128::from(s.total) * u128::from(remaining) / u128::from(MINUTE)) as u64
            });
        current.saturating_add(previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, Zipf};
    use std::collections::HashMap;
    use std::fmt::Write;

    const S: Micros = MICROS_PER_SECOND;

    impl SpaceSaving {
        /// The structure's invariants: heap order and positions, an index holding exactly the
        /// used counters, and Space-Saving's counts summing to the total weight.
        fn check(&self) {
            for pos in 0..self.used {
                assert_eq!(usize::from(self.heap_pos[usize::from(self.heap[pos])]), pos);
                if pos > 0 {
                    assert!(self.heap_count((pos - 1) / 2) <= self.heap_count(pos));
                }
            }
            for counter in 0..self.used {
                assert_eq!(
                    self.find(self.key(counter), self.hashes[counter]),
                    Some(counter)
                );
            }
            let indexed = self.table.iter().filter(|&&c| c != EMPTY).count();
            assert_eq!(indexed, self.used);
            assert_eq!(self.counts[..self.used].iter().sum::<u64>(), self.total);
        }

        /// The memory is the construction's: the same boxed slices, never grown.
        fn assert_fixed_size(&self) {
            assert!(self.used <= HEAVY_COUNTERS);
            assert_eq!(self.keys.len(), HEAVY_COUNTERS);
            assert_eq!(self.counts.len(), HEAVY_COUNTERS);
            assert_eq!(self.heap.len(), HEAVY_COUNTERS);
            assert_eq!(self.table.len(), TABLE_SLOTS);
        }
    }

    #[test]
    fn finds_the_true_top_keys_of_a_zipf_spray_in_fixed_memory() {
        // 1,000,000 draws under --release; 200,000 in debug builds to stay fast (the counts
        // scale, the ranks and the sketch's relative accuracy do not change).
        let draws: u64 = if cfg!(debug_assertions) {
            200_000
        } else {
            1_000_000
        };
        // A seed whose 20th and 21st keys are well apart in both modes (ranks 20 and 21 differ
        // by about 6% in expectation, so some seeds nearly tie them at 200,000 draws).
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let zipf = Zipf::new(1_000_000.0, 1.1).expect("valid parameters");
        let hitters = HeavyHitters::new();
        let now = 29_333_333 * MINUTE; // a minute's start: all the draws in one sketch
        let mut truth: HashMap<u64, u64> = HashMap::new();
        let mut key = String::new();
        for _ in 0..draws {
            let id = zipf.sample(&mut rng) as u64;
            // Spread the draws over the minute with a weight of 1 or 2, as hits addends do.
            let weight = 1 + u64::from(rng.random_bool(0.1));
            key.clear();
            let _ = write!(key, "user-{id}");
            hitters.add(now + rng.random_range(0..MINUTE), &key, weight);
            *truth.entry(id).or_default() += weight;
        }
        let total: u64 = truth.values().sum();
        assert!(truth.len() > 20_000, "{} distinct keys", truth.len());

        let mut true_top: Vec<(u64, u64)> = truth.iter().map(|(&k, &w)| (k, w)).collect();
        true_top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let end = now + MINUTE - 1;
        let found = hitters.top(end, 20);
        assert_eq!(found.len(), 20);
        let mut found_keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        let mut true_keys: Vec<String> = true_top[..20]
            .iter()
            .map(|(id, _)| format!("user-{id}"))
            .collect();
        found_keys.sort_unstable();
        true_keys.sort_unstable();
        assert_eq!(found_keys, true_keys);
        assert!(
            true_top[19].1 > true_top[20].1,
            "the seed must separate the 20th key from the 21st"
        );

        // Each estimate is an overestimate by at most W / 256.
        for (key, estimate) in &found {
            let id: u64 = key["user-".len()..].parse().expect("a key the test made");
            let weight = truth[&id];
            assert!(*estimate >= weight && estimate - weight <= total / 256);
        }
        assert_eq!(hitters.total(end), total);

        let minutes = hitters.minutes.lock();
        for sketch in minutes.iter() {
            sketch.assert_fixed_size();
            sketch.check();
        }
        assert_eq!(minutes[0].used + minutes[1].used, HEAVY_COUNTERS);
    }

    #[test]
    fn keys_older_than_the_window_drop_out() {
        let hitters = HeavyHitters::new();
        let t0 = 1_000 * MINUTE;
        hitters.add(t0 + 10 * S, "old", 120);
        assert_eq!(hitters.top(t0 + 30 * S, 20), vec![("old".into(), 120)]);
        assert_eq!(hitters.top(t0 + MINUTE - 1, 20), vec![("old".into(), 120)]);

        // 15 s into the next minute, 45 s of the old minute are still in the window.
        hitters.add(t0 + MINUTE + 5 * S, "new", 10);
        hitters.add(t0 + MINUTE + 6 * S, "old", 1);
        let at = t0 + MINUTE + 15 * S;
        assert_eq!(
            hitters.top(at, 20),
            vec![("old".into(), 1 + 90), ("new".into(), 10)]
        );
        assert_eq!(hitters.total(at), 11 + 90);
        assert_eq!(hitters.top(at, 1), vec![("old".into(), 91)]);
        assert_eq!(hitters.top(at, 0), vec![]);

        // Two minute boundaries after its last add, the old minute is gone, and a late add for
        // it is dropped rather than counted in the minute that reused its sketch.
        hitters.add(t0 + 2 * MINUTE, "newest", 3);
        hitters.add(t0 + 10 * S, "old", 1_000);
        assert_eq!(
            hitters.top(t0 + 2 * MINUTE, 20),
            vec![("new".into(), 10), ("newest".into(), 3), ("old".into(), 1)]
        );
        assert_eq!(hitters.top(t0 + 3 * MINUTE, 20), vec![("newest".into(), 3)]);
        assert_eq!(hitters.top(t0 + 4 * MINUTE, 20), vec![]);
        assert_eq!(hitters.total(t0 + 4 * MINUTE), 0);
    }

    #[test]
    fn counts_are_exact_below_capacity_and_the_structure_holds_under_churn() {
        let hitters = HeavyHitters::new();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut truth: HashMap<String, u64> = HashMap::new();
        for _ in 0..20_000 {
            let key = format!("k{}", rng.random_range(0..HEAVY_COUNTERS));
            let weight = rng.random_range(1..5);
            hitters.add(0, &key, weight);
            *truth.entry(key).or_default() += weight;
        }
        let top = hitters.top(0, usize::MAX);
        assert_eq!(top.len(), truth.len());
        for (key, weight) in &top {
            assert_eq!(truth[key], *weight);
        }

        // Ten times more keys than counters: constant evictions, the index reshuffling.
        for i in 0..50_000u64 {
            let key = format!("churn-{}", rng.random_range(0..2_560));
            hitters.add(MINUTE, &key, 1 + i % 3);
            if i % 5_000 == 0 {
                hitters.minutes.lock()[1].check();
            }
        }
        let minutes = hitters.minutes.lock();
        minutes[1].check();
        minutes[1].assert_fixed_size();
    }

    #[test]
    fn long_keys_are_truncated_at_a_character_boundary() {
        let hitters = HeavyHitters::new();
        let long = "é".repeat(40); // 80 bytes
        hitters.add(0, &long, 1);
        hitters.add(0, &format!("{long}-other-suffix"), 2);
        let top = hitters.top(0, 20);
        assert_eq!(top, vec![("é".repeat(32), 3)]);
        assert_eq!(truncate("short"), "short");
        assert_eq!(truncate(&"a".repeat(65)).len(), 64);
        assert_eq!(truncate(&format!("{}é", "a".repeat(63))).len(), 63);
    }
}

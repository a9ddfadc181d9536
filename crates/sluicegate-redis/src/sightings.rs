//! When call shapes were last seen, so that leasing follows a shape only from its second
//! request within a lease life (see [`crate::leasing`]): the keys of a wide key space, each
//! seen once in a while, take the plain path without churning the leased shapes.
//!
//! Every thread keeps its own table of slots, shared by the stores it serves: on a wide key
//! space every call writes a slot, and with one table per store a runtime's worker threads
//! would all write the same cache lines from their cores. A shape whose calls run on several
//! threads is then followed from its second request on one of them. The price is on runtimes
//! of many threads: a shape spread over W of them is seen twice on one within the default
//! 20 ms life from about W x 50 requests per second, where one table saw it from 100 (below a
//! hundred a shape is cold and leases nothing anyway). Between the two it is followed after a
//! few more requests, and until its first lease its rate counts only the requests a sighting
//! lets through, so it starts leasing later and smaller. A hot shape is followed at once.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

use sluicegate::Micros;

/// Slots per thread (a power of two: 16 KiB, which stays in the core's cache; a table of
/// 256 KiB missed it on nearly every cold call). A slot holds the last sighting's fingerprint
/// and tick, so a slot shared by many shapes lets none of them in by mistake; it only forgets
/// a shape another one overwrote, which the next sighting mends.
const SLOTS: usize = 1 << 12;

/// First sightings in a row after which a thread sees a cold key space, and sights only one
/// call in [`SAMPLE_EVERY`] (see [`skips_this_call`]).
const COLD_STREAK: u32 = 64;

/// While a thread sees a cold key space, one call in this many is sighted.
const SAMPLE_EVERY: u32 = 8;

thread_local! {
    static TABLE: Box<[Cell<u32>]> = (0..SLOTS).map(|_| Cell::new(0)).collect();
    /// This thread's first sightings in a row (of any store's shapes).
    static STREAK: Cell<u32> = const { Cell::new(0) };
    /// This thread's calls while it sees a cold key space.
    static CALLS: Cell<u32> = const { Cell::new(0) };
}

/// Whether a call on this thread, while the process holds no leased permits, may take the
/// plain path without being sighted (hashed, timed, looked up): after [`COLD_STREAK`] first
/// sightings in a row, all but one call in [`SAMPLE_EVERY`]. On 100k cold keys every call
/// is a first sighting, and a few hundred client instructions and a clock read per call,
/// small as they are, made the batches that leave for Redis smaller, and Redis's work per
/// decision larger (BENCHMARKS.md). A shape warming up in such a key space is sighted at an
/// eighth of its rate until one of its sightings finds it seen again, which ends the streak.
pub(crate) fn skips_this_call() -> bool {
    if STREAK.get() < COLD_STREAK {
        return false;
    }
    let calls = CALLS.get().wrapping_add(1);
    CALLS.set(calls);
    calls % SAMPLE_EVERY != 0
}

/// Gives each table of sightings its own salt, so that one store's sightings (in the tables
/// every thread shares between stores) do not count for another's.
static SALTS: AtomicU32 = AtomicU32::new(0);

/// Odd, so that successive salts differ in the fingerprint's 16 bits for 65 536 in a row.
const SALT_STEP: u32 = 0x9e37;

/// A salt no store holds (for 65 536 salts in a row).
fn new_salt() -> u32 {
    SALTS.fetch_add(SALT_STEP, Ordering::Relaxed)
}

/// One store's view of the threads' sightings.
#[derive(Debug)]
pub(crate) struct Sightings {
    /// Mixed into the fingerprint; changed to forget every sighting at once.
    salt: AtomicU32,
    /// A lease life in 1 024 µs ticks: a sighting counts for that long.
    within: u32,
}

impl Sightings {
    /// Sightings that count for `life`.
    pub(crate) fn new(life: Micros) -> Sightings {
        Sightings {
            salt: AtomicU32::new(new_salt()),
            within: u32::try_from(life >> 10).unwrap_or(u32::MAX).min(0x7fff),
        }
    }

    /// Records a sighting on this thread of the shape of `hash` at `at`; whether this thread
    /// saw it within a lease life before. A slot holds the shape's fingerprint (the hash's top
    /// 16 bits, salted) and the time, in 1 024 µs ticks that wrap at 16 bits (67 s).
    pub(crate) fn seen_again(&self, hash: u64, at: Micros) -> bool {
        // Truncated on purpose: the slot index, the fingerprint and the tick.
        let index = (hash as usize) & (SLOTS - 1);
        let fingerprint = ((hash >> 48) as u32 ^ self.salt.load(Ordering::Relaxed)) & 0xffff;
        let tick = ((at >> 10) as u32 & 0xffff) | 1;
        let sighting = (fingerprint << 16) | tick;
        let last = TABLE.with(|table| table[index].replace(sighting));
        let seen = last != 0
            && last >> 16 == fingerprint
            && tick.wrapping_sub(last & 0xffff) & 0xffff <= self.within + 1;
        STREAK.set(if seen {
            0
        } else {
            STREAK.get().saturating_add(1)
        });
        seen
    }

    /// Forgets every sighting (on every thread): a new salt, which no other store holds.
    pub(crate) fn forget_all(&self) {
        self.salt.store(new_salt(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIFE: Micros = 100_000;

    /// A sighting counts within a lease life, for its own shape only, across the tick's wrap.
    #[test]
    fn sightings_know_their_shape_and_their_life() {
        let table = Sightings::new(LIFE);
        let (hash, other) = (0x1234_0000_0000_0007, 0x4321_0000_0000_0007);
        assert!(!table.seen_again(hash, 5_000), "first sighting");
        assert!(
            table.seen_again(hash, 5_000 + LIFE / 2),
            "again within a life"
        );
        // Another shape in the same slot is not let in by this one's sighting, and takes it.
        assert!(!table.seen_again(other, 5_000 + LIFE / 2));
        assert!(
            !table.seen_again(hash, 5_000 + LIFE / 2),
            "overwritten, seen anew"
        );
        assert!(
            !table.seen_again(hash, 5_000 + 3 * LIFE),
            "after more than a life"
        );
        // Ticks of 1 024 µs wrap at 16 bits (about 67 s): a sighting either side of the wrap
        // counts.
        let wrap = (1 << 26) - 3_000;
        assert!(!table.seen_again(hash, wrap));
        assert!(table.seen_again(hash, wrap + LIFE / 2));
    }

    /// A thread that sees only first sightings sights one call in eight, until a shape is
    /// seen again.
    #[test]
    fn a_thread_seeing_a_cold_key_space_sights_one_call_in_eight() {
        std::thread::scope(|scope| {
            let answers = scope.spawn(|| {
                let table = Sightings::new(LIFE);
                let mut answers = Vec::new();
                // Each key in a slot of its own, with a fingerprint of its own.
                for key in 1..u64::from(COLD_STREAK) {
                    answers.push(skips_this_call());
                    table.seen_again((key << 48) | key, 1_000);
                }
                // Not yet cold: every call is sighted.
                answers.push(skips_this_call());
                table.seen_again(1 << 60, 1_000);
                let skipped = (0..16).filter(|_| skips_this_call()).count();
                table.seen_again(1 << 60, 2_000);
                (answers, skipped, skips_this_call())
            });
            let (before, skipped, after) = answers.join().ok().unwrap_or_default();
            assert_eq!(before.len(), COLD_STREAK as usize);
            assert!(before.iter().all(|skips| !skips), "warming up: {before:?}");
            assert_eq!(skipped, 14, "two calls in sixteen sighted");
            assert!(!after, "a shape seen again ends the streak");
        });
    }

    /// Stores share each thread's table, not their sightings; forgetting is for every thread.
    #[test]
    fn sightings_are_each_stores_own_and_forgotten_on_every_thread() {
        let (one, two) = (Sightings::new(LIFE), Sightings::new(LIFE));
        let hash = 0x5555_0000_0000_0042;
        assert!(!one.seen_again(hash, 1_000));
        assert!(!two.seen_again(hash, 2_000), "another store's sighting");
        assert!(
            !one.seen_again(hash, 3_000),
            "the other store took the slot"
        );
        assert!(one.seen_again(hash, 4_000));
        // A shape seen on another thread counts there, not here; forgetting is for both. The
        // other thread's answers are asserted after it has passed both barriers, so that a
        // wrong one cannot leave this thread waiting.
        let shape = hash + 1;
        let forgotten = std::sync::Barrier::new(2);
        let there = std::thread::scope(|scope| {
            let there = scope.spawn(|| {
                let first = one.seen_again(shape, 5_000);
                let again = one.seen_again(shape, 5_500);
                forgotten.wait();
                forgotten.wait();
                [first, again, one.seen_again(shape, 7_500)]
            });
            forgotten.wait();
            let here = one.seen_again(shape, 6_000);
            one.forget_all();
            let after = one.seen_again(hash, 7_000);
            forgotten.wait();
            assert!(!here, "not seen on this thread");
            assert!(!after, "forgotten on this thread");
            there.join()
        });
        assert_eq!(
            there.ok(),
            Some([false, true, false]),
            "seen, then forgotten there"
        );
    }
}

//! How a direct limiter holds its state: a lock-free word where the state fits in one, a
//! small mutex otherwise. Both can also be locked outright, which is what lets several limits
//! be decided together, all or nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// A place that holds one algorithm state and applies updates atomically.
pub trait StateCell<S>: Send + Sync {
    /// A cell holding `state`.
    fn new(state: S) -> Self;

    /// Applies `f` atomically. `f` may run more than once (after losing a race), so it must be
    /// a pure function of the state it is given.
    fn update<R>(&self, f: impl FnMut(&mut S) -> R) -> R;

    /// A copy of the current state.
    fn snapshot(&self) -> S;

    /// Replaces the state.
    fn replace(&self, state: S);
}

/// One-word state in an [`AtomicU64`], updated by compare-and-swap.
///
/// The top bit is a lock flag for multi-limit decisions, so the state itself must stay below
/// 2^63 (the algorithms that use this cell keep times in ticks well under that).
#[derive(Debug)]
pub struct WordCell(AtomicU64);

const LOCKED: u64 = 1 << 63;

/// The largest state a [`WordCell`] holds.
pub(crate) const MAX_WORD: u64 = LOCKED - 1;

impl WordCell {
    /// Waits out a multi-limit decision holding the word, and returns the word.
    #[inline]
    fn load_unlocked(&self) -> u64 {
        loop {
            let word = self.0.load(Ordering::Acquire);
            if word & LOCKED == 0 {
                return word;
            }
            std::hint::spin_loop();
        }
    }

    /// Takes the lock bit, returning the state; pair with [`WordCell::unlock`].
    pub(crate) fn lock(&self) -> u64 {
        loop {
            let word = self.load_unlocked();
            if self
                .0
                .compare_exchange_weak(word, word | LOCKED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return word;
            }
        }
    }

    /// Stores `state` and releases the lock bit.
    pub(crate) fn unlock(&self, state: u64) {
        self.0.store(state & !LOCKED, Ordering::Release);
    }
}

impl StateCell<u64> for WordCell {
    fn new(state: u64) -> Self {
        WordCell(AtomicU64::new(state & !LOCKED))
    }

    /// Runs `f` once to find the next state and commits it, then runs `f` again on the state
    /// it was committed over for the result. `f` is pure, so that is the result of the
    /// committed update; and building the result (a decision is several words) only after the
    /// compare-and-swap keeps its stores from delaying the locked instruction, which has to
    /// wait for every earlier store. Inlined, the first run's result is dead code.
    #[inline(always)]
    fn update<R>(&self, mut f: impl FnMut(&mut u64) -> R) -> R {
        let mut current = self.load_unlocked();
        loop {
            let mut next = current;
            let _ = f(&mut next);
            if next == current {
                break;
            }
            match self.0.compare_exchange_weak(
                current,
                next & !LOCKED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                // The failed exchange already read the word: no second trip for the cache line.
                Err(actual) if actual & LOCKED == 0 => current = actual,
                Err(_) => current = self.load_unlocked(),
            }
        }
        f(&mut current)
    }

    fn snapshot(&self) -> u64 {
        self.load_unlocked()
    }

    fn replace(&self, state: u64) {
        let _ = self.lock();
        self.unlock(state);
    }
}

/// Any state behind a small mutex.
#[derive(Debug)]
pub struct LockedCell<S>(Mutex<S>);

impl<S: Clone + Send> StateCell<S> for LockedCell<S> {
    fn new(state: S) -> Self {
        LockedCell(Mutex::new(state))
    }

    #[inline]
    fn update<R>(&self, mut f: impl FnMut(&mut S) -> R) -> R {
        f(&mut self.0.lock())
    }

    fn snapshot(&self) -> S {
        self.0.lock().clone()
    }

    fn replace(&self, state: S) {
        *self.0.lock() = state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_cell_updates_and_strips_the_lock_bit() {
        let cell = WordCell::new(5);
        let seen = cell.update(|s| {
            *s += 1;
            *s
        });
        assert_eq!(seen, 6);
        let locked = cell.lock();
        assert_eq!(locked, 6);
        cell.unlock(9);
        assert_eq!(cell.snapshot(), 9);
        cell.replace(11);
        assert_eq!(cell.snapshot(), 11);
    }

    #[test]
    fn locked_cell_updates() {
        let cell = LockedCell::new(vec![1u64]);
        cell.update(|v| v.push(2));
        assert_eq!(cell.snapshot(), vec![1, 2]);
    }
}

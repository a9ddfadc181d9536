//! How a direct limiter holds its state: a lock-free word where the state fits in one, a
//! small mutex otherwise.

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

/// One-word state in an [`AtomicU64`], updated by compare-and-swap. Every bit is state: the
/// limiters never lock a word (decisions over several limits lock keyed shards, not words).
#[derive(Debug)]
pub struct WordCell(AtomicU64);

impl StateCell<u64> for WordCell {
    fn new(state: u64) -> Self {
        WordCell(AtomicU64::new(state))
    }

    /// Runs `f` on a copy of the word and commits the copy by compare-and-swap, again after
    /// losing a race. Inlined, the result's fields are only needed once the exchange succeeds,
    /// so the compiler is free to compute them after the locked instruction.
    #[inline(always)]
    fn update<R>(&self, mut f: impl FnMut(&mut u64) -> R) -> R {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let mut next = current;
            let result = f(&mut next);
            if next == current {
                return result;
            }
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return result,
                // The failed exchange already read the word: no second trip for the cache line.
                Err(actual) => current = actual,
            }
        }
    }

    fn snapshot(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    fn replace(&self, state: u64) {
        self.0.store(state, Ordering::Release);
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
    fn word_cell_keeps_every_bit() {
        // The top bit is state like any other: a time past 2^63 ticks must not wrap to zero.
        let cell = WordCell::new(u64::MAX - 1);
        let seen = cell.update(|s| {
            *s += 1;
            *s
        });
        assert_eq!(seen, u64::MAX);
        assert_eq!(cell.snapshot(), u64::MAX);
        cell.update(|s| *s = (1 << 63) + 5);
        assert_eq!(cell.snapshot(), (1 << 63) + 5);
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

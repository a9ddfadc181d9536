//! One limiter, one state: a global limit, or a limit per object the caller already holds.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;

use crate::cell::StateCell;
use crate::clock::{Clock, Micros, SystemClock};
use crate::decision::Decision;
use crate::error::CheckError;
use crate::limiter::current::{CurrentAlgorithm, Held};
use crate::state_machine::{Algorithm, AlgorithmState, Op, Releasable};

type CellOf<A> = <<A as Algorithm>::State as AlgorithmState>::Cell;

/// A limiter with a single state, applied atomically: lock-free for one-word states (GCRA, the
/// token bucket, the leaky queue, concurrency), under a small mutex otherwise.
///
/// ```
/// use sluicegate::{DirectLimiter, Gcra, ManualClock, Rate};
///
/// let clock = ManualClock::new(0);
/// let limiter = DirectLimiter::with_clock(Gcra::new(Rate::per_second(2)?, 2)?, clock.clone());
/// assert!(limiter.check()?.allowed());
/// assert!(limiter.check()?.allowed());
/// assert!(!limiter.check()?.allowed());
/// clock.advance(std::time::Duration::from_millis(500));
/// assert!(limiter.check()?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DirectLimiter<A: Algorithm, C: Clock = SystemClock> {
    /// The algorithm the limiter was made with, read in place by every check until the first
    /// [`set_algorithm`](Self::set_algorithm): loading an `ArcSwap` on every check would
    /// double the cost of the lock-free path (see BENCHMARKS.md).
    first: A,
    /// Set once the algorithm has been changed: checks read `current` from then on.
    changed: AtomicBool,
    /// The algorithm since the first change (`None` before it), swapped whole by
    /// `set_algorithm`, so a check never sees half of a change of parameters, and read
    /// without a lock.
    current: ArcSwapOption<A>,
    state: CellOf<A>,
    clock: C,
    /// Serialises changes of algorithm (checks do not take it).
    changing: Mutex<()>,
}

impl<A: Algorithm> DirectLimiter<A, SystemClock> {
    /// A limiter on the system clock, fresh from now.
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, SystemClock::new())
    }
}

impl<A: Algorithm, C: Clock> DirectLimiter<A, C> {
    /// A limiter on `clock`, created at the clock's current time.
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        let state = <CellOf<A> as StateCell<A::State>>::new(algorithm.initial_state(clock.now()));
        DirectLimiter {
            first: algorithm,
            current: ArcSwapOption::empty(),
            changed: AtomicBool::new(false),
            state,
            clock,
            changing: Mutex::new(()),
        }
    }

    /// The algorithm and its parameters now (a later
    /// [`set_algorithm`](Self::set_algorithm) does not change the one returned).
    pub fn algorithm(&self) -> CurrentAlgorithm<'_, A> {
        match self.swapped() {
            Some(current) => CurrentAlgorithm(Held::Shared(current)),
            None => CurrentAlgorithm(Held::InPlace(&self.first)),
        }
    }

    /// The algorithm swapped in by the last change, if there was one.
    fn swapped(&self) -> Option<Arc<A>> {
        match self.changed.load(Ordering::Acquire) {
            true => self.current.load_full(),
            false => None,
        }
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Asks for one permit, consuming it if allowed.
    #[inline(always)]
    pub fn check(&self) -> Result<Decision, CheckError> {
        self.decide(NonZeroU64::MIN, Op::Check)
    }

    /// Asks for `permits` at once, consuming them only if all are allowed.
    #[inline]
    pub fn check_n(&self, permits: NonZeroU64) -> Result<Decision, CheckError> {
        self.decide(permits, Op::Check)
    }

    /// What [`check_n`](Self::check_n) would answer, consuming nothing.
    pub fn peek(&self, permits: NonZeroU64) -> Result<Decision, CheckError> {
        self.decide(permits, Op::Peek)
    }

    /// Applies `op` for `permits` at the clock's current time.
    #[inline(always)]
    pub fn decide(&self, permits: NonZeroU64, op: Op) -> Result<Decision, CheckError> {
        self.decide_at(self.clock.now(), permits, op)
    }

    /// Applies `op` for `permits` at `now` (a time from this limiter's clock).
    // Inlined whole into the caller (the closure too: without its attribute a direct check
    // costs twice as much), the decision is written straight where the caller wants it, and
    // the cell's first, state-only run of `decide` loses its dead decision.
    #[inline(always)]
    pub fn decide_at(
        &self,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        // Acquire: a check that sees the flag sees the new algorithm stored before it.
        if !self.changed.load(Ordering::Acquire) {
            let algorithm = &self.first;
            return self.state.update(
                #[inline(always)]
                |state| algorithm.decide(state, now, permits, op),
            );
        }
        self.decide_changed(now, permits, op)
    }

    /// [`decide_at`](Self::decide_at) once the algorithm has been changed.
    #[inline(never)]
    fn decide_changed(
        &self,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let current = self.current.load();
        // Stored before the flag was set, and never emptied.
        let algorithm = current.as_deref().unwrap_or(&self.first);
        self.state
            .update(|state| algorithm.decide(state, now, permits, op))
    }

    /// Replaces the algorithm's parameters (a new rate, say), carrying the state over at the
    /// current time: buckets keep their fill ratio, windows their counts, Guava's limiters
    /// follow Guava's `setRate`.
    ///
    /// With an [`AnyAlgorithm`](crate::AnyAlgorithm), switching to another *kind* of algorithm
    /// (a token bucket for a fixed window, say) has no state to carry over: the limiter starts
    /// afresh, as if created now, forgetting what was spent under the old one.
    ///
    /// Takes `&self`, so a limiter shared in an `Arc` can be changed while in use, as a
    /// [`KeyedLimiter`](crate::KeyedLimiter) can: the state is carried over atomically (checks
    /// made meanwhile are not lost), then the new parameters replace the old. A check racing
    /// with the change is decided by the old parameters or the new, on the state before the
    /// change or after it; concurrent changes are applied one after the other. From the first
    /// change on, each check loads the current algorithm through an `ArcSwap` (a few
    /// nanoseconds more than the fixed algorithm's path).
    pub fn set_algorithm(&self, new: A) {
        let _one_at_a_time = self.changing.lock();
        let old = self.swapped();
        let old = old.as_deref().unwrap_or(&self.first);
        let now = self.clock.now();
        self.state.update(|state| old.carry_over(&new, state, now));
        self.current.store(Some(Arc::new(new)));
        self.changed.store(true, Ordering::Release);
    }

    /// A copy of the current state, for inspection and tests.
    pub fn state(&self) -> A::State {
        self.state.snapshot()
    }
}

impl<A: Algorithm + std::fmt::Debug, C: Clock> std::fmt::Debug for DirectLimiter<A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectLimiter")
            .field("algorithm", &*self.algorithm())
            .finish_non_exhaustive()
    }
}

impl<A: Releasable, C: Clock> DirectLimiter<A, C> {
    /// Gives back permits held (concurrency limits only: a rate limit has nothing to give
    /// back, and has no `release`).
    pub fn release(&self, permits: NonZeroU64) -> Result<Decision, CheckError> {
        self.decide(permits, Op::Release)
    }
}

//! [`AnyAlgorithm`]: one type for every algorithm, so a limiter's algorithm can be chosen from a
//! spec or a rule file at run time.

use std::num::NonZeroU64;

use crate::algorithm::{
    Concurrency, ConcurrencyState, FixedWindow, FixedWindowState, Gcra, LeakyBucket,
    LeakyBucketState, LeakyQueue, SlidingLog, SlidingLogState, SlidingWindow, SlidingWindowState,
    SmoothBursty, SmoothState, SmoothWarmup, Tat, TokenBucket, TokenBucketState,
};
use crate::cell::LockedCell;
use crate::clock::Micros;
use crate::decision::{Admission, Decision};
use crate::error::CheckError;
use crate::state_machine::{Algorithm, AlgorithmState, Op};

/// Writes the two enums and the dispatch once, so adding an algorithm is one line.
macro_rules! any_algorithm {
    ($($(#[$doc:meta])* $variant:ident($algorithm:ty, $state:ty),)*) => {
        /// Any of the algorithms, chosen at run time; itself an [`Algorithm`].
        ///
        /// ```
        /// use sluicegate::{AnyAlgorithm, KeyedLimiter, ManualClock};
        ///
        /// let algorithm: AnyAlgorithm = "gcra:rate=10/s,burst=2".parse()?;
        /// let limiter = KeyedLimiter::with_clock(algorithm, ManualClock::new(0));
        /// assert!(limiter.check(&"a")?.allowed());
        /// assert!(limiter.check(&"a")?.allowed());
        /// assert!(!limiter.check(&"a")?.allowed());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        ///
        /// This is the one limit type of the workspace: spec strings, rule files, the Redis
        /// limits and the service all resolve to it. It is deliberately not
        /// `#[non_exhaustive]`: code in other crates matches it without a `_` arm, so adding an
        /// algorithm is a compile error everywhere it must be handled.
        #[derive(Debug, Clone, PartialEq)]
        pub enum AnyAlgorithm {
            $($(#[$doc])* $variant($algorithm),)*
        }

        /// The state of an [`AnyAlgorithm`]: the state of the algorithm of the same variant.
        /// Not `#[non_exhaustive]`, as [`AnyAlgorithm`] is not.
        #[derive(Debug, Clone, PartialEq)]
        pub enum AnyState {
            $(#[doc = concat!("The state of [`AnyAlgorithm::", stringify!($variant), "`].")]
            $variant($state),)*
        }

        $(impl From<$algorithm> for AnyAlgorithm {
            fn from(algorithm: $algorithm) -> Self {
                AnyAlgorithm::$variant(algorithm)
            }
        })*

        impl Algorithm for AnyAlgorithm {
            type State = AnyState;

            fn name(&self) -> &'static str {
                match self { $(AnyAlgorithm::$variant(a) => a.name(),)* }
            }

            fn limit(&self) -> u64 {
                match self { $(AnyAlgorithm::$variant(a) => a.limit(),)* }
            }

            fn capacity(&self) -> u64 {
                match self { $(AnyAlgorithm::$variant(a) => a.capacity(),)* }
            }

            fn initial_state(&self, created_at: Micros) -> AnyState {
                match self {
                    $(AnyAlgorithm::$variant(a) => AnyState::$variant(a.initial_state(created_at)),)*
                }
            }

            fn decide(
                &self,
                state: &mut AnyState,
                now: Micros,
                permits: NonZeroU64,
                op: Op,
            ) -> Result<Decision, CheckError> {
                match (self, &mut *state) {
                    $((AnyAlgorithm::$variant(a), AnyState::$variant(s)) => a.decide(s, now, permits, op),
                    (AnyAlgorithm::$variant(_), _) => self.decide_from_fresh(state, now, permits, op),)*
                }
            }

            #[inline]
            fn admit(
                &self,
                state: &mut AnyState,
                now: Micros,
                permits: NonZeroU64,
                op: Op,
            ) -> Result<Admission, CheckError> {
                match (self, &mut *state) {
                    $((AnyAlgorithm::$variant(a), AnyState::$variant(s)) => a.admit(s, now, permits, op),
                    (AnyAlgorithm::$variant(_), _) => {
                        self.decide_from_fresh(state, now, permits, op).map(Admission::Decided)
                    })*
                }
            }

            fn is_fresh(&self, state: &AnyState, now: Micros) -> bool {
                match (self, state) {
                    // A state of another algorithm means nothing here: dropping it loses nothing.
                    $((AnyAlgorithm::$variant(a), AnyState::$variant(s)) => a.is_fresh(s, now),
                    (AnyAlgorithm::$variant(_), _) => true,)*
                }
            }

            fn carry_over(&self, new: &Self, state: &mut AnyState, now: Micros) {
                match (self, new, &mut *state) {
                    // Another algorithm altogether starts afresh, as if created now.
                    $((AnyAlgorithm::$variant(old), AnyAlgorithm::$variant(new), AnyState::$variant(s)) => {
                        old.carry_over(new, s, now)
                    }
                    (AnyAlgorithm::$variant(_), _, _) => *state = new.initial_state(now),)*
                }
            }
        }
    };
}

any_algorithm! {
    /// [`TokenBucket`].
    TokenBucket(TokenBucket, TokenBucketState),
    /// [`Gcra`].
    Gcra(Gcra, Tat),
    /// [`FixedWindow`].
    FixedWindow(FixedWindow, FixedWindowState),
    /// [`SlidingLog`].
    SlidingLog(SlidingLog, SlidingLogState),
    /// [`SlidingWindow`].
    SlidingWindow(SlidingWindow, SlidingWindowState),
    /// [`LeakyBucket`].
    LeakyBucket(LeakyBucket, LeakyBucketState),
    /// [`LeakyQueue`].
    LeakyQueue(LeakyQueue, Tat),
    /// [`SmoothBursty`].
    SmoothBursty(SmoothBursty, SmoothState),
    /// [`SmoothWarmup`].
    SmoothWarmup(SmoothWarmup, SmoothState),
    /// [`Concurrency`].
    Concurrency(Concurrency, ConcurrencyState),
}

impl AlgorithmState for AnyState {
    type Cell = LockedCell<AnyState>;
}

impl AnyAlgorithm {
    /// Decides on a state kept by another algorithm (only reachable by misuse) as if the
    /// limiter had been created now, replacing the state only when permits are taken (or
    /// charged), so a denial still leaves it untouched.
    fn decide_from_fresh(
        &self,
        state: &mut AnyState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let mut fresh = self.initial_state(now);
        let decision = self.decide(&mut fresh, now, permits, op)?;
        if op.changes_state(decision.allowed()) {
            *state = fresh;
        }
        Ok(decision)
    }
}

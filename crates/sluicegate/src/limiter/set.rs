//! Several limits of any algorithms on one key, built once and checked with one call: the
//! common case of [`decide_together`] without a slice of targets per request.

use std::hash::Hash;
use std::num::NonZeroU64;

use crate::clock::{Clock, SystemClock};
use crate::error::CheckError;
use crate::limiter::keyed::KeyedLimiter;
use crate::limiter::multi::{LimitTarget, MultiDecision, decide_together};
use crate::spec::AnyAlgorithm;
use crate::state_machine::Op;

/// Limits on the same keys, each of its own algorithm, all or nothing: a request passes only
/// if every limit allows it, and then is charged to all of them; if one denies, none is
/// charged.
///
/// ```
/// use std::time::Duration;
/// use sluicegate::{FixedWindow, ManualClock, SlidingLog};
/// use sluicegate::limiter::LimitSet;
///
/// let clock = ManualClock::new(0);
/// // 3 a second (fixed windows) and 5 an hour (exact, sliding), per user.
/// let limits = LimitSet::with_clock(clock.clone())
///     .limit(FixedWindow::new(3, Duration::from_secs(1))?)
///     .limit(SlidingLog::new(5, Duration::from_secs(3600))?);
/// for _ in 0..3 {
///     assert!(limits.check(&"alice")?.allowed);
/// }
/// assert!(!limits.check(&"alice")?.allowed, "3 a second");
/// clock.advance(Duration::from_secs(1));
/// assert!(limits.check(&"alice")?.allowed);
/// assert!(limits.check(&"alice")?.allowed);
/// let denied = limits.check(&"alice")?;
/// assert!(!denied.allowed, "5 an hour");
/// assert_eq!(denied.decisions[0].remaining(), 1, "the second's limit, left uncharged");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LimitSet<K, C: Clock = SystemClock> {
    limits: Vec<KeyedLimiter<K, AnyAlgorithm, C>>,
    clock: C,
}

impl<K: Hash + Eq + Clone> LimitSet<K, SystemClock> {
    /// An empty set on the system clock; add limits with [`limit`](Self::limit).
    pub fn new() -> Self {
        Self::with_clock(SystemClock::new())
    }
}

impl<K: Hash + Eq + Clone> Default for LimitSet<K, SystemClock> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> LimitSet<K, C> {
    /// An empty set on `clock`.
    pub fn with_clock(clock: C) -> Self {
        LimitSet {
            limits: Vec::new(),
            clock,
        }
    }

    /// Adds a limit of any algorithm.
    pub fn limit(mut self, algorithm: impl Into<AnyAlgorithm>) -> Self {
        let limiter = KeyedLimiter::with_clock(algorithm.into(), self.clock.clone());
        self.limits.push(limiter);
        self
    }

    /// The limits, in the order they were added (the order of every answer's decisions).
    pub fn limits(&self) -> &[KeyedLimiter<K, AnyAlgorithm, C>] {
        &self.limits
    }

    /// Asks every limit for one permit for `key`, all or none.
    pub fn check(&self, key: &K) -> Result<MultiDecision, CheckError> {
        self.decide(key, NonZeroU64::MIN, Op::Check)
    }

    /// Asks every limit for `permits` for `key`, all or none.
    pub fn check_n(&self, key: &K, permits: NonZeroU64) -> Result<MultiDecision, CheckError> {
        self.decide(key, permits, Op::Check)
    }

    /// Takes one permit of every limit for `key` if all can give it now, without waiting
    /// (Guava's `tryAcquire()`), as a yes or no; an error (a full key table, say) is a no.
    pub fn try_acquire(&self, key: &K) -> bool {
        self.check(key).is_ok_and(|decision| decision.allowed)
    }

    /// What [`check_n`](Self::check_n) would answer, consuming nothing.
    pub fn peek(&self, key: &K, permits: NonZeroU64) -> Result<MultiDecision, CheckError> {
        self.decide(key, permits, Op::Peek)
    }

    /// Applies `op` to every limit for `key`, together (see [`decide_together`]).
    pub fn decide(
        &self,
        key: &K,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<MultiDecision, CheckError> {
        let targets: Vec<LimitTarget<'_, K, AnyAlgorithm, C>> = self
            .limits
            .iter()
            .map(|limiter| LimitTarget {
                limiter,
                key,
                permits,
            })
            .collect();
        decide_together(&targets, op)
    }
}

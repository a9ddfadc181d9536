//! The classic token bucket: a level of tokens and the time it was last refilled.

use std::num::NonZeroU64;

use crate::algorithm::bucket::BucketShape;
use crate::cell::LockedCell;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::rate::Rate;
use crate::state_machine::{Algorithm, AlgorithmState, Op, ensure_capacity, unsupported};

/// A bucket of `burst` tokens refilled at `rate`, lazily on access (never a timer per bucket).
/// Starts full unless built [`with_initial`](TokenBucket::with_initial) tokens.
///
/// ```
/// use sluicegate::{Algorithm, Op, Rate, TokenBucket};
/// use std::num::NonZeroU64;
///
/// let bucket = TokenBucket::new(Rate::per_second(10)?, 20)?;
/// let mut state = bucket.initial_state(0);
/// let decision = bucket.decide(&mut state, 0, NonZeroU64::new(5).unwrap(), Op::Check)?;
/// assert_eq!((decision.allowed, decision.remaining), (true, 15));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    shape: BucketShape,
}

/// A token bucket's level and last refill, both in ticks of the rate's pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketState {
    /// Tokens, as ticks of refill time; negative after reservations ran ahead of the refill.
    pub level: i64,
    /// When `level` was last brought up to date.
    pub refilled_at: u64,
}

impl AlgorithmState for TokenBucketState {
    type Cell = LockedCell<TokenBucketState>;
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<TokenBucket, ConfigError> {
        Ok(TokenBucket {
            shape: BucketShape::new(rate, burst, None)?,
        })
    }

    /// A bucket starting with `initial` of its `burst` tokens.
    pub fn with_initial(rate: Rate, burst: u64, initial: u64) -> Result<TokenBucket, ConfigError> {
        Ok(TokenBucket {
            shape: BucketShape::new(rate, burst, Some(initial))?,
        })
    }

    fn full(&self) -> i64 {
        // The shape keeps the tolerance under 2^61.
        self.shape.tolerance as i64
    }

    /// The level at `now_t`, refilled but not above full.
    #[inline]
    fn level_at(&self, state: &TokenBucketState, now_t: u64) -> i64 {
        let elapsed = now_t.saturating_sub(state.refilled_at);
        let elapsed = i64::try_from(elapsed).unwrap_or(i64::MAX);
        state.level.saturating_add(elapsed).min(self.full())
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn name(&self) -> &'static str {
        "token-bucket"
    }

    fn limit(&self) -> u64 {
        self.shape.burst
    }

    fn capacity(&self) -> u64 {
        self.shape.burst
    }

    fn initial_state(&self, created_at: Micros) -> TokenBucketState {
        let s = &self.shape;
        TokenBucketState {
            level: (s.initial * s.pace.interval) as i64,
            refilled_at: s.ticks(created_at),
        }
    }

    #[inline(always)]
    fn decide(
        &self,
        state: &mut TokenBucketState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let s = &self.shape;
        let n = ensure_capacity(permits, s.burst)?;
        if op == Op::Release {
            return Err(unsupported(self.name(), op));
        }
        let now_t = s.ticks(now).max(state.refilled_at);
        let level = self.level_at(state, now_t);
        let cost = (n * s.pace.interval) as i64;
        let after = level - cost;
        // How far from full the bucket is, in ticks (the same number GCRA calls its debt).
        let debt_after = (self.full() - after) as u64;
        let commit = |state: &mut TokenBucketState| {
            *state = TokenBucketState {
                level: after,
                refilled_at: now_t,
            };
        };
        if after >= 0 {
            if op.consumes() {
                commit(state);
            }
            return Ok(s.allow(debt_after));
        }
        let wait = s.micros_ceil(after.unsigned_abs());
        if let Op::Reserve { max_wait } = op {
            if max_wait.is_none_or(|limit| wait <= limit) {
                commit(state);
                return Ok(s.allow(debt_after).with_wait(wait));
            }
        }
        Ok(s.deny((self.full() - level) as u64, wait))
    }

    fn is_fresh(&self, state: &TokenBucketState, now: Micros) -> bool {
        self.level_at(state, self.shape.ticks(now)) >= self.full()
    }

    fn carry_over(&self, new: &Self, state: &mut TokenBucketState, now: Micros) {
        let now_t = self.shape.ticks(now).max(state.refilled_at);
        let debt = (self.full() - self.level_at(state, now_t)) as u64;
        let new_debt = self.shape.rescale_debt(&new.shape, debt);
        *state = TokenBucketState {
            level: new.full() - i64::try_from(new_debt).unwrap_or(i64::MAX),
            refilled_at: new.shape.ticks(now),
        };
    }
}

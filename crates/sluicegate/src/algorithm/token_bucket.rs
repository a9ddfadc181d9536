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
/// Reservations ([`Op::Reserve`]) may run the bucket into debt, up to 2^62 ticks of the rate's
/// [`Pace`](crate::Pace) (about 146 000 years of permits at whole-microsecond paces); one that
/// would go deeper is denied, with the `retry_after` at which it would fit. Times count up to
/// a horizon (Unix time in the year 2398 at the finest pace, far later at coarser ones)
/// beyond which the bucket stops refilling: it grants what it holds, then denies. GCRA does
/// exactly the same.
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
        if matches!(op, Op::Release | Op::Charge) {
            return Err(unsupported(self.name(), op));
        }
        let now_t = s.ticks(now).max(state.refilled_at);
        let level = self.level_at(state, now_t);
        // How far from full the bucket is, in ticks (the same number GCRA calls its debt),
        // before and after this request; an admitted one is at most `MAX_DEBT`.
        let debt = self.full().abs_diff(level);
        let debt_after = debt.saturating_add(n * s.pace.interval);
        let commit = |state: &mut TokenBucketState| {
            *state = TokenBucketState {
                level: self.full() - debt_after as i64,
                refilled_at: now_t,
            };
        };
        if debt_after <= s.tolerance {
            if op.consumes() {
                commit(state);
            }
            return Ok(s.allow(debt_after));
        }
        let wait = s.micros_ceil(debt_after - s.tolerance);
        let retry = match op {
            Op::Reserve { max_wait } => {
                let delay = s.reservation_delay(debt_after, wait, max_wait);
                if delay == 0 {
                    commit(state);
                    return Ok(s.allow(debt_after).with_wait(wait));
                }
                delay
            }
            _ => wait,
        };
        Ok(s.deny(debt, retry))
    }

    fn is_fresh(&self, state: &TokenBucketState, now: Micros) -> bool {
        self.level_at(state, self.shape.ticks(now)) >= self.full()
    }

    fn carry_over(&self, new: &Self, state: &mut TokenBucketState, now: Micros) {
        let now_t = self.shape.ticks(now).max(state.refilled_at);
        let debt = self.full().abs_diff(self.level_at(state, now_t));
        // At most `MAX_DEBT`, like every debt a decision leaves.
        let new_debt = self.shape.rescale_debt(&new.shape, debt);
        // The level is as of `now_t`, the later of now and the last refill (a clock that went
        // back): stored as of now, the time in between would be refilled a second time.
        let refilled_at = new
            .shape
            .ticks(now)
            .max(self.shape.ticks_as(&new.shape, state.refilled_at));
        *state = TokenBucketState {
            level: new.full() - new_debt as i64,
            refilled_at,
        };
    }
}

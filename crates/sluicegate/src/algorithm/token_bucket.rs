//! The classic token bucket, kept as the time its bucket is full again.

use std::num::NonZeroU64;

use crate::algorithm::bucket::BucketShape;
use crate::algorithm::gcra::{Gcra, Tat};
use crate::clock::Micros;
use crate::decision::{Admission, Decision};
use crate::error::{CheckError, ConfigError};
use crate::rate::Rate;
use crate::state_machine::{Algorithm, Op};

/// A bucket of `burst` tokens refilled at `rate`, lazily on access (never a timer per bucket).
/// Starts full unless built [`with_initial`](TokenBucket::with_initial) tokens.
///
/// A token bucket and [GCRA](crate::Gcra) are one machine seen from two sides: a bucket with
/// `tokens` of `burst` at `now` is full again at `now + (burst - tokens) × interval`, and that
/// one time (GCRA's theoretical arrival time) is all the state either needs. So the bucket
/// keeps that single word rather than a level and a refill time: its direct limiter updates it
/// with one compare-and-swap instead of a lock, and it decides exactly as GCRA does. Only the
/// name (in specs, rule files and traces) tells them apart.
///
/// Reservations ([`Op::Reserve`]) may run the bucket into debt, up to 2^62 ticks of the rate's
/// [`TickInterval`](crate::rate::TickInterval) (about 146 000 years of permits at whole-microsecond
/// paces); one that would go deeper is denied, with the `retry_after` at which it would fit. Times
/// count up to a horizon (Unix time in the year 2398 at the finest pace, far later at coarser ones)
/// beyond which the bucket stops refilling: it grants what it holds, then denies.
///
/// ```
/// use sluicegate::{Algorithm, Rate, TokenBucket};
/// use sluicegate::state_machine::Op;
/// use std::num::NonZeroU64;
///
/// let bucket = TokenBucket::new(Rate::per_second(10)?, 20)?;
/// let mut state = bucket.initial_state(0);
/// let decision = bucket.decide(&mut state, 0, NonZeroU64::new(5).unwrap(), Op::Check)?;
/// assert_eq!((decision.allowed(), decision.remaining()), (true, 15));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    gcra: Gcra,
}

/// A token bucket's state: the tick (of the rate's [`TickInterval`](crate::rate::TickInterval)) at
/// which the bucket is full again. The level at `now` is `burst` less the ticks from `now` until
/// then, counted in permits; a time beyond `now + burst × interval` is debt from reservations.
pub type TokenBucketState = Tat;

impl TokenBucket {
    /// The bucket's rate, size and ticks (leases size and end themselves by it).
    pub(crate) fn shape(&self) -> &BucketShape {
        self.gcra.shape()
    }

    /// A full bucket of `burst` tokens refilled at `rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<TokenBucket, ConfigError> {
        Ok(TokenBucket {
            gcra: Gcra::new(rate, burst)?,
        })
    }

    /// A bucket starting with `initial` of its `burst` tokens.
    pub fn with_initial(rate: Rate, burst: u64, initial: u64) -> Result<TokenBucket, ConfigError> {
        Ok(TokenBucket {
            gcra: Gcra::with_initial(rate, burst, initial)?,
        })
    }

    /// The refill rate.
    pub fn rate(&self) -> Rate {
        self.gcra.rate()
    }

    /// The bucket size.
    pub fn burst(&self) -> u64 {
        self.gcra.burst()
    }

    /// The tokens a fresh bucket starts with (the burst unless built
    /// [`with_initial`](Self::with_initial)).
    pub fn initial(&self) -> u64 {
        self.gcra.initial()
    }

    /// GCRA's error, naming this algorithm.
    fn named(&self, error: CheckError) -> CheckError {
        match error {
            CheckError::Unsupported { operation, .. } => CheckError::Unsupported {
                algorithm: self.name(),
                operation,
            },
            other => other,
        }
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn name(&self) -> &'static str {
        "token-bucket"
    }

    fn limit(&self) -> u64 {
        self.gcra.limit()
    }

    fn capacity(&self) -> u64 {
        self.gcra.capacity()
    }

    fn initial_state(&self, created_at: Micros) -> TokenBucketState {
        self.gcra.initial_state(created_at)
    }

    #[inline(always)]
    fn decide(
        &self,
        state: &mut TokenBucketState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        self.gcra
            .decide(state, now, permits, op)
            .map_err(|error| self.named(error))
    }

    #[inline(always)]
    fn admit(
        &self,
        state: &mut TokenBucketState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Admission, CheckError> {
        self.gcra
            .admit(state, now, permits, op)
            .map_err(|error| self.named(error))
    }

    fn is_fresh(&self, state: &TokenBucketState, now: Micros) -> bool {
        self.gcra.is_fresh(state, now)
    }

    fn carry_over(&self, new: &Self, state: &mut TokenBucketState, now: Micros) {
        self.gcra.carry_over(&new.gcra, state, now);
    }
}

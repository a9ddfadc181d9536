//! The generic cell rate algorithm: a token bucket kept as one number, the theoretical arrival
//! time (TAT) of the next permit.

use std::num::NonZeroU64;

use crate::algorithm::bucket::{BucketAnswer, BucketShape};
use crate::cell::WordCell;
use crate::clock::Micros;
use crate::decision::{Admission, Decision};
use crate::error::{CheckError, ConfigError};
use crate::rate::Rate;
use crate::state_machine::{Algorithm, AlgorithmState, Op, ensure_capacity, unsupported};

/// GCRA: `rate` with bursts of up to `burst` permits, deciding exactly as a
/// [`TokenBucket`](crate::TokenBucket) of the same rate and burst, in one word of state,
/// including the token bucket's limits on reservations and on time (see its docs).
///
/// ```
/// use sluicegate::{Algorithm, Gcra, Rate};
/// use sluicegate::state_machine::Op;
/// use std::num::NonZeroU64;
///
/// let gcra = Gcra::new(Rate::per_second(10)?, 2)?;
/// let mut tat = gcra.initial_state(0);
/// let one = NonZeroU64::MIN;
/// assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed());
/// assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed());
/// let denied = gcra.decide(&mut tat, 0, one, Op::Check)?;
/// assert_eq!(denied.retry_after(), Some(std::time::Duration::from_millis(100)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gcra {
    shape: BucketShape,
}

/// The theoretical arrival time, in ticks of the rate's
/// [`TickInterval`](crate::rate::TickInterval).
///
/// Times are counted up to a horizon (Unix time in the year 2398 at the finest pace, far
/// later at coarser ones); a clock reading beyond it counts as the horizon itself, so the
/// bucket stops refilling there rather than wrapping around (see the bucket algorithms' docs).
pub type Tat = u64;

impl AlgorithmState for Tat {
    type Cell = WordCell;
}

impl Gcra {
    /// The bucket's rate, size and ticks (leases size and end themselves by it).
    pub(crate) fn shape(&self) -> &BucketShape {
        &self.shape
    }

    /// A full bucket of `burst` permits refilled at `rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<Gcra, ConfigError> {
        Ok(Gcra {
            shape: BucketShape::new(rate, burst, None)?,
        })
    }

    /// Like [`Gcra::new`], but starting with `initial` permits instead of a full bucket.
    pub fn with_initial(rate: Rate, burst: u64, initial: u64) -> Result<Gcra, ConfigError> {
        Ok(Gcra {
            shape: BucketShape::new(rate, burst, Some(initial))?,
        })
    }

    /// The refill rate.
    pub fn rate(&self) -> Rate {
        self.shape.rate
    }

    /// The bucket size.
    pub fn burst(&self) -> u64 {
        self.shape.burst()
    }

    /// The permits a fresh limiter starts with (the burst unless built
    /// [`with_initial`](Self::with_initial)).
    pub fn initial(&self) -> u64 {
        self.shape.initial
    }

    /// [`Algorithm::decide`] and [`Algorithm::admit`], written once.
    #[inline(always)]
    fn answer<R: BucketAnswer>(
        &self,
        tat: &mut Tat,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<R, CheckError> {
        let s = &self.shape;
        let n = ensure_capacity(permits, s.burst())?;
        if op == Op::Release {
            return Err(unsupported(self.name(), op));
        }
        let now_t = s.ticks(now);
        // Ticks by which the bucket is short of full, before and after this request.
        let debt = tat.saturating_sub(now_t);
        let debt_after = debt.saturating_add(n * s.pace.interval);
        // No overflow below: `now_t` is at most the horizon, `u64::MAX - MAX_DEBT`, and an
        // admitted debt at most the tolerance or (reserved) `MAX_DEBT`.
        if debt_after <= s.tolerance {
            // A peek takes nothing: it reports what the bucket holds now.
            if op == Op::Peek {
                return Ok(R::decided(s.peek(debt, debt_after)));
            }
            *tat = now_t + debt_after;
            return Ok(s.pass(debt_after));
        }
        let wait = s.micros_ceil(debt_after - s.tolerance);
        let retry = match op {
            Op::Reserve { max_wait } => {
                let delay = s.reservation_delay(debt_after, wait, max_wait);
                if delay == 0 {
                    *tat = now_t + debt_after;
                    return Ok(R::decided(s.allow(debt_after).with_wait(wait)));
                }
                delay
            }
            Op::Charge => {
                let (charged, denial) = s.charge_denied(debt_after, n);
                // No overflow: `now_t` is at most the horizon, `charged` at most `MAX_DEBT`.
                *tat = now_t + charged;
                return Ok(R::decided(denial));
            }
            _ => wait,
        };
        if n == 1 {
            return Ok(R::decided(s.deny_one(debt, retry)));
        }
        Ok(R::decided(s.deny(debt, retry)))
    }
}

impl Algorithm for Gcra {
    type State = Tat;

    fn name(&self) -> &'static str {
        "gcra"
    }

    fn limit(&self) -> u64 {
        self.shape.burst()
    }

    fn capacity(&self) -> u64 {
        self.shape.burst()
    }

    fn initial_state(&self, created_at: Micros) -> Tat {
        let s = &self.shape;
        s.ticks(created_at) + (s.burst() - s.initial) * s.pace.interval
    }

    #[inline(always)]
    fn decide(
        &self,
        tat: &mut Tat,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        self.answer(tat, now, permits, op)
    }

    #[inline(always)]
    fn admit(
        &self,
        tat: &mut Tat,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Admission, CheckError> {
        self.answer(tat, now, permits, op)
    }

    fn is_fresh(&self, tat: &Tat, now: Micros) -> bool {
        *tat <= self.shape.ticks(now)
    }

    fn carry_over(&self, new: &Self, tat: &mut Tat, now: Micros) {
        let debt = tat.saturating_sub(self.shape.ticks(now));
        // At most `MAX_DEBT`, so the sum stays in range.
        let new_debt = self.shape.rescale_debt(&new.shape, debt);
        *tat = new.shape.ticks(now) + new_debt;
    }
}

//! The leaky bucket as a meter: a level that drains at a steady rate, filled by each request.

use std::num::NonZeroU64;

use crate::algorithm::bucket::BucketShape;
use crate::cell::LockedCell;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::rate::Rate;
use crate::state_machine::{Algorithm, AlgorithmState, Op, ensure_capacity, unsupported};

/// A bucket of `capacity` that drains at `rate`; a request of `n` permits pours `n` in and is
/// allowed if the level stays at most `capacity`. Starts empty.
///
/// This is the [`TokenBucket`](crate::TokenBucket) seen from the other side (the level is the
/// capacity minus the tokens), and it decides identically, to the microsecond: the level is
/// kept in exact ticks of the rate's [`TickInterval`](crate::rate::TickInterval), `reset_after` is
/// the time until the bucket is empty and `retry_after` the time until the request's permits fit,
/// both rounded up to a whole microsecond. It has nothing to reserve, so [`Op::Reserve`] is
/// unsupported. [`Op::Charge`] pours denied permits in too: the level may rise above the capacity
/// (up to 2^62 ticks), and the bucket denies until it has drained back below.
/// Like the token bucket, it counts time up to a horizon (Unix time in the year 2398 at the
/// finest pace) past which time stands still: the bucket drains no more, so it denies once
/// full.
///
/// ```
/// use sluicegate::{Algorithm, LeakyBucket, Rate};
/// use sluicegate::state_machine::Op;
/// use std::{num::NonZeroU64, time::Duration};
///
/// let bucket = LeakyBucket::new(Rate::per_second(10)?, 2)?;
/// let mut state = bucket.initial_state(0);
/// let one = NonZeroU64::MIN;
/// assert!(bucket.decide(&mut state, 0, one, Op::Check)?.allowed());
/// assert!(bucket.decide(&mut state, 0, one, Op::Check)?.allowed());
/// let denied = bucket.decide(&mut state, 0, one, Op::Check)?;
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(100)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakyBucket {
    shape: BucketShape,
}

/// A leaky bucket's level and when it last drained, both in ticks of the rate's pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucketState {
    /// The level, as ticks of drain time (one permit is one emission interval).
    pub level: u64,
    /// When `level` was last brought up to date.
    pub leaked_at: u64,
}

impl AlgorithmState for LeakyBucketState {
    type Cell = LockedCell<LeakyBucketState>;
}

impl LeakyBucket {
    /// The bucket's rate, size and ticks (leases size and end themselves by it).
    pub(crate) fn shape(&self) -> &BucketShape {
        &self.shape
    }

    /// An empty bucket of `capacity` (at least 1) draining at `rate`.
    pub fn new(rate: Rate, capacity: u64) -> Result<LeakyBucket, ConfigError> {
        let shape = BucketShape::new(rate, capacity, None).map_err(|err| match err {
            ConfigError::InvalidParameter {
                name: "burst",
                value,
                reason,
            } => ConfigError::InvalidParameter {
                name: "capacity",
                value,
                reason: reason.replace("burst", "capacity"),
            },
            other => other,
        })?;
        Ok(LeakyBucket { shape })
    }

    /// The drain rate.
    pub fn rate(&self) -> Rate {
        self.shape.rate
    }

    /// The bucket's capacity.
    pub fn bucket_capacity(&self) -> u64 {
        self.shape.burst()
    }

    /// The level at `now_t`, drained but not below empty.
    #[inline]
    /// Pours `permits` in at `now` as if at `at` (a lease's last microsecond, not before
    /// `now`): the level becomes what it would be at `at` with them, plus the time until
    /// `at`, so it never drains them before `at` (the level of GCRA's TAT `max(TAT, at) +
    /// permits`). `false`, the state untouched, unless they fit at `now`.
    pub(crate) fn pour_as_at(
        &self,
        state: &mut LeakyBucketState,
        now: Micros,
        at: Micros,
        permits: u64,
    ) -> bool {
        let s = &self.shape;
        let now_t = s.ticks(now).max(state.leaked_at);
        let level = self.level_at(state, now_t);
        let added = permits.saturating_mul(s.pace.interval);
        if level.saturating_add(added) > s.tolerance {
            return false;
        }
        let until_at = s.ticks(at).saturating_sub(now_t);
        *state = LeakyBucketState {
            level: level.max(until_at) + added,
            leaked_at: now_t,
        };
        true
    }

    fn level_at(&self, state: &LeakyBucketState, now_t: u64) -> u64 {
        state
            .level
            .saturating_sub(now_t.saturating_sub(state.leaked_at))
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    fn name(&self) -> &'static str {
        "leaky-bucket"
    }

    fn limit(&self) -> u64 {
        self.shape.burst()
    }

    fn capacity(&self) -> u64 {
        self.shape.burst()
    }

    fn initial_state(&self, created_at: Micros) -> LeakyBucketState {
        LeakyBucketState {
            level: 0,
            leaked_at: self.shape.ticks(created_at),
        }
    }

    #[inline]
    fn decide(
        &self,
        state: &mut LeakyBucketState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let s = &self.shape;
        let n = ensure_capacity(permits, s.burst())?;
        if !matches!(op, Op::Check | Op::Peek | Op::Charge) {
            return Err(unsupported(self.name(), op));
        }
        // A clock that went back does not drain (nor refill) anything.
        let now_t = s.ticks(now).max(state.leaked_at);
        let level = self.level_at(state, now_t);
        // The level is at most `MAX_DEBT` (2^62, after a charge) and the permits at most the
        // tolerance (< 2^61), so the sum cannot overflow.
        let after = level + n * s.pace.interval;
        if after <= s.tolerance {
            // A peek pours nothing in: it reports the room at the level now.
            if op == Op::Peek {
                return Ok(s.peek(level, after));
            }
            *state = LeakyBucketState {
                level: after,
                leaked_at: now_t,
            };
            return Ok(s.allow(after));
        }
        if op == Op::Charge {
            let (charged, denial) = s.charge_denied(after, n);
            *state = LeakyBucketState {
                level: charged,
                leaked_at: now_t,
            };
            return Ok(denial);
        }
        Ok(s.deny(level, s.pace.to_micros_ceil(after - s.tolerance)))
    }

    fn is_fresh(&self, state: &LeakyBucketState, now: Micros) -> bool {
        self.level_at(state, self.shape.ticks(now)) == 0
    }

    fn carry_over(&self, new: &Self, state: &mut LeakyBucketState, now: Micros) {
        let now_t = self.shape.ticks(now).max(state.leaked_at);
        let level = self.level_at(state, now_t);
        // The level is as of `now_t`, the later of now and the last leak (a clock that went
        // back): stored as of now, the time in between would be drained a second time.
        let leaked_at = new
            .shape
            .ticks(now)
            .max(self.shape.ticks_as(&new.shape, state.leaked_at));
        *state = LeakyBucketState {
            level: self.shape.rescale_debt(&new.shape, level),
            leaked_at,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn permits(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).expect("non-zero permits")
    }

    #[test]
    fn drains_at_the_rate_in_exact_ticks() -> Result<(), Box<dyn std::error::Error>> {
        // 3 per second: one permit drains in 333 333.3µs, kept exact as 1 000 000 ticks of 1/3µs.
        let lb = LeakyBucket::new(Rate::per_second(3)?, 3)?;
        let mut s = lb.initial_state(0);
        let d = lb.decide(&mut s, 0, permits(3), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 0));
        assert_eq!(d.reset_after(), Duration::from_secs(1));
        let denied = lb.decide(&mut s, 0, permits(2), Op::Check)?;
        assert_eq!(denied.retry_after(), Some(Duration::from_micros(666_667)));
        assert_eq!(s.level, 3_000_000);
        assert!(!lb.decide(&mut s, 666_666, permits(2), Op::Check)?.allowed());
        let d = lb.decide(&mut s, 666_667, permits(2), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 0));
        // 3 000 000 - 2 000 001 drained + 2 000 000 poured in.
        assert_eq!(s.level, 2_999_999);
        assert!(!lb.is_fresh(&s, 1_666_666));
        assert!(lb.is_fresh(&s, 1_666_667));
        Ok(())
    }

    #[test]
    fn unsupported_ops_and_capacity() -> Result<(), Box<dyn std::error::Error>> {
        let lb = LeakyBucket::new(Rate::per_second(1)?, 2)?;
        let mut s = lb.initial_state(0);
        assert_eq!(
            lb.decide(&mut s, 0, permits(3), Op::Check),
            Err(CheckError::InsufficientCapacity {
                requested: 3,
                capacity: 2
            })
        );
        for op in [Op::Release, Op::Reserve { max_wait: None }] {
            assert!(matches!(
                lb.decide(&mut s, 0, permits(1), op),
                Err(CheckError::Unsupported { .. })
            ));
        }
        assert_eq!(s, lb.initial_state(0));
        Ok(())
    }

    #[test]
    fn carry_over_keeps_the_fill_ratio() -> Result<(), Box<dyn std::error::Error>> {
        let old = LeakyBucket::new(Rate::per_second(1)?, 4)?;
        let new = LeakyBucket::new(Rate::per_second(2)?, 8)?;
        let mut s = old.initial_state(0);
        let _ = old.decide(&mut s, 0, permits(2), Op::Check)?;
        old.carry_over(&new, &mut s, 0);
        // Half full: 4 of 8 permits' worth, 500ms each; a peek of all 4 reports all 4 there.
        assert_eq!(s.level, 2_000_000);
        assert_eq!(new.decide(&mut s, 0, permits(4), Op::Peek)?.remaining(), 4);
        assert!(!new.decide(&mut s, 0, permits(5), Op::Peek)?.allowed());
        Ok(())
    }

    #[test]
    fn carry_over_behind_the_last_leak_drains_once() -> Result<(), Box<dyn std::error::Error>> {
        // Last drained at 1s; carried over at 0 (a clock behind the last decision), the next
        // decision at 1s must not drain [0, 1s] a second time.
        let old = LeakyBucket::new(Rate::per_second(1)?, 1)?;
        for new in [old.clone(), LeakyBucket::new(Rate::per_second(3)?, 3)?] {
            let mut s = old.initial_state(0);
            assert!(
                old.decide(&mut s, 1_000_000, permits(1), Op::Check)?
                    .allowed()
            );
            old.carry_over(&new, &mut s, 0);
            assert!(
                !new.decide(&mut s, 1_000_000, permits(1), Op::Peek)?
                    .allowed()
            );
            assert!(new.is_fresh(&s, 2_000_000));
        }
        Ok(())
    }

    #[test]
    fn rejects_bad_capacity_by_name() -> Result<(), Box<dyn std::error::Error>> {
        let err = LeakyBucket::new(Rate::per_second(1)?, 0).expect_err("zero capacity");
        assert!(err.to_string().contains("capacity"), "{err}");
        let err = LeakyBucket::new(Rate::per_hour(1)?, u64::MAX / 2).expect_err("too big");
        assert!(err.to_string().contains("capacity"), "{err}");
        Ok(())
    }
}

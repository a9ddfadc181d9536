//! The leaky bucket as a queue, nginx `limit_req`: requests beyond the burst are rejected, the
//! others pass after a shaping delay that spaces them at the rate.

use std::num::NonZeroU64;

use crate::algorithm::bucket::{BucketAnswer, BucketShape};
use crate::algorithm::gcra::Tat;
use crate::clock::Micros;
use crate::decision::{Admission, Decision};
use crate::error::{CheckError, ConfigError};
use crate::rate::Rate;
use crate::state_machine::{Algorithm, Op, ensure_capacity, unsupported};

/// Which admitted requests wait, as nginx's `limit_req` options say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueDelay {
    /// nginx's default: every request beyond the first waits its turn at the rate.
    Shape,
    /// nginx `nodelay`: every request within the burst passes at once.
    NoDelay,
    /// nginx `delay=D`: the first `D` excess requests pass at once, the rest wait. `D` at or
    /// above the burst is `NoDelay`; `After(0)` is `Shape`.
    After(u64),
}

/// nginx `limit_req`: `rate`, `burst` and a [`QueueDelay`], exact in ticks of the rate's
/// [`TickInterval`](crate::rate::TickInterval).
///
/// nginx keeps an `excess` per key and, for each request, computes
/// `excess' = max(excess - rate * elapsed + 1, 0)`, rejecting it if `excess' > burst` and
/// otherwise delaying it by `(excess' - D) / rate` when `excess' > D`. Since `excess'` is
/// always one less than the queue's length after an admitted request, this is GCRA with a
/// capacity of `burst + 1` permits of interval `T`: `TAT' = max(TAT, now) + n * T`, rejected if
/// `TAT' - now > (burst + 1) * T`, otherwise admitted with
/// `wait = max(0, TAT' - now - (D + 1) * T)`, which is what this computes. Admitted requests are
/// `allowed` with [`Decision::wait`] set (the shaping delay); rejected ones consume nothing.
/// [`Decision::limit`] is `burst + 1`, the most a single request may ask for.
///
/// Where it departs from nginx, on purpose:
/// - nginx counts time in milliseconds and excess in thousandths of a request, truncating the
///   drain (`rate * ms / 1000`) and the delay; here both are exact in ticks, and `wait` and
///   `retry_after` are rounded up to a whole microsecond.
/// - nginx charges 1 per request; here a request may take `n` permits (`n * T` of queue).
/// - nginx resets a clock that went back by more than a minute to 1ms elapsed; here a clock
///   that went back drains nothing, so the queue is never shortened by a clock step.
/// - nginx, with several `limit_req` on one request, waits for the longest of their delays;
///   combining limits is the caller's business here.
/// - nginx rejects `burst=0` as written but uses 0 when `burst` is absent, and needs
///   `delay >= 1`; here `burst` 0 is allowed (only one request at a time) and `After(0)` is
///   `Shape`.
///
/// Times count up to the same horizon as the other buckets' (Unix time in the year 2398 at the
/// finest pace); past it time stands still, so the queue drains no more: it admits what fits,
/// then rejects.
///
/// [`Op::Check`] and [`Op::Reserve`] both admit with a wait (`Reserve { max_wait }` also
/// rejects a wait above `max_wait`); [`Op::Peek`] reports without consuming.
///
/// ```
/// use sluicegate::{Algorithm, LeakyQueue, QueueDelay, Rate};
/// use sluicegate::state_machine::Op;
/// use std::{num::NonZeroU64, time::Duration};
///
/// let queue = LeakyQueue::new(Rate::per_second(10)?, 2, QueueDelay::Shape)?;
/// let mut state = queue.initial_state(0);
/// let one = NonZeroU64::MIN;
/// let waits: Vec<_> = (0..3)
///     .map(|_| queue.decide(&mut state, 0, one, Op::Check).map(|d| d.wait()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(waits, [0, 100, 200].map(Duration::from_millis));
/// assert!(!queue.decide(&mut state, 0, one, Op::Check)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakyQueue {
    /// A bucket of `burst + 1` permits.
    shape: BucketShape,
    burst: u64,
    delay: QueueDelay,
    /// `(D + 1) * T`: how much queue passes without waiting.
    no_wait: u64,
}

impl LeakyQueue {
    /// Requests at `rate`, up to `burst` beyond the rate queued (with waits as `delay` says),
    /// the rest rejected.
    pub fn new(rate: Rate, burst: u64, delay: QueueDelay) -> Result<LeakyQueue, ConfigError> {
        let too_big = |reason: String| ConfigError::invalid("burst", burst, reason);
        let size = burst
            .checked_add(1)
            .ok_or_else(|| too_big("is too large".into()))?;
        let shape = BucketShape::new(rate, size, None).map_err(|_| {
            too_big(format!(
                "a burst of {burst} at {rate} spans too long a time to count exactly"
            ))
        })?;
        let free = match delay {
            QueueDelay::Shape => 0,
            QueueDelay::NoDelay => burst,
            QueueDelay::After(d) => d.min(burst),
        };
        let no_wait = (free + 1) * shape.pace.interval;
        Ok(LeakyQueue {
            shape,
            burst,
            delay,
            no_wait,
        })
    }

    /// The rate requests leave the queue at.
    pub fn rate(&self) -> Rate {
        self.shape.rate
    }

    /// Requests queued beyond the rate before rejecting.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Which admitted requests wait.
    pub fn delay(&self) -> QueueDelay {
        self.delay
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
        let max_wait = match op {
            Op::Check | Op::Peek => None,
            Op::Reserve { max_wait } => max_wait,
            // A refused request never enters the queue: there is nothing to count it in.
            Op::Release | Op::Charge => return Err(unsupported(self.name(), op)),
        };
        let now_t = s.ticks(now);
        // The queue ahead of this request, and with it, in ticks (nginx's excess + 1).
        let queue = tat.saturating_sub(now_t);
        let queue_after = queue.saturating_add(n * s.pace.interval);
        let wait = s
            .pace
            .to_micros_ceil(queue_after.saturating_sub(self.no_wait));
        // Both only shrink as time passes, one microsecond per microsecond.
        let overflow = s
            .pace
            .to_micros_ceil(queue_after.saturating_sub(s.tolerance));
        let too_long = max_wait.map_or(0, |limit| wait.saturating_sub(limit));
        if overflow > 0 || too_long > 0 {
            return Ok(R::decided(s.deny(queue, overflow.max(too_long))));
        }
        // A peek joins no queue: it reports the room left with the queue as it is.
        if op == Op::Peek {
            return Ok(R::decided(s.peek(queue, queue_after).with_wait(wait)));
        }
        // No overflow: `now_t` is at most the horizon and `queue_after` within the bucket.
        *tat = now_t + queue_after;
        if wait == 0 {
            return Ok(s.pass(queue_after));
        }
        Ok(R::decided(s.allow(queue_after).with_wait(wait)))
    }
}

impl Algorithm for LeakyQueue {
    type State = Tat;

    fn name(&self) -> &'static str {
        "leaky-queue"
    }

    fn limit(&self) -> u64 {
        self.shape.burst()
    }

    fn capacity(&self) -> u64 {
        self.shape.burst()
    }

    fn initial_state(&self, created_at: Micros) -> Tat {
        self.shape.ticks(created_at)
    }

    #[inline]
    fn decide(
        &self,
        tat: &mut Tat,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        self.answer(tat, now, permits, op)
    }

    #[inline]
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
        let queue = tat.saturating_sub(self.shape.ticks(now));
        // At most `MAX_DEBT`, so the sum stays in range.
        let new_queue = self.shape.rescale_debt(&new.shape, queue);
        *tat = new.shape.ticks(now) + new_queue;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn permits(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).expect("non-zero permits")
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// Four requests at once, then one at 150ms: `(allowed, wait)` for each.
    fn run(delay: QueueDelay) -> Result<Vec<(bool, Duration)>, Box<dyn std::error::Error>> {
        let q = LeakyQueue::new(Rate::per_second(10)?, 2, delay)?;
        let mut tat = q.initial_state(0);
        let mut seen = Vec::new();
        for now in [0, 0, 0, 0, 150_000] {
            let d = q.decide(&mut tat, now, permits(1), Op::Check)?;
            seen.push((d.allowed(), d.wait()));
        }
        Ok(seen)
    }

    #[test]
    fn matches_nginx_on_a_burst() -> Result<(), Box<dyn std::error::Error>> {
        // nginx, rate=10r/s burst=2: excess 0, 1, 2 pass, 3 is rejected; 150ms later the
        // excess is 2 - 1.5 + 1 = 1.5, delayed (1.5 - D) / 10 seconds.
        assert_eq!(
            run(QueueDelay::Shape)?,
            vec![
                (true, ms(0)),
                (true, ms(100)),
                (true, ms(200)),
                (false, ms(0)),
                (true, ms(150))
            ]
        );
        assert_eq!(
            run(QueueDelay::After(1))?,
            vec![
                (true, ms(0)),
                (true, ms(0)),
                (true, ms(100)),
                (false, ms(0)),
                (true, ms(50))
            ]
        );
        let nodelay = run(QueueDelay::NoDelay)?;
        assert_eq!(nodelay, run(QueueDelay::After(5))?);
        assert!(nodelay.iter().all(|&(_, wait)| wait == Duration::ZERO));
        assert_eq!(
            nodelay
                .iter()
                .map(|&(allowed, _)| allowed)
                .collect::<Vec<_>>(),
            vec![true, true, true, false, true]
        );
        assert_eq!(run(QueueDelay::After(0))?, run(QueueDelay::Shape)?);
        Ok(())
    }

    #[test]
    fn rejection_reports_when_it_would_fit() -> Result<(), Box<dyn std::error::Error>> {
        let q = LeakyQueue::new(Rate::per_second(10)?, 2, QueueDelay::Shape)?;
        let mut tat = q.initial_state(0);
        let _ = q.decide(&mut tat, 0, permits(3), Op::Check)?;
        let denied = q.decide(&mut tat, 0, permits(2), Op::Check)?;
        assert_eq!(
            (denied.allowed(), denied.remaining(), denied.retry_after()),
            (false, 0, Some(ms(200)))
        );
        assert_eq!(denied.reset_after(), ms(300));
        assert_eq!(tat, 300_000);
        let d = q.decide(&mut tat, 200_000, permits(2), Op::Check)?;
        assert_eq!((d.allowed(), d.wait(), d.remaining()), (true, ms(200), 0));
        Ok(())
    }

    #[test]
    fn reserve_with_a_max_wait() -> Result<(), Box<dyn std::error::Error>> {
        let q = LeakyQueue::new(Rate::per_second(10)?, 2, QueueDelay::Shape)?;
        let mut tat = q.initial_state(0);
        let _ = q.decide(&mut tat, 0, permits(2), Op::Check)?;
        let before = tat;
        let patient = Op::Reserve {
            max_wait: Some(120_000),
        };
        let denied = q.decide(&mut tat, 0, permits(1), patient)?;
        assert_eq!(denied.retry_after(), Some(ms(80)));
        assert_eq!(tat, before);
        let d = q.decide(&mut tat, 80_000, permits(1), patient)?;
        assert_eq!((d.allowed(), d.wait()), (true, ms(120)));
        let d = q.decide(&mut tat, 80_000, permits(1), Op::Reserve { max_wait: None })?;
        assert_eq!((d.allowed(), d.wait()), (false, Duration::ZERO));
        assert_eq!(d.retry_after(), Some(ms(20)));
        Ok(())
    }

    #[test]
    fn peeks_and_errors_consume_nothing() -> Result<(), Box<dyn std::error::Error>> {
        let q = LeakyQueue::new(Rate::per_second(10)?, 1, QueueDelay::Shape)?;
        let mut tat = q.initial_state(0);
        let _ = q.decide(&mut tat, 0, permits(1), Op::Check)?;
        let before = tat;
        let peek = q.decide(&mut tat, 0, permits(1), Op::Peek)?;
        assert_eq!((peek.allowed(), peek.wait()), (true, ms(100)));
        assert_eq!(
            q.decide(&mut tat, 0, permits(3), Op::Check),
            Err(CheckError::InsufficientCapacity {
                requested: 3,
                capacity: 2
            })
        );
        assert!(q.decide(&mut tat, 0, permits(1), Op::Release).is_err());
        assert_eq!(tat, before);
        assert!(!q.is_fresh(&tat, 99_999));
        assert!(q.is_fresh(&tat, 100_000));
        Ok(())
    }

    #[test]
    fn keeps_limiting_at_the_end_of_time() -> Result<(), Box<dyn std::error::Error>> {
        // Past the horizon time stands still: the queue admits what fits, then rejects, and
        // nothing drains it. It never becomes "no limit".
        let q = LeakyQueue::new(Rate::per_second(3)?, 4, QueueDelay::Shape)?;
        let mut tat = q.initial_state(u64::MAX);
        let d = q.decide(&mut tat, u64::MAX, permits(5), Op::Check)?;
        assert!(d.allowed());
        for later in [u64::MAX, u64::MAX - 1, u64::MAX / 2] {
            assert!(!q.decide(&mut tat, later, permits(1), Op::Check)?.allowed());
        }
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() -> Result<(), Box<dyn std::error::Error>> {
        let err = LeakyQueue::new(Rate::per_second(1)?, u64::MAX, QueueDelay::Shape)
            .expect_err("burst overflows");
        assert!(err.to_string().contains("burst"), "{err}");
        let err = LeakyQueue::new(Rate::per_hour(1)?, u64::MAX / 4, QueueDelay::NoDelay)
            .expect_err("burst too long");
        assert!(err.to_string().contains("burst"), "{err}");
        Ok(())
    }
}

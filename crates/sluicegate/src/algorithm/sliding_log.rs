//! The sliding log: the exact count of permits granted in the last window, from a log of every
//! grant.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Duration;

use crate::algorithm::window::{positive_limit, window_micros};
use crate::cell::LockedCell;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::state_machine::{Algorithm, AlgorithmState, Op, ensure_capacity, unsupported};

/// At most `limit` permits in any interval `(t - window, t]`, exactly.
///
/// The state logs every grant (one entry per distinct microsecond, so at most `limit` entries
/// of 16 bytes): exact, but memory grows with the limit, unlike the
/// [`SlidingWindow`](crate::SlidingWindow) estimate. A grant made at `t` stops counting at
/// `t + window`. `retry_after` is the exact time until enough old grants have left the window,
/// and `reset_after` the time until the newest one has.
///
/// [`Op::Charge`] is unsupported: logging denied permits too would let one client that keeps
/// asking grow the log by an entry per microsecond it asks in, without bound from the limit
/// (a window of an hour at 100 000 denied calls a second is gigabytes per key). Use the
/// [`SlidingWindow`](crate::SlidingWindow), which keeps a fixed number of slots whatever
/// the traffic, to count denials.
///
/// ```
/// use sluicegate::{Algorithm, SlidingLog};
/// use sluicegate::state_machine::Op;
/// use std::{num::NonZeroU64, time::Duration};
///
/// let log = SlidingLog::new(2, Duration::from_secs(1))?;
/// let mut state = log.initial_state(0);
/// let one = NonZeroU64::MIN;
/// assert!(log.decide(&mut state, 0, one, Op::Check)?.allowed());
/// assert!(log.decide(&mut state, 900_000, one, Op::Check)?.allowed());
/// let denied = log.decide(&mut state, 950_000, one, Op::Check)?;
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(50)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    window: Micros,
}

/// The log of grants, oldest first: `(time, permits)`, times strictly increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    grants: VecDeque<(Micros, u64)>,
    /// The sum of the permits in `grants`.
    total: u64,
}

impl SlidingLogState {
    /// The grants kept, oldest first, as `(time, permits)`; grants that have left the window
    /// are dropped at the next allowed request.
    pub fn grants(&self) -> &VecDeque<(Micros, u64)> {
        &self.grants
    }
}

impl AlgorithmState for SlidingLogState {
    type Cell = LockedCell<SlidingLogState>;
}

/// Where a request stands against the log.
struct Standing {
    /// The time the request is counted at: `now`, or the newest grant's time if later (the
    /// clock went back), so the log stays in order and errs towards granting less.
    at: Micros,
    /// Index of the oldest grant still in the window at `at`.
    first_live: usize,
    /// Permits granted in the window.
    used: u64,
}

impl SlidingLog {
    /// At most `limit` (at least 1) permits in any `window` (a whole number of microseconds,
    /// at least 1µs).
    pub fn new(limit: u64, window: Duration) -> Result<SlidingLog, ConfigError> {
        Ok(SlidingLog {
            limit: positive_limit(limit)?,
            window: window_micros(window)?,
        })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window)
    }

    /// When a grant made at `t` stops counting.
    fn expiry(&self, t: Micros) -> Micros {
        t.saturating_add(self.window)
    }

    fn standing(&self, state: &SlidingLogState, now: Micros) -> Standing {
        let at = state.grants.back().map_or(now, |&(t, _)| t.max(now));
        let first_live = state.grants.partition_point(|&(t, _)| self.expiry(t) <= at);
        let expired: u64 = state.grants.range(..first_live).map(|&(_, p)| p).sum();
        Standing {
            at,
            first_live,
            used: state.total - expired,
        }
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn name(&self) -> &'static str {
        "sliding-log"
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn initial_state(&self, _created_at: Micros) -> SlidingLogState {
        SlidingLogState::default()
    }

    fn decide(
        &self,
        state: &mut SlidingLogState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let n = ensure_capacity(permits, self.limit)?;
        if !matches!(op, Op::Check | Op::Peek) {
            return Err(unsupported(self.name(), op));
        }
        let Standing {
            at,
            first_live,
            used,
        } = self.standing(state, now);
        if let Some(after) = used.checked_add(n).filter(|after| *after <= self.limit) {
            let reset = self.expiry(at).saturating_sub(now);
            // A peek logs nothing: it reports what the window has left now.
            if op == Op::Peek {
                return Ok(Decision::allow(self.limit, self.limit - used, reset));
            }
            for _ in 0..first_live {
                if let Some((_, p)) = state.grants.pop_front() {
                    state.total -= p;
                }
            }
            match state.grants.back_mut() {
                Some((t, p)) if *t == at => *p += n,
                _ => state.grants.push_back((at, n)),
            }
            state.total += n;
            return Ok(Decision::allow(self.limit, self.limit - after, reset));
        }
        // Old grants leave one by one; the request fits once `need` permits have left.
        let need = used - (self.limit - n);
        let mut freed = 0u64;
        let mut fits_at = at;
        for &(t, p) in state.grants.range(first_live..) {
            freed += p;
            fits_at = self.expiry(t);
            if freed >= need {
                break;
            }
        }
        let newest = state.grants.back().map_or(at, |&(t, _)| self.expiry(t));
        Ok(Decision::deny(
            self.limit,
            self.limit.saturating_sub(used),
            newest.saturating_sub(now),
            Some(fits_at.saturating_sub(now)),
        ))
    }

    fn is_fresh(&self, state: &SlidingLogState, now: Micros) -> bool {
        state
            .grants
            .back()
            .is_none_or(|&(t, _)| self.expiry(t) <= now)
    }

    /// The log is kept as it is: its grants count against the new limit over the new window.
    fn carry_over(&self, _new: &Self, _state: &mut SlidingLogState, _now: Micros) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permits(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).expect("non-zero permits")
    }

    #[test]
    fn counts_exactly_over_the_last_window() -> Result<(), Box<dyn std::error::Error>> {
        // 5 per 10s: grants of 2 at 1s, 1 at 4s, 2 at 8s.
        let log = SlidingLog::new(5, Duration::from_secs(10))?;
        let mut s = log.initial_state(0);
        let d = log.decide(&mut s, 1_000_000, permits(2), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 3));
        assert_eq!(d.reset_after(), Duration::from_secs(10));
        let _ = log.decide(&mut s, 4_000_000, permits(1), Op::Check)?;
        let _ = log.decide(&mut s, 8_000_000, permits(2), Op::Check)?;
        // At 9s, 3 permits need 3 to leave: 2 leave at 11s, 1 more at 14s.
        let denied = log.decide(&mut s, 9_000_000, permits(3), Op::Check)?;
        assert!(!denied.allowed());
        assert_eq!(denied.remaining(), 0);
        assert_eq!(denied.retry_after(), Some(Duration::from_secs(5)));
        assert_eq!(denied.reset_after(), Duration::from_secs(9));
        // One microsecond early it still fails; at 14s it passes.
        assert!(
            !log.decide(&mut s, 13_999_999, permits(3), Op::Peek)?
                .allowed()
        );
        let d = log.decide(&mut s, 14_000_000, permits(3), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 0));
        // The grants at 1s and 4s were dropped when the request at 14s was granted.
        assert_eq!(
            s.grants().iter().copied().collect::<Vec<_>>(),
            vec![(8_000_000, 2), (14_000_000, 3)]
        );
        Ok(())
    }

    #[test]
    fn a_grant_leaves_exactly_one_window_later() -> Result<(), Box<dyn std::error::Error>> {
        let log = SlidingLog::new(1, Duration::from_micros(100))?;
        let mut s = log.initial_state(0);
        assert!(log.decide(&mut s, 50, permits(1), Op::Check)?.allowed());
        let denied = log.decide(&mut s, 149, permits(1), Op::Check)?;
        assert_eq!(denied.retry_after(), Some(Duration::from_micros(1)));
        assert!(!log.is_fresh(&s, 149));
        assert!(log.is_fresh(&s, 150));
        assert!(log.decide(&mut s, 150, permits(1), Op::Check)?.allowed());
        Ok(())
    }

    #[test]
    fn denials_peeks_and_errors_leave_state_alone() -> Result<(), Box<dyn std::error::Error>> {
        let log = SlidingLog::new(3, Duration::from_secs(1))?;
        let mut s = log.initial_state(0);
        let _ = log.decide(&mut s, 0, permits(3), Op::Check)?;
        let before = s.clone();
        // Even long after the grant left, a peek does not prune.
        assert!(
            log.decide(&mut s, 5_000_000, permits(3), Op::Peek)?
                .allowed()
        );
        assert!(!log.decide(&mut s, 10, permits(1), Op::Check)?.allowed());
        assert!(log.decide(&mut s, 10, permits(4), Op::Check).is_err());
        assert!(log.decide(&mut s, 10, permits(1), Op::Release).is_err());
        let reserve = Op::Reserve { max_wait: None };
        assert!(log.decide(&mut s, 10, permits(1), reserve).is_err());
        assert_eq!(s, before);
        Ok(())
    }

    #[test]
    fn a_clock_going_back_counts_at_the_newest_grant() -> Result<(), Box<dyn std::error::Error>> {
        let log = SlidingLog::new(2, Duration::from_secs(1))?;
        let mut s = log.initial_state(0);
        let _ = log.decide(&mut s, 5_000_000, permits(1), Op::Check)?;
        let d = log.decide(&mut s, 4_000_000, permits(1), Op::Check)?;
        assert_eq!(d.reset_after(), Duration::from_secs(2));
        assert_eq!(
            s.grants().iter().copied().collect::<Vec<_>>(),
            vec![(5_000_000, 2)]
        );
        let denied = log.decide(&mut s, 4_000_000, permits(1), Op::Check)?;
        assert_eq!(denied.retry_after(), Some(Duration::from_secs(2)));
        Ok(())
    }

    #[test]
    fn survives_the_end_of_time() -> Result<(), Box<dyn std::error::Error>> {
        let log = SlidingLog::new(u64::MAX, Duration::from_secs(1))?;
        let mut s = log.initial_state(0);
        assert!(
            log.decide(&mut s, u64::MAX - 1, permits(u64::MAX), Op::Check)?
                .allowed()
        );
        let d = log.decide(&mut s, u64::MAX - 1, permits(1), Op::Check)?;
        assert_eq!(d.retry_after(), Some(Duration::from_micros(1)));
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(SlidingLog::new(0, Duration::from_secs(1)).is_err());
        let err = SlidingLog::new(1, Duration::ZERO).expect_err("zero window");
        assert!(err.to_string().contains("window"), "{err}");
    }
}

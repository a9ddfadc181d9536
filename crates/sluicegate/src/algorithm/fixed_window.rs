//! The fixed window counter: at most `limit` permits per window, windows aligned to multiples
//! of their length since time 0 (the Unix epoch on the system clock), as Envoy's rate limit
//! service counts.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::algorithm::window::{positive_limit, window_micros};
use crate::cell::LockedCell;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::state_machine::{Algorithm, AlgorithmState, Op, ensure_capacity, unsupported};

/// At most `limit` permits in each window `[k * window, (k + 1) * window)`.
///
/// A request is allowed if the window's count plus its permits is at most `limit`. Every
/// decision reports `reset_after` as the time to the end of the current window, and a denial
/// retries then, when the next window starts empty. Up to `2 * limit` permits can pass within
/// one window's length across a boundary; that is the price of one counter per key.
///
/// [`Op::Charge`] counts denied permits too, as envoyproxy/ratelimit does: the count may go
/// past the limit, and the window then denies everything until it ends.
///
/// ```
/// use sluicegate::{Algorithm, FixedWindow};
/// use sluicegate::state_machine::Op;
/// use std::{num::NonZeroU64, time::Duration};
///
/// let window = FixedWindow::new(2, Duration::from_secs(1))?;
/// let mut state = window.initial_state(0);
/// let one = NonZeroU64::MIN;
/// assert!(window.decide(&mut state, 200_000, one, Op::Check)?.allowed());
/// assert!(window.decide(&mut state, 300_000, one, Op::Check)?.allowed());
/// let denied = window.decide(&mut state, 400_000, one, Op::Check)?;
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(600)));
/// assert!(window.decide(&mut state, 1_000_000, one, Op::Check)?.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedWindow {
    limit: u64,
    window: Micros,
}

/// The window a fixed window counter last counted in, and its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowState {
    /// The start of the window `count` belongs to, a multiple of the window length.
    pub window_start: Micros,
    /// Permits counted in that window: those granted, and with [`Op::Charge`] those denied.
    pub count: u64,
}

impl AlgorithmState for FixedWindowState {
    type Cell = LockedCell<FixedWindowState>;
}

impl FixedWindow {
    /// At most `limit` (at least 1) permits per `window` (a whole number of microseconds, at
    /// least 1µs).
    pub fn new(limit: u64, window: Duration) -> Result<FixedWindow, ConfigError> {
        Ok(FixedWindow {
            limit: positive_limit(limit)?,
            window: window_micros(window)?,
        })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window)
    }

    fn aligned(&self, now: Micros) -> Micros {
        now - now % self.window
    }

    /// The window in force at `now` and its count. A stored window later than `now`'s (the
    /// clock went back) stays in force: counting against it errs towards granting less.
    fn current(&self, state: &FixedWindowState, now: Micros) -> (Micros, u64) {
        let start = self.aligned(now);
        if state.count > 0 && state.window_start >= start {
            (state.window_start, state.count)
        } else {
            (start, 0)
        }
    }

    /// The end of the window a lease taken at `now` is counted in: its permits must be used
    /// in it. `None` if a later window is in force (the clock went back).
    pub(crate) fn lease_end(&self, state: &FixedWindowState, now: Micros) -> Option<Micros> {
        let (start, _) = self.current(state, now);
        (start == self.aligned(now)).then(|| start.saturating_add(self.window))
    }

    /// Uncounts up to `permits` counted by a lease taken at `taken_at`, if the window that
    /// counted them is still the one kept and has not ended at `now`; the permits given back.
    pub(crate) fn give_back(
        &self,
        state: &mut FixedWindowState,
        now: Micros,
        taken_at: Micros,
        permits: u64,
    ) -> u64 {
        let start = self.aligned(taken_at);
        if state.window_start != start || now >= start.saturating_add(self.window) {
            return 0;
        }
        let back = permits.min(state.count);
        state.count -= back;
        back
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn name(&self) -> &'static str {
        "fixed-window"
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn initial_state(&self, created_at: Micros) -> FixedWindowState {
        FixedWindowState {
            window_start: self.aligned(created_at),
            count: 0,
        }
    }

    fn decide(
        &self,
        state: &mut FixedWindowState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let n = ensure_capacity(permits, self.limit)?;
        if !matches!(op, Op::Check | Op::Peek | Op::Charge) {
            return Err(unsupported(self.name(), op));
        }
        let (start, count) = self.current(state, now);
        let until_end = start.saturating_add(self.window).saturating_sub(now);
        match count.checked_add(n).filter(|after| *after <= self.limit) {
            // A peek counts nothing: it reports what the window has left now.
            Some(_) if op == Op::Peek => {
                Ok(Decision::allow(self.limit, self.limit - count, until_end))
            }
            Some(after) => {
                *state = FixedWindowState {
                    window_start: start,
                    count: after,
                };
                Ok(Decision::allow(self.limit, self.limit - after, until_end))
            }
            None => {
                let mut counted = count;
                if op == Op::Charge {
                    // Counted past the limit (saturating: `u64::MAX` is past any limit a
                    // request fits). The next window still starts empty: retry then.
                    counted = count.saturating_add(n);
                    *state = FixedWindowState {
                        window_start: start,
                        count: counted,
                    };
                }
                Ok(Decision::deny(
                    self.limit,
                    self.limit.saturating_sub(counted),
                    until_end,
                    Some(until_end),
                ))
            }
        }
    }

    fn is_fresh(&self, state: &FixedWindowState, now: Micros) -> bool {
        self.current(state, now).1 == 0
    }

    fn carry_over(&self, new: &Self, state: &mut FixedWindowState, now: Micros) {
        let (_, count) = self.current(state, now);
        *state = FixedWindowState {
            window_start: new.aligned(now),
            count,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permits(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).expect("non-zero permits")
    }

    #[test]
    fn counts_per_aligned_window() -> Result<(), Box<dyn std::error::Error>> {
        // 3 per 10s; the limiter is created mid-window, windows still start at multiples of 10s.
        let fw = FixedWindow::new(3, Duration::from_secs(10))?;
        let mut s = fw.initial_state(4_000_000);
        let d = fw.decide(&mut s, 7_000_000, permits(2), Op::Check)?;
        assert_eq!(
            (d.allowed(), d.remaining(), d.reset_after()),
            (true, 1, Duration::from_secs(3))
        );
        let denied = fw.decide(&mut s, 9_500_000, permits(2), Op::Check)?;
        assert!(!denied.allowed());
        assert_eq!(denied.remaining(), 1);
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(500)));
        assert_eq!(s.count, 2);
        let d = fw.decide(&mut s, 9_999_999, permits(1), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 0));
        assert_eq!(d.reset_after(), Duration::from_micros(1));
        // The next window starts empty.
        let d = fw.decide(&mut s, 10_000_000, permits(3), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 0));
        assert_eq!(
            s,
            FixedWindowState {
                window_start: 10_000_000,
                count: 3
            }
        );
        Ok(())
    }

    #[test]
    fn peek_denial_and_errors_leave_state_alone() -> Result<(), Box<dyn std::error::Error>> {
        let fw = FixedWindow::new(2, Duration::from_secs(1))?;
        let mut s = fw.initial_state(0);
        let peek = fw.decide(&mut s, 0, permits(2), Op::Peek)?;
        // Nothing taken: both permits are still there.
        assert_eq!((peek.allowed(), peek.remaining()), (true, 2));
        assert_eq!(s.count, 0);
        assert!(fw.is_fresh(&s, 0));
        let _ = fw.decide(&mut s, 0, permits(1), Op::Check)?;
        let before = s;
        assert!(!fw.decide(&mut s, 1, permits(2), Op::Check)?.allowed());
        assert_eq!(
            fw.decide(&mut s, 1, permits(3), Op::Check),
            Err(CheckError::InsufficientCapacity {
                requested: 3,
                capacity: 2
            })
        );
        for op in [Op::Release, Op::Reserve { max_wait: None }] {
            assert!(matches!(
                fw.decide(&mut s, 1, permits(1), op),
                Err(CheckError::Unsupported { .. })
            ));
        }
        assert_eq!(s, before);
        assert!(!fw.is_fresh(&s, 999_999));
        assert!(fw.is_fresh(&s, 1_000_000));
        Ok(())
    }

    #[test]
    fn carry_over_keeps_the_count() -> Result<(), Box<dyn std::error::Error>> {
        let old = FixedWindow::new(10, Duration::from_secs(1))?;
        let new = FixedWindow::new(5, Duration::from_secs(60))?;
        let mut s = old.initial_state(0);
        let _ = old.decide(&mut s, 61_500_000, permits(4), Op::Check)?;
        old.carry_over(&new, &mut s, 61_600_000);
        assert_eq!(
            s,
            FixedWindowState {
                window_start: 60_000_000,
                count: 4
            }
        );
        let d = new.decide(&mut s, 61_700_000, permits(2), Op::Check)?;
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(Duration::from_micros(58_300_000)));
        Ok(())
    }

    #[test]
    fn survives_the_end_of_time() -> Result<(), Box<dyn std::error::Error>> {
        let fw = FixedWindow::new(u64::MAX, Duration::from_micros(u64::MAX))?;
        let mut s = fw.initial_state(u64::MAX);
        assert!(
            fw.decide(&mut s, u64::MAX, permits(u64::MAX), Op::Check)?
                .allowed()
        );
        let d = fw.decide(&mut s, u64::MAX, permits(1), Op::Check)?;
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Some(Duration::ZERO));
        let fw = FixedWindow::new(1, Duration::from_secs(7))?;
        let mut s = fw.initial_state(0);
        assert!(
            fw.decide(&mut s, u64::MAX, permits(1), Op::Check)?
                .allowed()
        );
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let err = FixedWindow::new(0, Duration::from_secs(1)).expect_err("zero limit");
        assert!(err.to_string().contains("limit"), "{err}");
        let err = FixedWindow::new(1, Duration::ZERO).expect_err("zero window");
        assert!(err.to_string().contains("window"), "{err}");
        let err = FixedWindow::new(1, Duration::from_nanos(1500)).expect_err("fraction of a µs");
        assert!(err.to_string().contains("window"), "{err}");
        let err = FixedWindow::new(1, Duration::MAX).expect_err("too long");
        assert!(err.to_string().contains("window"), "{err}");
    }
}

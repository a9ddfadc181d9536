//! The sliding window counter: counts per sub-window, summed over the last `K` slots, or
//! Cloudflare's weighted estimate over the previous and current windows.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Duration;

use crate::algorithm::window::{positive_limit, window_micros};
use crate::cell::LockedCell;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::state_machine::{Algorithm, AlgorithmState, Op, ensure_capacity, unsupported};

/// At most `limit` permits per sliding `window`, counted per slot.
///
/// - With `buckets = Some(K)`, the timeline is cut into slots `j` covering the microseconds `t`
///   with `floor(t * K / window) == j` (so slot `j` starts at `ceil(j * window / K)`, exactly,
///   even when `K` does not divide the window). A request is allowed if the permits of the last
///   `K` slots, the current one included, plus its own are at most `limit`.
/// - With `buckets = None`, Cloudflare's estimate: windows `[k * window, (k + 1) * window)`, and
///   a request at `elapsed` into its window is allowed if
///   `prev * (window - elapsed) / window + curr + n <= limit`, compared exactly as
///   `prev * (window - elapsed) + (curr + n) * window <= limit * window` in 128-bit integers.
///
/// [`Op::Charge`] counts denied permits too (envoyproxy/ratelimit's counting): the counts may
/// go past the limit, and a denial's `retry_after` is then when the same request would fit
/// once the counted permits, the denied ones included, have aged out.
///
/// Both are exact: no floats, no rounding in the decision. `retry_after` is the earliest whole
/// microsecond at which the same request would pass (the fractional instant rounded up), and
/// `reset_after` the time until the newest counted slot stops counting. `remaining` is the
/// whole number of permits that would still pass (the estimate's fraction rounded down).
///
/// ```
/// use sluicegate::{Algorithm, SlidingWindow};
/// use sluicegate::state_machine::Op;
/// use std::{num::NonZeroU64, time::Duration};
///
/// // Cloudflare's example: 42 in the previous minute, 18 in this one, 15s in: 49.5 of 50.
/// let sw = SlidingWindow::new(50, Duration::from_secs(60), None)?;
/// let mut state = sw.initial_state(0);
/// sw.decide(&mut state, 10_000_000, NonZeroU64::new(42).unwrap(), Op::Check)?;
/// sw.decide(&mut state, 75_000_000, NonZeroU64::new(18).unwrap(), Op::Check)?;
/// let denied = sw.decide(&mut state, 75_000_000, NonZeroU64::MIN, Op::Check)?;
/// assert!(!denied.allowed());
/// // 42 * (45s - d) / 60s + 19 <= 50 once d >= 714 285.7µs.
/// assert_eq!(denied.retry_after(), Some(Duration::from_micros(714_286)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: u64,
    window: Micros,
    buckets: Option<u64>,
}

/// Permits per slot, oldest first: `(slot index, permits)`, indices strictly increasing, only
/// slots with permits. In the weighted mode a slot is a whole window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    slots: VecDeque<(u64, u64)>,
}

impl SlidingWindowState {
    /// The slots kept, oldest first, as `(slot index, permits)`; slots that no longer count
    /// are dropped at the next allowed request.
    pub fn slots(&self) -> &VecDeque<(u64, u64)> {
        &self.slots
    }
}

impl AlgorithmState for SlidingWindowState {
    type Cell = LockedCell<SlidingWindowState>;
}

/// Where a request stands against the counts.
struct Standing {
    /// The time the request is counted at: `now`, or the start of the newest slot if later
    /// (the clock went back), which errs towards granting less.
    at: Micros,
    /// The slot of `at`.
    current: u64,
    /// Index of the oldest slot that still counts.
    first_live: usize,
}

impl SlidingWindow {
    /// At most `limit` (at least 1) permits per `window` (whole microseconds, at least 1µs),
    /// over `buckets` slots (between 1 and the window's length in microseconds), or over
    /// Cloudflare's two-window estimate if `buckets` is `None`.
    pub fn new(
        limit: u64,
        window: Duration,
        buckets: Option<u32>,
    ) -> Result<SlidingWindow, ConfigError> {
        let limit = positive_limit(limit)?;
        let window = window_micros(window)?;
        let buckets = buckets.map(u64::from);
        if let Some(k) = buckets {
            if k == 0 {
                return Err(ConfigError::invalid("buckets", k, "must be at least 1"));
            }
            if k > window {
                return Err(ConfigError::invalid(
                    "buckets",
                    k,
                    format!("cannot exceed the window's {window} microseconds"),
                ));
            }
        }
        Ok(SlidingWindow {
            limit,
            window,
            buckets,
        })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window)
    }

    /// The number of slots, or `None` for the weighted two-window estimate.
    pub fn buckets(&self) -> Option<u64> {
        self.buckets
    }

    /// Slots per window: `K`, or 1 in the weighted mode.
    fn per_window(&self) -> u64 {
        self.buckets.unwrap_or(1)
    }

    /// How many slots count, the current one included: `K`, or the previous and current
    /// windows in the weighted mode.
    fn span(&self) -> u64 {
        self.buckets.unwrap_or(2)
    }

    fn slot_of(&self, t: Micros) -> u64 {
        let slot = u128::from(t) * u128::from(self.per_window()) / u128::from(self.window);
        // At most `t`, since there are no more slots than microseconds in a window.
        u64::try_from(slot).unwrap_or(u64::MAX)
    }

    /// The first microsecond of slot `j` (saturating).
    fn slot_start(&self, j: u64) -> Micros {
        let start =
            (u128::from(j) * u128::from(self.window)).div_ceil(u128::from(self.per_window()));
        u64::try_from(start).unwrap_or(u64::MAX)
    }

    /// When the permits of slot `j` stop counting.
    fn slot_expiry(&self, j: u64) -> Micros {
        self.slot_start(j.saturating_add(self.span()))
    }

    /// The end of the slot a lease taken at `now` is counted in: its permits must be used in
    /// it. `None` if a later slot is kept (the clock went back).
    pub(crate) fn lease_end(&self, state: &SlidingWindowState, now: Micros) -> Option<Micros> {
        let current = self.slot_of(now);
        if state.slots.back().is_some_and(|&(s, _)| s > current) {
            return None;
        }
        Some(self.slot_start(current.saturating_add(1)))
    }

    /// Uncounts up to `permits` counted by a lease taken at `taken_at` from its slot, if the
    /// slot is still kept; the permits given back. Exact whenever it happens: the permits
    /// were counted in that slot and never used.
    pub(crate) fn give_back(
        &self,
        state: &mut SlidingWindowState,
        taken_at: Micros,
        permits: u64,
    ) -> u64 {
        let slot = self.slot_of(taken_at);
        let Some(i) = state.slots.iter().position(|&(s, _)| s == slot) else {
            return 0;
        };
        let back = permits.min(state.slots[i].1);
        state.slots[i].1 -= back;
        if state.slots[i].1 == 0 {
            state.slots.remove(i);
        }
        back
    }

    fn standing(&self, state: &SlidingWindowState, now: Micros) -> Standing {
        let current = state
            .slots
            .back()
            .map_or(self.slot_of(now), |&(s, _)| s.max(self.slot_of(now)));
        let first_live = state
            .slots
            .partition_point(|&(s, _)| s.saturating_add(self.span()) <= current);
        Standing {
            at: now.max(self.slot_start(current)),
            current,
            first_live,
        }
    }

    /// The newest counted slot's expiry, as a duration from `now`.
    fn reset_from(&self, state: &SlidingWindowState, first_live: usize, now: Micros) -> u64 {
        match state.slots.range(first_live..).next_back() {
            Some(&(s, _)) => self.slot_expiry(s).saturating_sub(now),
            None => 0,
        }
    }

    /// `(allowed, remaining, retry_at)` for `n` permits, in either mode.
    fn weigh(&self, state: &SlidingWindowState, st: &Standing, n: u64) -> (bool, u64, u64) {
        match self.buckets {
            Some(_) => self.decide_slots(state, st, n),
            None => self.decide_weighted(state, st, n),
        }
    }

    /// Adds `n` permits to the current slot, dropping the slots that no longer count.
    fn count(state: &mut SlidingWindowState, st: &Standing, n: u64) {
        state.slots.drain(..st.first_live);
        match state.slots.back_mut() {
            Some((s, p)) if *s == st.current => *p = p.saturating_add(n),
            _ => state.slots.push_back((st.current, n)),
        }
    }

    /// A denied [`Op::Charge`]: the permits are counted all the same, and the retry time is
    /// when the same request would fit given the counts with them.
    fn charge_denied(
        &self,
        state: &mut SlidingWindowState,
        st: &Standing,
        now: Micros,
        n: u64,
    ) -> Decision {
        Self::count(state, st, n);
        let st = self.standing(state, now);
        // Over the limit already, so the same request is denied again; `remaining` is 0.
        let (_, remaining, retry_at) = self.weigh(state, &st, n);
        let reset = self.reset_from(state, st.first_live, now);
        Decision::deny(
            self.limit,
            remaining,
            reset,
            Some(retry_at.saturating_sub(now)),
        )
    }

    /// `(allowed, remaining, retry_at)` over the last `K` slots.
    fn decide_slots(&self, state: &SlidingWindowState, st: &Standing, n: u64) -> (bool, u64, u64) {
        let live = state.slots.range(st.first_live..);
        let used = live
            .clone()
            .fold(0u64, |sum, &(_, p)| sum.saturating_add(p));
        if let Some(after) = used.checked_add(n).filter(|after| *after <= self.limit) {
            return (true, self.limit - after, 0);
        }
        // Slots leave oldest first; the request fits once `need` permits have left.
        let need = used - (self.limit - n);
        let mut freed = 0u64;
        let mut fits_at = st.at;
        for &(s, p) in live {
            freed = freed.saturating_add(p);
            fits_at = self.slot_expiry(s);
            if freed >= need {
                break;
            }
        }
        (false, self.limit.saturating_sub(used), fits_at)
    }

    /// `(allowed, remaining, retry_at)` under the weighted two-window estimate.
    fn decide_weighted(
        &self,
        state: &SlidingWindowState,
        st: &Standing,
        n: u64,
    ) -> (bool, u64, u64) {
        let (mut prev, mut curr) = (0u128, 0u128);
        for &(s, p) in state.slots.range(st.first_live..) {
            if s == st.current {
                curr = u128::from(p);
            } else {
                prev = u128::from(p);
            }
        }
        let window = u128::from(self.window);
        let window_start = self.slot_start(st.current);
        let elapsed = u128::from(st.at - window_start);
        let cap = u128::from(self.limit) * window;
        let carried = prev.saturating_mul(window - elapsed);
        let weighed = |count: u128| carried.saturating_add(count.saturating_mul(window));
        let with_request = weighed(curr + u128::from(n));
        let whole = |slack: u128| u64::try_from(slack / window).unwrap_or(u64::MAX);
        if with_request <= cap {
            return (true, whole(cap - with_request), 0);
        }
        let remaining = whole(cap.saturating_sub(weighed(curr)));
        let excess = with_request - cap;
        // Within this window the previous count's weight falls by `prev` per microsecond.
        if prev > 0 {
            let wait = excess.div_ceil(prev);
            if wait < window - elapsed {
                let wait = u64::try_from(wait).unwrap_or(u64::MAX);
                return (false, remaining, st.at.saturating_add(wait));
            }
        }
        // In the next window, `curr` becomes the previous count and its weight falls in turn.
        let next_start = self.slot_start(st.current.saturating_add(1));
        let excess_next = (curr + u128::from(n))
            .saturating_mul(window)
            .saturating_sub(cap);
        let into_next = if excess_next == 0 {
            0
        } else {
            // `curr > 0` here: `n <= limit` alone fits an empty window.
            excess_next.div_ceil(curr.max(1))
        };
        let into_next = u64::try_from(into_next).unwrap_or(u64::MAX);
        (false, remaining, next_start.saturating_add(into_next))
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn name(&self) -> &'static str {
        "sliding-window"
    }

    fn limit(&self) -> u64 {
        self.limit
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn initial_state(&self, _created_at: Micros) -> SlidingWindowState {
        SlidingWindowState::default()
    }

    fn decide(
        &self,
        state: &mut SlidingWindowState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        let n = ensure_capacity(permits, self.limit)?;
        if !matches!(op, Op::Check | Op::Peek | Op::Charge) {
            return Err(unsupported(self.name(), op));
        }
        let st = self.standing(state, now);
        let (allowed, remaining, retry_at) = self.weigh(state, &st, n);
        if !allowed {
            if op == Op::Charge {
                return Ok(self.charge_denied(state, &st, now, n));
            }
            let reset = self.reset_from(state, st.first_live, now);
            let retry = retry_at.saturating_sub(now);
            return Ok(Decision::deny(self.limit, remaining, reset, Some(retry)));
        }
        let reset = self.slot_expiry(st.current).saturating_sub(now);
        if op == Op::Peek {
            // A peek counts nothing: what is left now is what the grant would leave plus the
            // request's own permits (exactly, in both modes: the weighted estimate's slack
            // grows by `n` whole windows' worth). At most the limit, so no overflow.
            return Ok(Decision::allow(self.limit, remaining + n, reset));
        }
        Self::count(state, &st, n);
        Ok(Decision::allow(self.limit, remaining, reset))
    }

    fn is_fresh(&self, state: &SlidingWindowState, now: Micros) -> bool {
        let current = self.slot_of(now);
        state
            .slots
            .back()
            .is_none_or(|&(s, _)| s.saturating_add(self.span()) <= current)
    }

    /// Keeps the counted permits: each slot's count moves to the new slot holding the old
    /// slot's last microsecond (or `now`, if earlier), so no permit stops counting sooner than
    /// the new slots require.
    fn carry_over(&self, new: &Self, state: &mut SlidingWindowState, now: Micros) {
        let st = self.standing(state, now);
        let mut moved: VecDeque<(u64, u64)> = VecDeque::new();
        for &(s, p) in state.slots.range(st.first_live..) {
            let last = self.slot_start(s.saturating_add(1)).saturating_sub(1);
            let slot = new.slot_of(last.min(st.at));
            match moved.back_mut() {
                Some((t, q)) if *t == slot => *q = q.saturating_add(p),
                _ => moved.push_back((slot, p)),
            }
        }
        state.slots = moved;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permits(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).expect("non-zero permits")
    }

    fn us(micros: u64) -> Option<Duration> {
        Some(Duration::from_micros(micros))
    }

    #[test]
    fn slots_need_not_divide_the_window() -> Result<(), Box<dyn std::error::Error>> {
        // 3 per 10µs in 3 slots: slots start at 0, 4, 7, 10, 14, 17, 20 (ceil(10j/3)).
        let sw = SlidingWindow::new(3, Duration::from_micros(10), Some(3))?;
        let mut s = sw.initial_state(0);
        assert!(sw.decide(&mut s, 1, permits(2), Op::Check)?.allowed());
        let d = sw.decide(&mut s, 5, permits(1), Op::Check)?;
        assert_eq!(
            (d.allowed(), d.remaining(), d.reset_after()),
            (true, 0, us(9).unwrap_or_default())
        );
        // At 8 (slot 2) the slot-0 permits leave at 10, the slot-1 one at 14.
        let denied = sw.decide(&mut s, 8, permits(1), Op::Check)?;
        assert_eq!(denied.retry_after(), us(2));
        assert_eq!(denied.reset_after(), Duration::from_micros(6));
        assert!(!sw.decide(&mut s, 9, permits(1), Op::Check)?.allowed());
        let d = sw.decide(&mut s, 10, permits(1), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 1));
        assert_eq!(d.reset_after(), Duration::from_micros(10));
        assert_eq!(
            s.slots().iter().copied().collect::<Vec<_>>(),
            vec![(1, 1), (3, 1)]
        );
        // Three permits need both counted slots to leave: slot 3's leaves at 20.
        let denied = sw.decide(&mut s, 10, permits(3), Op::Check)?;
        assert_eq!(denied.retry_after(), us(10));
        assert!(!sw.is_fresh(&s, 19));
        assert!(sw.is_fresh(&s, 20));
        Ok(())
    }

    #[test]
    fn weighted_estimate_is_exact() -> Result<(), Box<dyn std::error::Error>> {
        let sw = SlidingWindow::new(50, Duration::from_secs(60), None)?;
        let mut s = sw.initial_state(0);
        let _ = sw.decide(&mut s, 10_000_000, permits(42), Op::Check)?;
        // 42 + 18 at the start of the next window is 60 > 50; 15s in, 31.5 + 18 = 49.5.
        assert!(
            !sw.decide(&mut s, 60_000_000, permits(18), Op::Check)?
                .allowed()
        );
        let d = sw.decide(&mut s, 75_000_000, permits(18), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 0));
        assert_eq!(d.reset_after(), Duration::from_secs(105));
        let denied = sw.decide(&mut s, 75_000_000, permits(1), Op::Check)?;
        assert_eq!(denied.remaining(), 0);
        assert_eq!(denied.retry_after(), us(714_286));
        assert_eq!(denied.reset_after(), Duration::from_secs(105));
        assert!(
            !sw.decide(&mut s, 75_714_285, permits(1), Op::Peek)?
                .allowed()
        );
        assert!(
            sw.decide(&mut s, 75_714_286, permits(1), Op::Peek)?
                .allowed()
        );
        Ok(())
    }

    #[test]
    fn weighted_retry_can_fall_in_the_next_window() -> Result<(), Box<dyn std::error::Error>> {
        let sw = SlidingWindow::new(2, Duration::from_micros(10), None)?;
        let mut s = sw.initial_state(0);
        assert!(sw.decide(&mut s, 0, permits(2), Op::Check)?.allowed());
        // No previous count to decay: wait for the next window, then for 2 * (10 - e) + 10 <= 20.
        assert_eq!(
            sw.decide(&mut s, 5, permits(1), Op::Check)?.retry_after(),
            us(10)
        );
        // At 16: 2 * 4 / 10 + 1 = 1.8 <= 2.
        let d = sw.decide(&mut s, 16, permits(1), Op::Check)?;
        assert_eq!((d.allowed(), d.remaining()), (true, 0));
        // Two more: 0.8 + 3 > 2; the previous count leaves at 20, then 1 * (10 - e) + 20 <= 20
        // at e = 10, i.e. 30.
        let denied = sw.decide(&mut s, 16, permits(2), Op::Check)?;
        assert_eq!(denied.retry_after(), us(14));
        assert!(!sw.decide(&mut s, 29, permits(2), Op::Peek)?.allowed());
        assert!(sw.decide(&mut s, 30, permits(2), Op::Peek)?.allowed());
        assert!(!sw.is_fresh(&s, 29));
        assert!(sw.is_fresh(&s, 30));
        Ok(())
    }

    #[test]
    fn denials_peeks_and_errors_leave_state_alone() -> Result<(), Box<dyn std::error::Error>> {
        for buckets in [Some(4), None] {
            let sw = SlidingWindow::new(3, Duration::from_secs(1), buckets)?;
            let mut s = sw.initial_state(0);
            let _ = sw.decide(&mut s, 0, permits(3), Op::Check)?;
            let before = s.clone();
            assert!(
                sw.decide(&mut s, 9_000_000, permits(3), Op::Peek)?
                    .allowed()
            );
            assert!(!sw.decide(&mut s, 10, permits(1), Op::Check)?.allowed());
            assert!(sw.decide(&mut s, 10, permits(4), Op::Check).is_err());
            assert!(sw.decide(&mut s, 10, permits(1), Op::Release).is_err());
            let reserve = Op::Reserve { max_wait: None };
            assert!(sw.decide(&mut s, 10, permits(1), reserve).is_err());
            assert_eq!(s, before);
        }
        Ok(())
    }

    #[test]
    fn carry_over_keeps_counts() -> Result<(), Box<dyn std::error::Error>> {
        let old = SlidingWindow::new(10, Duration::from_secs(4), Some(4))?;
        let new = SlidingWindow::new(5, Duration::from_secs(10), Some(2))?;
        let mut s = old.initial_state(0);
        let _ = old.decide(&mut s, 1_000_000, permits(2), Op::Check)?;
        let _ = old.decide(&mut s, 3_500_000, permits(3), Op::Check)?;
        old.carry_over(&new, &mut s, 4_200_000);
        // Old slots 1 and 3 end at 1.999999s and 3.999999s: both in the new slot 0 (0-5s).
        assert_eq!(s.slots().iter().copied().collect::<Vec<_>>(), vec![(0, 5)]);
        assert!(
            !new.decide(&mut s, 4_200_000, permits(1), Op::Check)?
                .allowed()
        );
        Ok(())
    }

    #[test]
    fn survives_the_end_of_time() -> Result<(), Box<dyn std::error::Error>> {
        for buckets in [Some(7), None] {
            let sw = SlidingWindow::new(u64::MAX, Duration::from_micros(u64::MAX), buckets)?;
            let mut s = sw.initial_state(0);
            assert!(
                sw.decide(&mut s, u64::MAX, permits(u64::MAX), Op::Check)?
                    .allowed()
            );
            let d = sw.decide(&mut s, u64::MAX, permits(u64::MAX), Op::Check)?;
            assert!(!d.allowed());
            let sw = SlidingWindow::new(3, Duration::from_secs(1), buckets)?;
            let mut s = sw.initial_state(0);
            assert!(
                sw.decide(&mut s, u64::MAX, permits(3), Op::Check)?
                    .allowed()
            );
            assert!(
                !sw.decide(&mut s, u64::MAX, permits(1), Op::Check)?
                    .allowed()
            );
        }
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let err = SlidingWindow::new(1, Duration::from_secs(1), Some(0)).expect_err("0 buckets");
        assert!(err.to_string().contains("buckets"), "{err}");
        let err =
            SlidingWindow::new(1, Duration::from_micros(5), Some(6)).expect_err("too many buckets");
        assert!(err.to_string().contains("buckets"), "{err}");
        assert!(SlidingWindow::new(1, Duration::from_micros(5), Some(5)).is_ok());
        assert!(SlidingWindow::new(0, Duration::from_secs(1), None).is_err());
        assert!(SlidingWindow::new(1, Duration::ZERO, None).is_err());
    }
}

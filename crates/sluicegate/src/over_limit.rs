//! The over-limit cache's rules, pure: when a denial a store gave at `since` answers a later
//! request on the same limit and key, without asking the store, and with the very decision the
//! store would give.
//!
//! A denial says the request did not fit, and when it will ([`Decision::retry_after`]). It
//! still holds at a later `now` only if nothing but time moves the limit's state back towards
//! allowing, and time does not get there before the retry time. That is true of the rate
//! algorithms (fixed and sliding windows, the sliding log, GCRA, the token bucket and the
//! leaky bucket meter), whose state only fills by requests and only drains by time; it is
//! false of a concurrency limit (a release frees a permit at any time) and is not claimed for
//! the rest (`leaky-queue`, whose denials come with queue waits, and Guava's smooth limiters,
//! which no shared store runs): their denials are never cached.
//!
//! The rules, for a denial of `n` permits at `since`, retry time `until = since + retry_after`,
//! `remaining = r`, taken while nothing else changes the state (a single process: any other
//! answer on the same limit and key replaces or drops the entry):
//!
//! - **Windows (`fixed-window`)**: the window's count cannot fall before the window ends, which
//!   is `until`; every request of more than `r` permits is denied until then, with the same
//!   `remaining`, `reset_after` and `retry_after` (the window's end). The entry answers any
//!   `m` in `r + 1 ..= capacity`.
//! - **Everything else that is cached** (sliding window and log, GCRA, token bucket, leaky
//!   bucket): `remaining` grows as time passes, and so does the retry time of a larger request
//!   differ. A request of `n` is denied at every whole microsecond before `until` (the earliest
//!   it passes), so the permits available stay below `n` until then; they never fall (no
//!   request is granted meanwhile), so when `r = n - 1` they stay exactly `r`. Only such a
//!   denial is cached, and it answers requests of exactly `n` permits. (A single permit's
//!   denial always qualifies: `r` is 0.)
//! - **Ops**: [`Op::Check`] and [`Op::Peek`] are answered (a denial charges nothing, a peek
//!   reports the same). [`Op::Charge`] (envoyproxy/ratelimit's counting) charges even a
//!   denial; answering it in the process skips that charge, which is exact only where the
//!   charges made while over the limit cannot change a later decision: a fixed window whose
//!   count is already at its limit (`r = 0`) denies everything until it ends, charged or not,
//!   and the next window starts empty either way. The sliding window is not (its previous
//!   window's count weighs on the next), nor the buckets (the charged debt delays the next
//!   grant): there a charge always goes to the store. Reservations go to the store too.
//! - A denial of a [`Op::Charge`] describes the state after the charge, which is what a check
//!   at the same time would answer: it is cached by the same rules.
//! - Times: the entry answers at `since <= now < until` only (a clock gone back asks the
//!   store), with `retry_after = until - now` and `reset_after = since + reset - now`: both
//!   count down one microsecond per microsecond, exactly as the store's would.
//!
//! Nothing is ever allowed from the cache: it only repeats denials, so it can never admit more
//! than the limit, whatever other processes do. With other processes charging the same key
//! meanwhile, the store's own answer could only be a longer denial (their charges fill the
//! state further): the cached `remaining` is then the most, and `retry_after` the least, that
//! the store could report.

use crate::clock::Micros;
use crate::decision::Decision;
use crate::spec::AnyAlgorithm;
use crate::state_machine::{Algorithm as _, Op};

/// A denial remembered: which requests it answers, until when, and with what numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverLimit {
    /// When the store gave the denial: earlier times are not answered.
    since: Micros,
    /// When the denied request could pass: the entry answers before then.
    until: Micros,
    /// When the state is fresh again (the denial's `reset_after` from `since`).
    reset_at: Micros,
    /// The denial's `limit`.
    limit: u64,
    /// The permits available, which stay the same until `until`.
    remaining: u64,
    /// The fewest permits answered.
    min_permits: u64,
    /// The most permits answered.
    max_permits: u64,
    /// Whether a [`Op::Charge`] is answered (its charge skipped).
    answers_charges: bool,
}

impl OverLimit {
    /// The entry a store's answer `decision` to `op` of `permits` on `algorithm` at `now`
    /// makes, if it is a denial that can be answered again (see the module's rules); `None`
    /// for a grant, an algorithm or op whose denials are not cached, or a denial whose numbers
    /// would change before its retry time.
    pub fn from_denial(
        algorithm: &AnyAlgorithm,
        op: Op,
        permits: u64,
        decision: &Decision,
        now: Micros,
    ) -> Option<OverLimit> {
        if decision.allowed() || decision.wait_micros() != 0 {
            return None;
        }
        if !matches!(op, Op::Check | Op::Peek | Op::Charge) {
            return None;
        }
        let retry = decision.retry_after_micros().filter(|&retry| retry > 0)?;
        let remaining = decision.remaining();
        let capacity = algorithm.capacity();
        let (min_permits, max_permits, answers_charges) = match algorithm {
            AnyAlgorithm::FixedWindow(_) => (remaining.checked_add(1)?, capacity, remaining == 0),
            AnyAlgorithm::SlidingWindow(_)
            | AnyAlgorithm::SlidingLog(_)
            | AnyAlgorithm::Gcra(_)
            | AnyAlgorithm::TokenBucket(_)
            | AnyAlgorithm::LeakyBucket(_) => {
                if remaining.checked_add(1) != Some(permits) {
                    return None;
                }
                (permits, permits, false)
            }
            _ => return None,
        };
        if min_permits > max_permits || permits > capacity {
            return None;
        }
        Some(OverLimit {
            since: now,
            until: now.checked_add(retry)?,
            reset_at: now.saturating_add(decision.reset_after_micros()),
            limit: decision.limit(),
            remaining,
            min_permits,
            max_permits,
            answers_charges,
        })
    }

    /// The store's decision on `op` of `permits` at `now`, if this entry knows it: always a
    /// denial, with the numbers the store would give.
    pub fn answer(&self, op: Op, permits: u64, now: Micros) -> Option<Decision> {
        if now < self.since || now >= self.until {
            return None;
        }
        if !(self.min_permits..=self.max_permits).contains(&permits) {
            return None;
        }
        let answered = match op {
            Op::Check | Op::Peek => true,
            Op::Charge => self.answers_charges,
            Op::Reserve { .. } | Op::Release => false,
        };
        answered.then(|| {
            Decision::deny(
                self.limit,
                self.remaining,
                self.reset_at.saturating_sub(now),
                Some(self.until - now),
            )
        })
    }

    /// The time from which the entry answers nothing: the denied request's retry time.
    pub fn until(&self) -> Micros {
        self.until
    }

    /// Whether the entry answers nothing any more at `now` (or later).
    pub fn is_expired(&self, now: Micros) -> bool {
        now >= self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Concurrency, FixedWindow, Gcra, Rate, SlidingWindow};
    use std::time::Duration;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn a_fixed_window_denial_answers_every_larger_request_until_the_window_ends() -> TestResult {
        let window = AnyAlgorithm::from(FixedWindow::new(10, Duration::from_secs(10))?);
        // 7 counted: 3 left, a request of 5 denied at 4 s, until the window ends at 10 s.
        let denial = Decision::deny(10, 3, 6_000_000, Some(6_000_000));
        let entry =
            OverLimit::from_denial(&window, Op::Check, 5, &denial, 4_000_000).ok_or("cached")?;
        let expected = Decision::deny(10, 3, 1_000_000, Some(1_000_000));
        assert_eq!(entry.answer(Op::Check, 4, 9_000_000), Some(expected));
        assert_eq!(entry.answer(Op::Peek, 10, 9_000_000), Some(expected));
        assert_eq!(entry.answer(Op::Check, 3, 9_000_000), None, "3 fit");
        assert_eq!(
            entry.answer(Op::Check, 11, 9_000_000),
            None,
            "beyond capacity"
        );
        assert_eq!(
            entry.answer(Op::Check, 4, 10_000_000),
            None,
            "the next window"
        );
        assert_eq!(
            entry.answer(Op::Check, 4, 3_999_999),
            None,
            "a clock gone back"
        );
        // 3 left: a charge would count past the limit and deny the 3 later: not skipped.
        assert_eq!(entry.answer(Op::Charge, 4, 9_000_000), None);
        assert_eq!(
            entry.answer(Op::Reserve { max_wait: None }, 4, 9_000_000),
            None
        );
        Ok(())
    }

    #[test]
    fn a_full_fixed_window_answers_charges_and_every_request() -> TestResult {
        let window = AnyAlgorithm::from(FixedWindow::new(10, Duration::from_secs(10))?);
        let denial = Decision::deny(10, 0, 2_000_000, Some(2_000_000));
        let entry =
            OverLimit::from_denial(&window, Op::Charge, 4, &denial, 8_000_000).ok_or("cached")?;
        let expected = Decision::deny(10, 0, 500_000, Some(500_000));
        assert_eq!(entry.answer(Op::Charge, 1, 9_500_000), Some(expected));
        assert_eq!(entry.answer(Op::Check, 10, 9_500_000), Some(expected));
        Ok(())
    }

    #[test]
    fn a_bucket_denial_answers_the_same_request_while_its_numbers_hold() -> TestResult {
        let gcra = AnyAlgorithm::from(Gcra::new(Rate::per_second(10)?, 5)?);
        // One permit short: remaining stays 2 until 3 fit, 80 ms later.
        let denial = Decision::deny(5, 2, 300_000, Some(80_000));
        let entry = OverLimit::from_denial(&gcra, Op::Check, 3, &denial, 1_000).ok_or("cached")?;
        assert_eq!(
            entry.answer(Op::Check, 3, 21_000),
            Some(Decision::deny(5, 2, 280_000, Some(60_000)))
        );
        assert_eq!(
            entry.answer(Op::Check, 4, 21_000),
            None,
            "its retry differs"
        );
        assert_eq!(
            entry.answer(Op::Charge, 3, 21_000),
            None,
            "a charge moves the debt"
        );
        assert_eq!(entry.answer(Op::Check, 3, 81_000), None, "it fits then");
        // Two short: one more permit is available before the request fits; not cached.
        let short_two = Decision::deny(5, 1, 300_000, Some(180_000));
        assert_eq!(
            OverLimit::from_denial(&gcra, Op::Check, 3, &short_two, 1_000),
            None
        );
        Ok(())
    }

    #[test]
    fn sliding_windows_never_skip_charges() -> TestResult {
        let sliding = AnyAlgorithm::from(SlidingWindow::new(10, Duration::from_secs(1), None)?);
        let denial = Decision::deny(10, 0, 1_500_000, Some(100_000));
        let entry = OverLimit::from_denial(&sliding, Op::Charge, 1, &denial, 0).ok_or("cached")?;
        assert!(entry.answer(Op::Check, 1, 50_000).is_some());
        assert_eq!(entry.answer(Op::Charge, 1, 50_000), None);
        Ok(())
    }

    #[test]
    fn grants_concurrency_and_unknown_retries_are_not_cached() -> TestResult {
        let window = AnyAlgorithm::from(FixedWindow::new(10, Duration::from_secs(10))?);
        let granted = Decision::allow(10, 0, 1_000);
        assert_eq!(
            OverLimit::from_denial(&window, Op::Check, 1, &granted, 0),
            None
        );
        let concurrency = AnyAlgorithm::from(Concurrency::new(2)?);
        let held = Decision::deny(2, 0, 0, None);
        assert_eq!(
            OverLimit::from_denial(&concurrency, Op::Check, 1, &held, 0),
            None
        );
        let no_retry = Decision::deny(10, 0, 1_000, None);
        assert_eq!(
            OverLimit::from_denial(&window, Op::Check, 1, &no_retry, 0),
            None
        );
        let reserved = Decision::deny(10, 0, 1_000, Some(1_000));
        let reserve = Op::Reserve { max_wait: Some(0) };
        assert_eq!(
            OverLimit::from_denial(&window, reserve, 1, &reserved, 0),
            None
        );
        Ok(())
    }
}

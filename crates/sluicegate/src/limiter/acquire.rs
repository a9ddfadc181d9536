//! Waiting for permits: Guava-style `acquire` (reserve, then sleep the wait) and
//! `try_acquire_for(permits, timeout)`, blocking and async.
//!
//! Reserving algorithms (GCRA, token bucket, leaky queue, Guava's smooth limiters) reserve in
//! one step and report the wait. The others (windows, leaky meter) have nothing to reserve, so
//! acquiring them means checking, sleeping the `retry_after` the denial names, and checking
//! again; with a timeout, the attempt stops once the next retry would land past the deadline.

use std::time::Duration;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::CheckError;
use crate::state_machine::Op;

/// How one acquisition proceeds: what to do after asking once.
pub(crate) enum Step {
    /// Done: this is the answer (granted, perhaps after `wait`, or finally refused).
    Done(Decision),
    /// Not granted yet: sleep this long, then ask again.
    SleepThenRetry(Duration),
}

/// Asks once for `permits`, reserving where the algorithm can; `deadline` is the time left
/// (`None` for no limit). Shared by the blocking and async loops so both decide alike.
pub(crate) fn acquire_step(
    decide: impl Fn(Op) -> Result<Decision, CheckError>,
    deadline: Option<Duration>,
) -> Result<Step, CheckError> {
    // Truncated, as Guava truncates a timeout: never wait longer than asked.
    let max_wait = deadline.map(|left| u64::try_from(left.as_micros()).unwrap_or(u64::MAX));
    let decision = match decide(Op::Reserve { max_wait }) {
        Ok(decision) if decision.allowed() => return Ok(Step::Done(decision)),
        // Refused with a deadline: either the wait is too long (final, as Guava's tryAcquire
        // answers at once) or nothing can be admitted yet (a full nginx queue), which a peek
        // tells apart: it ignores the deadline.
        Ok(refused) => match decide(Op::Peek)? {
            peek if peek.allowed() => return Ok(Step::Done(refused)),
            peek => peek,
        },
        Err(CheckError::Unsupported { .. }) => decide(Op::Check)?,
        Err(other) => return Err(other),
    };
    if decision.allowed() {
        return Ok(Step::Done(decision));
    }
    // Denied now (a window spent, a full nginx queue): time alone may let it through.
    match decision.retry_after() {
        // Time alone will let this request through: sleep until then, unless that is too late.
        Some(retry) if deadline.is_none_or(|left| retry <= left) => {
            Ok(Step::SleepThenRetry(retry.max(Duration::from_micros(1))))
        }
        Some(_) => Ok(Step::Done(decision)),
        // Only a release can help (concurrency limits): nothing to wait for here.
        None => Err(CheckError::Unsupported {
            algorithm: "concurrency",
            operation: "acquire (waiting for a release)",
        }),
    }
}

/// The blocking loop: sleeps on `clock` (a manual clock just advances).
pub(crate) fn acquire_blocking<C: Clock>(
    clock: &C,
    decide: impl Fn(Op) -> Result<Decision, CheckError>,
    timeout: Option<Duration>,
) -> Result<Decision, CheckError> {
    let start = clock.now();
    loop {
        let elapsed = Duration::from_micros(clock.now().saturating_sub(start));
        let left = timeout.map(|t| t.saturating_sub(elapsed));
        match acquire_step(&decide, left)? {
            Step::Done(decision) => {
                if decision.allowed() && !decision.wait().is_zero() {
                    clock.sleep(decision.wait());
                }
                return Ok(decision);
            }
            Step::SleepThenRetry(pause) => clock.sleep(pause),
        }
    }
}

/// The async loop: tokio's timer for a real clock, advancing for a manual one.
#[cfg(feature = "tokio")]
pub(crate) async fn acquire_async<C: Clock>(
    clock: &C,
    decide: impl Fn(Op) -> Result<Decision, CheckError>,
    timeout: Option<Duration>,
) -> Result<Decision, CheckError> {
    let pause = |d: Duration| async move {
        if clock.sleeps_for_real() {
            tokio::time::sleep(d).await;
        } else {
            clock.sleep(d);
        }
    };
    let start = clock.now();
    loop {
        let elapsed = Duration::from_micros(clock.now().saturating_sub(start));
        let left = timeout.map(|t| t.saturating_sub(elapsed));
        match acquire_step(&decide, left)? {
            Step::Done(decision) => {
                if decision.allowed() && !decision.wait().is_zero() {
                    pause(decision.wait()).await;
                }
                return Ok(decision);
            }
            Step::SleepThenRetry(d) => pause(d).await,
        }
    }
}

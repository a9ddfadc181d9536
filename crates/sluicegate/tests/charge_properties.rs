//! `Op::Charge`, envoyproxy/ratelimit's counting: every request is counted, allowed or not. On
//! random traces, for every algorithm that supports it: it allows exactly what a check would,
//! leaves the same state when allowed, keeps denying after a denial, reports an exact retry
//! time, and (fixed window) equals a plain counter; nothing overflows at the extremes.

use std::collections::HashMap;
use std::fmt::Debug;
use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate::limiter::{LimitTarget, decide_together};
use sluicegate::state_machine::Op;
use sluicegate::{
    Algorithm, CheckError, Concurrency, FixedWindow, Gcra, KeyedLimiter, LeakyBucket, LeakyQueue,
    ManualClock, Micros, QueueDelay, Rate, SlidingLog, SlidingWindow, SmoothBursty, TokenBucket,
};

/// One request: the time since the previous one, its permits, and its op.
#[derive(Debug, Clone, Copy)]
struct Event {
    gap: u64,
    permits: u64,
    op: Op,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Charge),
        1 => Just(Op::Check),
        1 => Just(Op::Peek),
    ]
}

fn events(max_permits: u64, max_gap: u64) -> impl Strategy<Value = Vec<Event>> {
    let gap = prop_oneof![Just(0u64), 0..=max_gap / 10, 0..=max_gap];
    let event =
        (gap, 1..=max_permits, op()).prop_map(|(gap, permits, op)| Event { gap, permits, op });
    prop::collection::vec(event, 1..80)
}

fn nz(n: u64) -> Result<NonZeroU64, TestCaseError> {
    NonZeroU64::new(n).ok_or_else(|| TestCaseError::fail("zero permits"))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Runs `events` from `start` and checks, before each step, what a charge would do against
/// what a check would do on the same state:
/// - the same `allowed`; if allowed, the same decision and the same next state;
/// - if denied: `remaining` 0, a reset no sooner than the check's, the next peek at the same
///   time denied, and with `exact` the same request passes after `retry_after`
///   on the charged state, not a microsecond sooner;
/// - more permits than the capacity is `InsufficientCapacity` and charges nothing.
fn run<A>(alg: &A, start: Micros, events: &[Event], exact: bool) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq + Debug,
{
    let mut state = alg.initial_state(start);
    let mut now = start;
    for event in events {
        now = now.saturating_add(event.gap);
        let n = nz(event.permits)?;
        let (mut checked, mut charged) = (state.clone(), state.clone());
        let check = alg.decide(&mut checked, now, n, Op::Check);
        let charge = alg.decide(&mut charged, now, n, Op::Charge);
        match (&check, &charge) {
            (Err(a), Err(b)) => {
                prop_assert_eq!(a, b);
                prop_assert!(matches!(b, CheckError::InsufficientCapacity { .. }), "{b}");
                prop_assert_eq!(&charged, &state, "an error charged something");
            }
            (Ok(a), Ok(b)) if a.allowed() => {
                prop_assert_eq!(a, b);
                prop_assert_eq!(&charged, &checked);
            }
            (Ok(a), Ok(b)) => {
                prop_assert!(!b.allowed(), "check denied {:?}, charge allowed {:?}", a, b);
                prop_assert_eq!(b.remaining(), 0);
                prop_assert_eq!(&checked, &state, "a denied check changed the state");
                // Counted: the charged state takes at least as long to be fresh again (the
                // window and bucket tests below show it counts exactly, up to the bucket's cap).
                prop_assert!(b.reset_after() >= a.reset_after(), "{:?} vs {:?}", b, a);
                let mut probe = charged.clone();
                prop_assert!(!alg.decide(&mut probe, now, n, Op::Peek)?.allowed());
                if exact {
                    let retry = micros(b.retry_after().unwrap_or(Duration::MAX));
                    prop_assert!(retry > 0, "denied with no wait: {:?}", b);
                    prop_assert!(alg.decide(&mut probe, now + retry, n, Op::Peek)?.allowed());
                    prop_assert!(
                        !alg.decide(&mut probe, now + retry - 1, n, Op::Peek)?
                            .allowed(),
                        "{:?} could pass sooner",
                        b
                    );
                }
            }
            _ => return Err(TestCaseError::fail(format!("{check:?} vs {charge:?}"))),
        }
        // Then the trace's own op goes on from the state before.
        state = match event.op {
            Op::Check => checked,
            Op::Charge => charged,
            _ => state,
        };
    }
    Ok(())
}

/// Rates from fast to so slow that a few charges reach the deepest debt a bucket keeps.
fn rate_and_burst() -> impl Strategy<Value = (Rate, u64)> {
    prop_oneof![
        3 => (1u64..50, prop_oneof![Just(1u64), Just(7), Just(60)], 1u64..8)
            .prop_map(|(n, secs, burst)| (Rate::new(n, Duration::from_secs(secs)).expect("valid rate"), burst)),
        1 => (1_000_001u64..1_024_000, 1u64..8)
            .prop_map(|(n, burst)| (Rate::per_second(n).expect("rounded by under 0.1%"), burst)),
        1 => (1u64..4, (1u64 << 34)..(1 << 38), 1u64..8)
            .prop_map(|(n, secs, burst)| (Rate::new(n, Duration::from_secs(secs)).expect("valid rate"), burst)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn fixed_window_charge_against_check(
        limit in 1..=6u64, window in 1..=40u64, start in 0..1_000u64, trace in events(7, 90),
    ) {
        run(&FixedWindow::new(limit, Duration::from_micros(window))?, start, &trace, true)?;
    }

    #[test]
    fn sliding_window_charge_against_check(
        limit in 1..=6u64,
        window in 1..=40u64,
        buckets in prop::option::of(1..=8u32),
        start in 0..1_000u64,
        trace in events(7, 90),
    ) {
        let buckets = buckets.map(|b| b.min(window as u32));
        let sw = SlidingWindow::new(limit, Duration::from_micros(window), buckets)?;
        run(&sw, start, &trace, true)?;
    }

    #[test]
    fn bucket_charge_against_check(
        (rate, burst) in rate_and_burst(),
        start in 0..2_000_000_000_000_000u64,
        trace in events(8, 400_000),
    ) {
        run(&Gcra::new(rate, burst)?, start, &trace, true)?;
        run(&LeakyBucket::new(rate, burst)?, start, &trace, true)?;
    }

    /// Under charges alone, a fixed window is envoyproxy/ratelimit's counter: every hit is added
    /// to its window's count, and a request passes if the count with it is at most the limit.
    #[test]
    fn fixed_window_charges_count_every_hit(
        limit in 1..=6u64, window in 1..=40u64, start in 0..1_000u64, trace in events(7, 90),
    ) {
        let fw = FixedWindow::new(limit, Duration::from_micros(window))?;
        let mut state = fw.initial_state(start);
        let mut counts: HashMap<u64, u64> = HashMap::new();
        let mut now = start;
        for event in &trace {
            now += event.gap;
            let decision = fw.decide(&mut state, now, nz(event.permits)?, Op::Charge);
            if event.permits > limit {
                // Can never pass: an error, and not counted (unlike envoyproxy/ratelimit).
                prop_assert!(decision.is_err());
                continue;
            }
            let count = counts.entry(now / window).or_default();
            *count += event.permits;
            let decision = decision?;
            prop_assert_eq!(decision.allowed(), *count <= limit, "at {} count {}", now, count);
            prop_assert_eq!(decision.remaining(), limit.saturating_sub(*count));
            prop_assert_eq!(micros(decision.reset_after()), window - now % window);
        }
    }

    /// Huge limits and permits, times at the end of the clock: charges never overflow, and a
    /// denied charge still reports a denial that the next peek repeats.
    #[test]
    fn nothing_overflows_at_the_extremes(
        limit in prop_oneof![Just(u64::MAX), Just(u64::MAX / 2), 1..=u64::MAX],
        start in prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), (u64::MAX - 1_000_000)..=u64::MAX, any::<u64>()],
        gaps in prop::collection::vec(prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()], 1..12),
    ) {
        let window = Duration::from_micros(limit.max(1));
        let fw = FixedWindow::new(limit, window)?;
        let log_free = [
            SlidingWindow::new(limit, window, Some(7))?,
            SlidingWindow::new(limit, window, None)?,
        ];
        let trace: Vec<Event> = gaps
            .iter()
            .map(|&gap| Event { gap, permits: limit, op: Op::Charge })
            .collect();
        run(&fw, start, &trace, false)?;
        for sw in &log_free {
            run(sw, start, &trace, false)?;
        }
        // Buckets: the largest burst at the slowest and the finest paces.
        for rate in [Rate::new(1, Duration::from_secs(1 << 40))?, Rate::per_second(1_000_003)?] {
            let burst = (1u64 << 61) / rate.pace().interval;
            let trace: Vec<Event> = gaps
                .iter()
                .map(|&gap| Event { gap, permits: burst, op: Op::Charge })
                .collect();
            run(&Gcra::new(rate, burst)?, start, &trace, false)?;
            run(&LeakyBucket::new(rate, burst)?, start, &trace, false)?;
        }
    }
}

/// A bucket charged without end stops at the deepest debt it keeps, and still drains from it.
#[test]
fn bucket_debt_is_capped_and_drains() -> Result<(), Box<dyn std::error::Error>> {
    let gcra = Gcra::new(Rate::new(1, Duration::from_secs(1 << 36))?, 2)?;
    let mut tat = gcra.initial_state(0);
    let two = NonZeroU64::new(2).ok_or("two")?;
    let mut last = None;
    for _ in 0..200 {
        let d = gcra.decide(&mut tat, 0, two, Op::Charge)?;
        last = Some((tat, d));
    }
    let (capped, denial) = last.ok_or("charged")?;
    // A state of 2^62 ticks: two more charges leave it there.
    assert_eq!(capped, 1 << 62);
    let _ = gcra.decide(&mut tat, 0, two, Op::Charge)?;
    assert_eq!(tat, capped);
    let retry = micros(denial.retry_after().ok_or("denied")?);
    assert!(gcra.decide(&mut tat, retry, two, Op::Peek)?.allowed());
    assert!(!gcra.decide(&mut tat, retry - 1, two, Op::Peek)?.allowed());
    Ok(())
}

/// The example of the service's `--count-denied`: 3 a minute, 5 calls, then 1 more.
#[test]
fn fixed_window_counts_denied_calls() -> Result<(), Box<dyn std::error::Error>> {
    let fw = FixedWindow::new(3, Duration::from_secs(60))?;
    let one = NonZeroU64::MIN;
    let (mut charged, mut checked) = (fw.initial_state(0), fw.initial_state(0));
    let mut answers = Vec::new();
    for t in 0..5 {
        let charge = fw.decide(&mut charged, t, one, Op::Charge)?;
        let check = fw.decide(&mut checked, t, one, Op::Check)?;
        assert_eq!(charge.allowed(), check.allowed());
        answers.push(charge.allowed());
    }
    assert_eq!(answers, [true, true, true, false, false]);
    assert_eq!((charged.count, checked.count), (5, 3));
    let denied = fw.decide(&mut charged, 10, one, Op::Charge)?;
    assert_eq!(
        denied.retry_after(),
        Some(Duration::from_micros(59_999_990))
    );
    assert!(
        fw.decide(&mut charged, 60_000_000, one, Op::Charge)?
            .allowed()
    );
    Ok(())
}

#[test]
fn algorithms_that_cannot_count_denials_say_so() -> Result<(), Box<dyn std::error::Error>> {
    let rate = Rate::per_second(10)?;
    let window = Duration::from_secs(1);
    fn refuses<A: Algorithm>(alg: &A) -> Result<(), Box<dyn std::error::Error>> {
        let mut state = alg.initial_state(0);
        let error = alg
            .decide(&mut state, 0, NonZeroU64::MIN, Op::Charge)
            .expect_err("charge is unsupported");
        assert_eq!(
            error,
            CheckError::Unsupported {
                algorithm: alg.name(),
                operation: "charge"
            }
        );
        assert!(!alg.supports(Op::Charge));
        assert!(alg.supports(Op::Check));
        Ok(())
    }
    refuses(&SlidingLog::new(3, window)?)?;
    refuses(&LeakyQueue::new(rate, 3, QueueDelay::NoDelay)?)?;
    refuses(&SmoothBursty::new(5.0, 1.0)?)?;
    refuses(&Concurrency::new(3)?)?;
    assert!(FixedWindow::new(3, window)?.supports(Op::Charge));
    assert!(SlidingWindow::new(3, window, None)?.supports(Op::Charge));
    assert!(Gcra::new(rate, 3)?.supports(Op::Charge));
    assert!(TokenBucket::new(rate, 3)?.supports(Op::Charge));
    assert!(LeakyBucket::new(rate, 3)?.supports(Op::Charge));
    assert!(!FixedWindow::new(3, window)?.supports(Op::Release));
    assert!(Concurrency::new(3)?.supports(Op::Release));
    Ok(())
}

/// Keyed limiters keep a new key's charge even when it is denied.
#[test]
fn a_keyed_limiter_keeps_a_denied_charge() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(0);
    // Starts with one permit of two: a new key is denied two.
    let limiter = KeyedLimiter::with_clock(Gcra::with_initial(Rate::per_second(1)?, 2, 1)?, clock);
    let two = NonZeroU64::new(2).ok_or("two")?;
    assert!(!limiter.decide(&"k", two, Op::Charge)?.allowed());
    // Charged: the single permit it had is gone too.
    assert!(!limiter.peek(&"k", NonZeroU64::MIN)?.allowed());
    assert!(limiter.peek(&"other", NonZeroU64::MIN)?.allowed());
    Ok(())
}

/// Several limits charged together: every one is charged, whatever the others decide.
#[test]
fn decide_together_charges_every_limit() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(0);
    let window = Duration::from_secs(60);
    let per_user = KeyedLimiter::with_clock(FixedWindow::new(5, window)?, clock.clone());
    let global = KeyedLimiter::with_clock(FixedWindow::new(1, window)?, clock.clone());
    let one = NonZeroU64::MIN;
    let request = |user| {
        [
            LimitTarget {
                limiter: &per_user,
                key: user,
                permits: one,
            },
            LimitTarget {
                limiter: &global,
                key: &"all",
                permits: one,
            },
        ]
    };
    assert!(decide_together(&request(&"alice"), Op::Charge)?.allowed);
    let denied = decide_together(&request(&"bob"), Op::Charge)?;
    assert!(!denied.allowed);
    // Bob's own limit allowed and was charged; the global one denied and was charged too.
    assert!(denied.decisions[0].allowed());
    assert_eq!(denied.decisions[0].remaining(), 4);
    assert_eq!(denied.decisions[1].remaining(), 0);
    assert_eq!(per_user.peek(&"bob", one)?.remaining(), 4);
    // Under plain checks, the global limit's denial leaves Bob uncharged.
    assert!(!decide_together(&request(&"bob"), Op::Check)?.allowed);
    assert_eq!(per_user.peek(&"bob", one)?.remaining(), 4);
    // An error charges nothing anywhere.
    let too_many = NonZeroU64::new(2).ok_or("two")?;
    let targets = [
        LimitTarget {
            limiter: &per_user,
            key: &"carol",
            permits: one,
        },
        LimitTarget {
            limiter: &global,
            key: &"all",
            permits: too_many,
        },
    ];
    assert!(decide_together(&targets, Op::Charge).is_err());
    assert_eq!(per_user.peek(&"carol", one)?.remaining(), 5);
    Ok(())
}

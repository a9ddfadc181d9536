//! Properties of the window algorithms, the leaky bucket and the leaky queue on random traces:
//! they never grant more than their limit, agree with brute-force models of their rules, leave
//! the state alone when they deny or peek, report exact retry and reset times, and decide as
//! the bucket algorithms they are equivalent to.

use std::fmt::Debug;
use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate::state_machine::Op;
use sluicegate::{
    Algorithm, CheckError, DirectLimiter, FixedWindow, Gcra, KeyedLimiter, LeakyBucket, LeakyQueue,
    ManualClock, Micros, QueueDelay, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

/// One request of a trace: the time since the previous one, its permits, and whether it peeks.
#[derive(Debug, Clone, Copy)]
struct Event {
    gap: u64,
    permits: u64,
    peek: bool,
}

fn events(max_permits: u64) -> impl Strategy<Value = Vec<Event>> {
    let gap = prop_oneof![Just(0u64), 0..=5u64, 0..=90u64];
    let event = (gap, 1..=max_permits, prop::bool::weighted(0.25))
        .prop_map(|(gap, permits, peek)| Event { gap, permits, peek });
    prop::collection::vec(event, 1..70)
}

fn events_scaled(max_permits: u64, max_gap: u64) -> impl Strategy<Value = Vec<Event>> {
    let gap = prop_oneof![Just(0u64), 0..=max_gap / 10, 0..=max_gap];
    let event = (gap, 1..=max_permits, prop::bool::weighted(0.25))
        .prop_map(|(gap, permits, peek)| Event { gap, permits, peek });
    prop::collection::vec(event, 1..70)
}

fn nz(n: u64) -> Result<NonZeroU64, TestCaseError> {
    NonZeroU64::new(n).ok_or_else(|| TestCaseError::fail("zero permits"))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Grants made so far, `(time, permits)`.
type Grants = Vec<(Micros, u64)>;

/// Whether a rule allows `permits` at `now`, given the grants so far.
type Model<'a> = dyn Fn(&[(Micros, u64)], Micros, u64) -> bool + 'a;

/// Runs `events` from `start`, checking on every step what holds for every algorithm here:
/// - a request above the capacity is `InsufficientCapacity`, and a denial, a peek or an error
///   leaves the state exactly as it was;
/// - `allowed` agrees with `model` (given the grants so far, the time and the permits);
/// - a denial's `retry_after` is exact: the same request passes then, not a microsecond sooner;
/// - `reset_after` is exact: the state is fresh then, not a microsecond sooner;
/// - `is_fresh` is exact: a fresh state decides as a new one, a stale one does not.
///
/// Without `exact` (traces at the end of time, where times saturate), only the first holds.
/// Returns the grants.
fn run<A>(
    alg: &A,
    start: Micros,
    events: &[Event],
    model: Option<&Model<'_>>,
    exact: bool,
) -> Result<Grants, TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq + Debug,
{
    let mut state = alg.initial_state(0);
    let mut now = start;
    let mut grants = Grants::new();
    for event in events {
        now = now.saturating_add(event.gap);
        if exact {
            check_freshness(alg, &state, now)?;
        }
        let op = if event.peek { Op::Peek } else { Op::Check };
        let n = nz(event.permits)?;
        let before = state.clone();
        let decision = match alg.decide(&mut state, now, n, op) {
            Err(err) => {
                prop_assert!(event.permits > alg.capacity(), "{err}");
                prop_assert_eq!(
                    err,
                    CheckError::InsufficientCapacity {
                        requested: event.permits,
                        capacity: alg.capacity()
                    }
                );
                prop_assert_eq!(&state, &before);
                continue;
            }
            Ok(decision) => decision,
        };
        prop_assert!(event.permits <= alg.capacity());
        if let Some(model) = model {
            prop_assert_eq!(
                decision.allowed(),
                model(&grants, now, event.permits),
                "model disagrees at {} for {}",
                now,
                event.permits
            );
        }
        if !decision.allowed() || event.peek {
            prop_assert_eq!(&state, &before, "state changed by {:?}", decision);
        }
        if decision.allowed() && !event.peek {
            grants.push((now, event.permits));
        }
        if !exact {
            continue;
        }
        if !decision.allowed() {
            let retry = micros(decision.retry_after().unwrap_or(Duration::MAX));
            prop_assert!(retry > 0, "denied with no wait: {:?}", decision);
            let mut probe = state.clone();
            prop_assert!(alg.decide(&mut probe, now + retry, n, Op::Peek)?.allowed());
            prop_assert!(
                !alg.decide(&mut probe, now + retry - 1, n, Op::Peek)?
                    .allowed()
            );
        }
        if !decision.allowed() || !event.peek {
            let reset = micros(decision.reset_after());
            prop_assert!(alg.is_fresh(&state, now + reset), "{:?}", decision);
            prop_assert!(reset == 0 || !alg.is_fresh(&state, now + reset - 1));
        }
    }
    Ok(grants)
}

/// A fresh state answers every request as a new limiter does; a stale one answers a request
/// for the full capacity differently.
fn check_freshness<A>(alg: &A, state: &A::State, now: Micros) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: Debug,
{
    let mut probe = state.clone();
    let mut new = alg.initial_state(0);
    if alg.is_fresh(state, now) {
        for n in 1..=alg.capacity() {
            let n = nz(n)?;
            prop_assert_eq!(
                alg.decide(&mut probe, now, n, Op::Peek)?,
                alg.decide(&mut new, now, n, Op::Peek)?
            );
        }
    } else {
        let n = nz(alg.capacity())?;
        prop_assert_ne!(
            alg.decide(&mut probe, now, n, Op::Peek)?,
            alg.decide(&mut new, now, n, Op::Peek)?,
            "{:?} is not fresh at {} but answers as new",
            state,
            now
        );
    }
    Ok(())
}

/// Permits granted at times `t` with `from <= key(t) <= to`.
fn granted_between(
    grants: &[(Micros, u64)],
    key: impl Fn(Micros) -> u64,
    from: u64,
    to: u64,
) -> u64 {
    grants
        .iter()
        .filter(|&&(t, _)| (from..=to).contains(&key(t)))
        .map(|&(_, p)| p)
        .sum()
}

fn slot(t: Micros, buckets: u64, window: u64) -> u64 {
    (u128::from(t) * u128::from(buckets) / u128::from(window)) as u64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn fixed_window_grants_at_most_the_limit_per_aligned_window(
        limit in 1..=6u64,
        window in 1..=40u64,
        start in 0..1_000u64,
        trace in events(7),
    ) {
        let fw = FixedWindow::new(limit, Duration::from_micros(window))?;
        let model = |grants: &[(Micros, u64)], now: Micros, n: u64| {
            granted_between(grants, |t| t / window, now / window, now / window) + n <= limit
        };
        let grants = run(&fw, start, &trace, Some(&model), true)?;
        for &(t, _) in &grants {
            let k = t / window;
            prop_assert!(granted_between(&grants, |t| t / window, k, k) <= limit);
        }
    }

    #[test]
    fn sliding_log_grants_at_most_the_limit_in_any_window(
        limit in 1..=6u64,
        window in 1..=40u64,
        start in 0..1_000u64,
        trace in events(7),
    ) {
        let log = SlidingLog::new(limit, Duration::from_micros(window))?;
        // In (now - window, now]: shifted by `window` to stay unsigned.
        let in_window = |grants: &[(Micros, u64)], now: Micros| {
            granted_between(grants, |t| t + window, now + 1, now + window)
        };
        let model = |grants: &[(Micros, u64)], now: Micros, n: u64| in_window(grants, now) + n <= limit;
        let grants = run(&log, start, &trace, Some(&model), true)?;
        // The most granted in any (t - window, t] is reached at some grant's time t.
        for &(t, _) in &grants {
            prop_assert!(in_window(&grants, t) <= limit);
        }
    }

    #[test]
    fn bucketed_sliding_window_grants_at_most_the_limit_in_any_k_slots(
        limit in 1..=6u64,
        window in 1..=40u64,
        buckets in 1..=8u64,
        start in 0..1_000u64,
        trace in events(7),
    ) {
        let buckets = buckets.min(window);
        let sw = SlidingWindow::new(limit, Duration::from_micros(window), Some(buckets as u32))?;
        let span = |grants: &[(Micros, u64)], j: u64| {
            granted_between(grants, |t| slot(t, buckets, window) + buckets, j + 1, j + buckets)
        };
        let model = |grants: &[(Micros, u64)], now: Micros, n: u64| {
            span(grants, slot(now, buckets, window)) + n <= limit
        };
        let grants = run(&sw, start, &trace, Some(&model), true)?;
        for &(t, _) in &grants {
            prop_assert!(span(&grants, slot(t, buckets, window)) <= limit);
        }
    }

    #[test]
    fn weighted_sliding_window_follows_the_estimate(
        limit in 1..=6u64,
        window in 1..=40u64,
        start in 0..1_000u64,
        trace in events(7),
    ) {
        let sw = SlidingWindow::new(limit, Duration::from_micros(window), None)?;
        let model = |grants: &[(Micros, u64)], now: Micros, n: u64| {
            let k = now / window;
            let curr = granted_between(grants, |t| t / window, k, k);
            let prev = if k == 0 { 0 } else { granted_between(grants, |t| t / window, k - 1, k - 1) };
            let elapsed = now - k * window;
            prev * (window - elapsed) + (curr + n) * window <= limit * window
        };
        run(&sw, start, &trace, Some(&model), true)?;
    }

    #[test]
    fn leaky_bucket_decides_as_the_token_bucket(
        permits in 1..=5u64,
        period in 1..=3_000u64,
        capacity in 1..=6u64,
        start in 0..10_000u64,
        trace in events_scaled(7, 3_000),
    ) {
        let rate = Rate::new(permits, Duration::from_micros(period))?;
        let leaky = LeakyBucket::new(rate, capacity)?;
        let token = TokenBucket::new(rate, capacity)?;
        run(&leaky, start, &trace, None, true)?;
        let mut leaky_state = leaky.initial_state(0);
        let mut token_state = token.initial_state(0);
        let mut now = start;
        for event in &trace {
            now += event.gap;
            let op = if event.peek { Op::Peek } else { Op::Check };
            let n = nz(event.permits)?;
            prop_assert_eq!(
                leaky.decide(&mut leaky_state, now, n, op),
                token.decide(&mut token_state, now, n, op)
            );
            prop_assert_eq!(leaky.is_fresh(&leaky_state, now), token.is_fresh(&token_state, now));
        }
    }

    #[test]
    fn leaky_queue_without_delay_admits_what_gcra_allows(
        permits in 1..=5u64,
        period in 1..=3_000u64,
        burst in 0..=5u64,
        start in 0..10_000u64,
        trace in events_scaled(7, 3_000),
    ) {
        let rate = Rate::new(permits, Duration::from_micros(period))?;
        let queue = LeakyQueue::new(rate, burst, QueueDelay::NoDelay)?;
        let gcra = Gcra::new(rate, burst + 1)?;
        let mut queue_tat = queue.initial_state(0);
        let mut gcra_tat = gcra.initial_state(0);
        let mut now = start;
        for event in &trace {
            now += event.gap;
            let op = if event.peek { Op::Peek } else { Op::Check };
            let n = nz(event.permits)?;
            prop_assert_eq!(
                queue.decide(&mut queue_tat, now, n, op),
                gcra.decide(&mut gcra_tat, now, n, op)
            );
        }
    }

    #[test]
    fn leaky_queue_keeps_its_promises(
        permits in 1..=5u64,
        period in 1..=3_000u64,
        burst in 0..=5u64,
        delay in prop_oneof![Just(QueueDelay::Shape), Just(QueueDelay::NoDelay), (0..=6u64).prop_map(QueueDelay::After)],
        start in 0..10_000u64,
        trace in events_scaled(7, 3_000),
    ) {
        let rate = Rate::new(permits, Duration::from_micros(period))?;
        run(&LeakyQueue::new(rate, burst, delay)?, start, &trace, None, true)?;
    }

    #[test]
    fn leaky_queue_follows_nginx_excess(
        permits in 1..=5u64,
        period in 1..=3_000u64,
        burst in 0..=5u64,
        delay in prop_oneof![Just(QueueDelay::Shape), Just(QueueDelay::NoDelay), (0..=6u64).prop_map(QueueDelay::After)],
        start in 0..10_000u64,
        trace in events_scaled(1, 3_000),
    ) {
        let rate = Rate::new(permits, Duration::from_micros(period))?;
        let queue = LeakyQueue::new(rate, burst, delay)?;
        let pace = rate.pace();
        let (interval, per_micro) = (i128::from(pace.interval), i128::from(pace.ticks_per_micro));
        let free = i128::from(match delay {
            QueueDelay::Shape => 0,
            QueueDelay::NoDelay => burst,
            QueueDelay::After(d) => d.min(burst),
        });
        // nginx's node, in ticks rather than thousandths: `excess' = max(excess - elapsed + 1, 0)`
        // for a known key, 0 for a new one; rejected above `burst`; delayed by `excess' - D`.
        let mut node: Option<(i128, i128)> = None;
        let mut tat = queue.initial_state(0);
        let mut now = start;
        for event in &trace {
            now += event.gap;
            let now_t = i128::from(now) * per_micro;
            let excess = node.map_or(0, |(excess, last)| (excess - (now_t - last) + interval).max(0));
            let admitted = excess <= i128::from(burst) * interval;
            let wait = (excess - free * interval).max(0);
            let wait = u64::try_from((wait + per_micro - 1) / per_micro)?;
            let op = if event.peek { Op::Peek } else { Op::Check };
            let decision = queue.decide(&mut tat, now, NonZeroU64::MIN, op)?;
            prop_assert_eq!(decision.allowed(), admitted, "at {}", now);
            if admitted {
                prop_assert_eq!(micros(decision.wait()), wait, "at {}", now);
                if !event.peek {
                    node = Some((excess, now_t));
                }
            }
        }
    }

    #[test]
    fn nothing_panics_or_leaks_state_at_the_end_of_time(
        limit in 1..=6u64,
        window in 1..=40u64,
        buckets in 1..=8u64,
        back in 0..2_000u64,
        trace in events(8),
    ) {
        let start = u64::MAX - back;
        let window_len = Duration::from_micros(window);
        let rate = Rate::new(limit, window_len)?;
        run(&FixedWindow::new(limit, window_len)?, start, &trace, None, false)?;
        run(&SlidingLog::new(limit, window_len)?, start, &trace, None, false)?;
        let buckets = u32::try_from(buckets.min(window))?;
        run(&SlidingWindow::new(limit, window_len, Some(buckets))?, start, &trace, None, false)?;
        run(&SlidingWindow::new(limit, window_len, None)?, start, &trace, None, false)?;
        // The buckets' time stands still past their horizon: they grant at most what they
        // hold, never "no limit".
        let total = |grants: Grants| grants.iter().map(|&(_, p)| p).sum::<u64>();
        let granted = total(run(&LeakyBucket::new(rate, limit)?, start, &trace, None, false)?);
        prop_assert!(granted <= limit, "leaky bucket granted {}", granted);
        let queue = LeakyQueue::new(rate, limit, QueueDelay::Shape)?;
        let granted = total(run(&queue, start, &trace, None, false)?);
        prop_assert!(granted <= limit + 1, "leaky queue granted {}", granted);
        let granted = total(run(&Gcra::new(rate, limit)?, start, &trace, None, false)?);
        prop_assert!(granted <= limit, "gcra granted {}", granted);
        let granted = total(run(&TokenBucket::new(rate, limit)?, start, &trace, None, false)?);
        prop_assert!(granted <= limit, "token bucket granted {}", granted);
    }

    /// GCRA and the token bucket report exact `retry_after` and `reset_after` times, and their
    /// `is_fresh` is exact, as the window algorithms' are (rounded paces included).
    #[test]
    fn buckets_report_exact_retry_and_reset_times(
        permits in prop_oneof![1..=5u64, 1_000_001..=1_023_999u64],
        period in 1..=3_000u64,
        burst in 1..=6u64,
        start in 0..10_000u64,
        trace in events_scaled(7, 3_000),
    ) {
        // Either a few permits per few microseconds, or a rounded pace near a million a second.
        let period = if permits > 5 { 1_000_000 } else { period };
        let rate = Rate::new(permits, Duration::from_micros(period))?;
        run(&Gcra::new(rate, burst)?, start, &trace, None, true)?;
        run(&TokenBucket::new(rate, burst)?, start, &trace, None, true)?;
    }
}

/// The new algorithms fit the limiters: per-key windows drop keys once fresh, and the queue
/// lives in a lock-free word.
#[test]
fn limiters_hold_the_new_algorithms() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(1_000_000);
    let keyed = KeyedLimiter::with_clock(
        SlidingWindow::new(2, Duration::from_secs(1), Some(4))?,
        clock.clone(),
    );
    assert!(keyed.check(&"a")?.allowed());
    assert!(keyed.check(&"a")?.allowed());
    assert!(!keyed.check(&"a")?.allowed());
    assert!(keyed.check(&"b")?.allowed());
    clock.advance(Duration::from_secs(1));
    assert!(keyed.check(&"a")?.allowed());
    clock.advance(Duration::from_secs(1));
    keyed.retain_recent();
    assert!(keyed.is_empty());

    let queue = DirectLimiter::with_clock(
        LeakyQueue::new(Rate::per_second(4)?, 1, QueueDelay::Shape)?,
        clock.clone(),
    );
    assert_eq!(queue.check()?.wait(), Duration::ZERO);
    assert_eq!(queue.check()?.wait(), Duration::from_millis(250));
    assert!(!queue.check()?.allowed());
    Ok(())
}

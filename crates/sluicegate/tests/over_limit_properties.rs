//! The over-limit cache's rules (`sluicegate::over_limit`) against the algorithms themselves:
//! on random traces of checks, peeks and charges with a manual clock, a limit whose denials are
//! remembered and answered again (their charges skipped) gives exactly the decisions of the
//! same limit asked every time, for every algorithm; and the algorithms whose denials do not
//! hold are never answered.

use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate::over_limit::OverLimit;
use sluicegate::state_machine::Op;
use sluicegate::{
    Algorithm, AnyAlgorithm, Concurrency, Decision, FixedWindow, Gcra, LeakyBucket, LeakyQueue,
    Micros, QueueDelay, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

#[derive(Debug, Clone, Copy)]
struct Event {
    gap: u64,
    permits: u64,
    op: Op,
}

fn events(max_permits: u64, max_gap: u64) -> impl Strategy<Value = Vec<Event>> {
    let gap = prop_oneof![3 => Just(0u64), 3 => 0..=max_gap / 10, 1 => 0..=max_gap];
    let op = prop_oneof![
        3 => Just(Op::Check),
        1 => Just(Op::Peek),
        2 => Just(Op::Charge),
        1 => Just(Op::Release),
    ];
    let event =
        (gap, 1..=max_permits, op).prop_map(|(gap, permits, op)| Event { gap, permits, op });
    prop::collection::vec(event, 1..120)
}

/// An answer as both sides give it (errors by their message).
type Answer = Result<Decision, String>;

/// Runs `events` on `algorithm` twice from `start`: asked every time, and through one cache
/// entry (answered from it when it knows, otherwise asked and the entry replaced by the
/// answer). Fails on the first difference; returns how many were answered from the entry.
fn run(algorithm: &AnyAlgorithm, start: Micros, events: &[Event]) -> Result<usize, TestCaseError> {
    let mut plain = algorithm.initial_state(start);
    let mut cached = algorithm.initial_state(start);
    let mut entry: Option<OverLimit> = None;
    let mut now = start;
    let mut answered = 0;
    for (i, event) in events.iter().enumerate() {
        now = now.saturating_add(event.gap);
        let permits = NonZeroU64::new(event.permits).ok_or_else(|| TestCaseError::fail("zero"))?;
        let expected: Answer = algorithm
            .decide(&mut plain, now, permits, event.op)
            .map_err(|e| e.to_string());
        let from_entry = entry.and_then(|e| e.answer(event.op, event.permits, now));
        let got: Answer = match from_entry {
            Some(decision) => {
                answered += 1;
                Ok(decision)
            }
            None => {
                let got = algorithm
                    .decide(&mut cached, now, permits, event.op)
                    .map_err(|e| e.to_string());
                entry = got.as_ref().ok().and_then(|decision| {
                    OverLimit::from_denial(algorithm, event.op, event.permits, decision, now)
                });
                got
            }
        };
        prop_assert_eq!(
            &got,
            &expected,
            "event {} {:?} at {} (answered from the entry: {})",
            i,
            event,
            now,
            from_entry.is_some()
        );
    }
    Ok(answered)
}

fn rate() -> impl Strategy<Value = Rate> {
    prop_oneof![
        3 => (1u64..20, prop_oneof![Just(1u64), Just(7), Just(60)])
            .prop_map(|(n, secs)| Rate::new(n, Duration::from_micros(secs * 10)).expect("valid rate")),
        1 => (1_000_001u64..1_024_000)
            .prop_map(|n| Rate::per_second(n).expect("rounded by under 0.1%")),
        1 => (1u64..10, 1u64..50)
            .prop_map(|(n, us)| Rate::new(n, Duration::from_micros(us)).expect("valid rate")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn fixed_window(limit in 1..=6u64, window in 1..=60u64, start in 0..1_000u64, trace in events(7, 120)) {
        let algorithm = FixedWindow::new(limit, Duration::from_micros(window))?.into();
        run(&algorithm, start, &trace)?;
    }

    #[test]
    fn sliding_window(
        limit in 1..=6u64,
        window in 1..=60u64,
        buckets in prop::option::of(1..=6u32),
        start in 0..1_000u64,
        trace in events(7, 120),
    ) {
        // A window at least as long as its slots are many.
        let window = window.max(u64::from(buckets.unwrap_or(1)));
        let algorithm = SlidingWindow::new(limit, Duration::from_micros(window), buckets)?.into();
        run(&algorithm, start, &trace)?;
    }

    #[test]
    fn sliding_log(limit in 1..=6u64, window in 1..=60u64, start in 0..1_000u64, trace in events(7, 120)) {
        let algorithm = SlidingLog::new(limit, Duration::from_micros(window))?.into();
        run(&algorithm, start, &trace)?;
    }

    #[test]
    fn gcra(rate in rate(), burst in 1..=6u64, start in 0..1_000u64, trace in events(7, 300)) {
        run(&Gcra::new(rate, burst)?.into(), start, &trace)?;
    }

    #[test]
    fn token_bucket(rate in rate(), burst in 1..=6u64, start in 0..1_000u64, trace in events(7, 300)) {
        run(&TokenBucket::new(rate, burst)?.into(), start, &trace)?;
    }

    #[test]
    fn leaky_bucket(rate in rate(), capacity in 1..=6u64, start in 0..1_000u64, trace in events(7, 300)) {
        run(&LeakyBucket::new(rate, capacity)?.into(), start, &trace)?;
    }

    #[test]
    fn concurrency_and_leaky_queue_are_never_answered(
        limit in 1..=4u64, rate in rate(), start in 0..1_000u64, trace in events(5, 300),
    ) {
        prop_assert_eq!(run(&Concurrency::new(limit)?.into(), start, &trace)?, 0);
        let queue = LeakyQueue::new(rate, limit, QueueDelay::NoDelay)?;
        prop_assert_eq!(run(&queue.into(), start, &trace)?, 0);
    }
}

/// A hot key over its limit: most of its requests are answered from the entry.
#[test]
fn a_hot_key_over_its_limit_is_mostly_answered_from_the_entry() -> Result<(), TestCaseError> {
    let trace: Vec<Event> = (0..1_000)
        .map(|_| Event {
            gap: 100,
            permits: 1,
            op: Op::Check,
        })
        .collect();
    let window: AnyAlgorithm = FixedWindow::new(10, Duration::from_secs(1))
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .into();
    let gcra: AnyAlgorithm = Gcra::new(
        Rate::per_second(100).map_err(|e| TestCaseError::fail(e.to_string()))?,
        10,
    )
    .map_err(|e| TestCaseError::fail(e.to_string()))?
    .into();
    // 100 ms of requests every 100 µs: 10 pass, 1 denial asked, the rest answered.
    assert_eq!(run(&window, 0, &trace)?, 989);
    // 100 per second: one passes every 10 ms, each after one denial asked.
    assert!(run(&gcra, 0, &trace)? > 950);
    Ok(())
}

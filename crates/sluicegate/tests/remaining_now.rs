//! `remaining` is what could be granted right now once the decision took effect (DESIGN section
//! 3): after a grant, what it left; after a peek, a denial, or a limit left uncharged because
//! another limit of the same request denied, what is there now, unchanged.

use std::num::NonZeroU64;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate::limiter::{LimitTarget, decide_together};
use sluicegate::state_machine::Op;
use sluicegate::{Algorithm, AnyAlgorithm, CheckError, Clock, KeyedLimiter, ManualClock, Micros};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn n(permits: u64) -> NonZeroU64 {
    NonZeroU64::new(permits).expect("permits start at 1")
}

/// Every algorithm that counts permits, each holding 10 when fresh.
const COUNTING: [&str; 11] = [
    "fixed-window:limit=10,window=1s",
    "sliding-log:limit=10,window=1s",
    "sliding-window:limit=10,window=1s,buckets=4",
    "sliding-window:limit=10,window=1s",
    "token-bucket:rate=1/s,burst=10",
    "gcra:rate=1/s,burst=10",
    "leaky-bucket:rate=1/s,capacity=10",
    "leaky-queue:rate=1/s,burst=9",
    "leaky-queue:rate=1/s,burst=9,nodelay",
    "leaky-queue:rate=1/s,burst=9,delay=4",
    "concurrency:limit=10",
];

/// The most permits a check could be granted on `state` at `now` (at most the capacity).
fn available<A: Algorithm>(algorithm: &A, state: &A::State, now: Micros) -> u64 {
    (1..=algorithm.capacity())
        .take_while(|&k| {
            let mut probe = state.clone();
            algorithm
                .decide(&mut probe, now, n(k), Op::Peek)
                .is_ok_and(|d| d.allowed())
        })
        .last()
        .unwrap_or(0)
}

#[test]
fn a_peek_of_n_with_m_left_reports_m() -> TestResult {
    for spec in COUNTING {
        let algorithm: AnyAlgorithm = spec.parse()?;
        let mut state = algorithm.initial_state(0);
        let taken = algorithm.decide(&mut state, 0, n(3), Op::Check)?;
        assert_eq!((taken.allowed(), taken.remaining()), (true, 7), "{spec}");
        let before = state.clone();
        for permits in 1..=7 {
            let peek = algorithm.decide(&mut state, 0, n(permits), Op::Peek)?;
            assert_eq!(
                (peek.allowed(), peek.remaining()),
                (true, 7),
                "{spec} {permits}"
            );
        }
        // Too many: denied, and still 7 there, whether peeked or checked.
        for op in [Op::Peek, Op::Check] {
            let denied = algorithm.decide(&mut state, 0, n(8), op)?;
            assert_eq!((denied.allowed(), denied.remaining()), (false, 7), "{spec}");
        }
        assert_eq!(state, before, "{spec}");
        let granted = algorithm.decide(&mut state, 0, n(3), Op::Check)?;
        assert_eq!(
            (granted.allowed(), granted.remaining()),
            (true, 4),
            "{spec}"
        );
    }
    Ok(())
}

#[test]
fn a_weighted_window_peeks_what_its_estimate_leaves() -> TestResult {
    // 8 in the previous window, a quarter into this one: 6 still count, 4 are left.
    let algorithm: AnyAlgorithm = "sliding-window:limit=10,window=1s".parse()?;
    let mut state = algorithm.initial_state(0);
    assert!(
        algorithm
            .decide(&mut state, 500_000, n(8), Op::Check)?
            .allowed()
    );
    let peek = algorithm.decide(&mut state, 1_250_000, n(2), Op::Peek)?;
    assert_eq!((peek.allowed(), peek.remaining()), (true, 4));
    let denied = algorithm.decide(&mut state, 1_250_000, n(5), Op::Check)?;
    assert_eq!((denied.allowed(), denied.remaining()), (false, 4));
    let granted = algorithm.decide(&mut state, 1_250_000, n(2), Op::Check)?;
    assert_eq!((granted.allowed(), granted.remaining()), (true, 2));
    Ok(())
}

#[test]
fn smooth_limiters_peek_what_passes_now() -> TestResult {
    // Rested for 2s at 5 per second: 5 saved plus the one whose turn has come.
    let bursty: AnyAlgorithm = "smooth-bursty:rate=5".parse()?;
    let mut state = bursty.initial_state(0);
    let peek = bursty.decide(&mut state, 2_000_000, n(3), Op::Peek)?;
    assert_eq!((peek.allowed(), peek.remaining()), (true, 6));
    let granted = bursty.decide(&mut state, 2_000_000, n(3), Op::Check)?;
    assert_eq!((granted.allowed(), granted.remaining()), (true, 3));
    let peek = bursty.decide(&mut state, 2_000_000, n(2), Op::Peek)?;
    assert_eq!((peek.allowed(), peek.remaining()), (true, 3));

    // A warming-up limiter grants one request at a time: 1 when one could pass now.
    let warmup: AnyAlgorithm = "smooth-warmup:rate=2,warmup=4s".parse()?;
    let mut state = warmup.initial_state(0);
    let peek = warmup.decide(&mut state, 0, n(3), Op::Peek)?;
    assert_eq!((peek.allowed(), peek.remaining()), (true, 1));
    let granted = warmup.decide(&mut state, 0, n(1), Op::Check)?;
    assert_eq!((granted.allowed(), granted.remaining()), (true, 0));
    let peek = warmup.decide(&mut state, 0, n(1), Op::Peek)?;
    assert_eq!((peek.allowed(), peek.remaining()), (false, 0));
    Ok(())
}

#[test]
fn a_limit_left_uncharged_reports_what_it_still_has() -> TestResult {
    // envoyproxy/ratelimit's example: 100 per minute per user, 5 used, and a spent global
    // limit denies the request; the user's limit reports its 95, not the 94 a charge leaves.
    for spec in [
        "fixed-window:limit=100,window=60s",
        "gcra:rate=100/1m,burst=100",
    ] {
        let clock = ManualClock::new(0);
        let per_user = KeyedLimiter::with_clock(spec.parse::<AnyAlgorithm>()?, clock.clone());
        let global = KeyedLimiter::with_clock(
            "fixed-window:limit=1,window=60s".parse::<AnyAlgorithm>()?,
            clock.clone(),
        );
        assert!(per_user.check_n(&"alice", n(5))?.allowed());
        assert!(global.check(&"all")?.allowed());
        let request = [
            LimitTarget {
                limiter: &per_user,
                key: &"alice",
                permits: n(1),
            },
            LimitTarget {
                limiter: &global,
                key: &"all",
                permits: n(1),
            },
        ];
        let denied = decide_together(&request, Op::Check)?;
        assert!(!denied.allowed, "{spec}");
        assert!(denied.decisions[0].allowed(), "{spec}");
        assert_eq!(denied.decisions[0].remaining(), 95, "{spec}");
        assert_eq!(denied.decisions[1].remaining(), 0, "{spec}");
        assert_eq!(per_user.peek(&"alice", n(1))?.remaining(), 95, "{spec}");
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Event {
    gap: u64,
    permits: u64,
    op: Op,
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    let gap = prop_oneof![3 => Just(0u64), 3 => 0u64..400_000, 1 => 0u64..3_000_000];
    let op = prop_oneof![
        5 => Just(Op::Check),
        3 => Just(Op::Peek),
        2 => Just(Op::Charge),
        1 => Just(Op::Reserve { max_wait: None }),
        1 => (0u64..3_000_000).prop_map(|w| Op::Reserve { max_wait: Some(w) }),
    ];
    prop::collection::vec(
        (gap, 1u64..=11, op).prop_map(|(gap, permits, op)| Event { gap, permits, op }),
        1..50,
    )
}

proptest! {
    /// Whatever the op and its outcome, `remaining` is the most a check could take from the
    /// state the decision left.
    #[test]
    fn remaining_is_what_a_check_could_take_right_after(
        spec in prop::sample::select(COUNTING.to_vec()),
        trace in events(),
    ) {
        let algorithm: AnyAlgorithm = spec.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let mut state = algorithm.initial_state(0);
        let mut now = 0;
        for event in trace {
            now += event.gap;
            let before = state.clone();
            match algorithm.decide(&mut state, now, n(event.permits), event.op) {
                Ok(d) => {
                    prop_assert_eq!(
                        d.remaining(),
                        available(&algorithm, &state, now),
                        "{} {:?} at {}: {:?}", spec, event, now, d
                    );
                    if !event.op.changes_state(d.allowed()) {
                        prop_assert_eq!(&state, &before);
                    }
                }
                Err(CheckError::InsufficientCapacity { .. } | CheckError::Unsupported { .. }) => {
                    prop_assert_eq!(&state, &before);
                }
                Err(other) => prop_assert!(false, "{}: {}", spec, other),
            }
        }
    }

    /// A request denied by one limit leaves every limit uncharged, and each reports what it
    /// has now: what a check could take from its stored state.
    #[test]
    fn a_multi_limit_denial_reports_every_limits_availability(
        specs in prop::collection::vec(prop::sample::select(COUNTING.to_vec()), 2..4),
        trace in prop::collection::vec(
            (0u64..600_000, prop::collection::vec(1u64..=6, 4), 0usize..3),
            1..40,
        ),
    ) {
        let clock = ManualClock::new(0);
        let limiters: Vec<KeyedLimiter<&str, AnyAlgorithm, ManualClock>> = specs
            .iter()
            .map(|spec| spec.parse().map(|a| KeyedLimiter::with_clock(a, clock.clone())))
            .collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let keys = ["alice", "bob", "carol"];
        for (gap, permits, who) in trace {
            clock.set(clock.now() + gap);
            let now = clock.now();
            let key = &keys[who];
            let targets: Vec<_> = limiters
                .iter()
                .zip(&permits)
                .map(|(limiter, &p)| LimitTarget { limiter, key, permits: n(p) })
                .collect();
            let stored: Vec<_> = limiters.iter().map(|l| l.state_of(key)).collect();
            let multi = decide_together(&targets, Op::Check)
                .map_err(|e| TestCaseError::fail(format!("{e}")))?;
            for ((limiter, decision), before) in limiters.iter().zip(&multi.decisions).zip(&stored) {
                let algorithm = limiter.algorithm();
                let state = limiter
                    .state_of(key)
                    .unwrap_or_else(|| algorithm.initial_state(now));
                if !multi.allowed {
                    prop_assert_eq!(&limiter.state_of(key), before, "charged on a denial");
                }
                prop_assert_eq!(
                    decision.remaining(),
                    available(&*algorithm, &state, now),
                    "{:?} allowed {}: {:?}", specs, multi.allowed, decision
                );
            }
        }
    }
}

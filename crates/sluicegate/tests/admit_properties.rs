//! `Algorithm::admit` is `decide` for callers that only need "it passes": on random traces, for
//! every algorithm (through `AnyAlgorithm`, as the layer and the proxy use it) and every op, it
//! leaves the same state as `decide`, fails with the same error, answers `Passed` only where
//! `decide` allows with no wait, and otherwise answers `decide`'s decision unchanged. A keyed
//! limiter's `admit` and `decide` keep the same keys the same way.

use std::num::NonZeroU64;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluicegate::state_machine::Op;
use sluicegate::{Admission, Algorithm, AnyAlgorithm, KeyedLimiter, ManualClock};

/// One algorithm of each kind, and the bucket shapes with and without a shaping wait.
const SPECS: [&str; 13] = [
    "gcra:rate=10/s,burst=5",
    "gcra:rate=3/7s,burst=2",
    "token-bucket:rate=10/s,burst=4",
    "leaky-queue:rate=10/s,burst=5,nodelay",
    "leaky-queue:rate=10/s,burst=5,delay=2",
    "leaky-queue:rate=5/s,burst=3",
    "leaky-bucket:rate=10/s,capacity=5",
    "fixed-window:limit=10,window=1s",
    "sliding-window:limit=10,window=1s",
    "sliding-log:limit=10,window=1m",
    "smooth-bursty:rate=2.5",
    "smooth-warmup:rate=2,warmup=4s",
    "concurrency:limit=3",
];

/// One request: the time since the previous one, its permits, and its op.
#[derive(Debug, Clone, Copy)]
struct Event {
    gap: u64,
    permits: u64,
    op: Op,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Check),
        1 => Just(Op::Peek),
        1 => Just(Op::Charge),
        1 => Just(Op::Release),
        1 => Just(Op::Reserve { max_wait: None }),
        1 => (0u64..2_000_000).prop_map(|w| Op::Reserve { max_wait: Some(w) }),
    ]
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    let gap = prop_oneof![Just(0u64), 0..=100_000u64, 0..=3_000_000u64];
    let event = (gap, 1..=7u64, op()).prop_map(|(gap, permits, op)| Event { gap, permits, op });
    prop::collection::vec(event, 1..80)
}

fn nz(n: u64) -> Result<NonZeroU64, TestCaseError> {
    NonZeroU64::new(n).ok_or_else(|| TestCaseError::fail("zero permits"))
}

fn algorithm(index: usize) -> Result<AnyAlgorithm, TestCaseError> {
    SPECS[index]
        .parse()
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", SPECS[index])))
}

/// `admission` says what `decision` says.
fn same_answer(
    decision: &Result<sluicegate::Decision, sluicegate::CheckError>,
    admission: &Result<Admission, sluicegate::CheckError>,
) -> Result<(), TestCaseError> {
    match (decision, admission) {
        (Err(a), Err(b)) => prop_assert_eq!(a, b),
        (Ok(d), Ok(Admission::Passed)) => {
            prop_assert!(d.allowed() && d.wait_micros() == 0, "Passed, but {d:?}");
        }
        (Ok(d), Ok(Admission::Decided(a))) => prop_assert_eq!(d, a),
        (d, a) => prop_assert!(false, "decide {d:?}, admit {a:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn admit_changes_the_state_as_decide_does(
        index in 0..SPECS.len(),
        start in 0u64..10_000_000,
        events in events(),
    ) {
        let alg = algorithm(index)?;
        let mut decided = alg.initial_state(start);
        let mut admitted = decided.clone();
        let mut now = start;
        for event in &events {
            now = now.saturating_add(event.gap);
            let n = nz(event.permits)?;
            let decision = alg.decide(&mut decided, now, n, event.op);
            let admission = alg.admit(&mut admitted, now, n, event.op);
            same_answer(&decision, &admission)?;
            prop_assert_eq!(&decided, &admitted, "{} after {:?}", SPECS[index], event);
        }
    }

    #[test]
    fn a_keyed_limiter_admits_as_it_decides(
        index in 0..SPECS.len(),
        events in prop::collection::vec((events(), 0u8..3), 1..4),
    ) {
        let alg = algorithm(index)?;
        let (clock_a, clock_b) = (ManualClock::new(0), ManualClock::new(0));
        let deciding = KeyedLimiter::with_clock(alg.clone(), clock_a.clone());
        let admitting = KeyedLimiter::with_clock(alg, clock_b.clone());
        for (trace, key) in &events {
            for event in trace {
                clock_a.advance_micros(event.gap);
                clock_b.advance_micros(event.gap);
                let n = nz(event.permits)?;
                let decision = deciding.decide(key, n, event.op);
                let admission = admitting.admit(key, n, event.op);
                same_answer(&decision, &admission)?;
                prop_assert_eq!(deciding.len(), admitting.len());
            }
        }
    }
}

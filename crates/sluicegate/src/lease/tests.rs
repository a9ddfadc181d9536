//! Leases never let an algorithm grant beyond its limit: several processes share one state,
//! each granting its leases' permits at its own request times, and the grants as used,
//! replayed through the algorithm in time order, are every one allowed.

use std::num::NonZeroU64;

use proptest::prelude::*;

use super::*;
use crate::clock::Micros;
use crate::error::CheckError;
use crate::spec::{AnyAlgorithm, any::AnyState};
use crate::state_machine::{Algorithm as _, Op};

const SPECS: [&str; 7] = [
    "fixed-window:limit=7,window=10ms",
    "sliding-window:limit=9,window=12ms,buckets=4",
    "sliding-window:limit=6,window=9ms",
    "gcra:rate=1/ms,burst=5",
    "token-bucket:rate=3/2ms,burst=8",
    "leaky-bucket:rate=1/ms,capacity=4",
    "gcra:rate=1/3us,burst=4",
];

fn algorithm(spec: &str) -> AnyAlgorithm {
    spec.parse().expect("a valid spec")
}

fn one() -> NonZeroU64 {
    NonZeroU64::MIN
}

/// A process's lease in hand.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    terms: Option<LeaseTerms>,
    left: u64,
}

/// What a process does at a time.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Asks for a permit, leasing up to this many more if it has none in hand.
    Request(u64),
    /// Gives back what it holds unused and drops its lease.
    GiveBack,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0u64..12).prop_map(Step::Request),
        1 => Just(Step::GiveBack),
    ]
}

/// Runs `trace` of (time step, process, step) with leases of `life`; the grant times.
fn run(spec: &str, life: Micros, trace: &[(Micros, usize, Step)]) -> Vec<Micros> {
    let algorithm = algorithm(spec);
    let mut state = algorithm.initial_state(0);
    let mut held = [Held::default(); 4];
    let mut now = 0;
    let mut granted = Vec::new();
    for &(dt, process, step) in trace {
        now += dt;
        let hand = &mut held[process % held.len()];
        match step {
            Step::GiveBack => {
                if let Some(terms) = hand.terms.take() {
                    give_back(&algorithm, &mut state, now, &terms, hand.left);
                }
            }
            Step::Request(want) => {
                if let Some(terms) = hand.terms
                    && hand.left > 0
                    && now < terms.end
                {
                    hand.left -= 1;
                    granted.push(now);
                    continue;
                }
                let leased = take_lease(&algorithm, &mut state, now, one(), want, life)
                    .expect("a permit is within capacity");
                if leased.decision.allowed() {
                    granted.push(now);
                }
                if let Some(terms) = leased.terms {
                    *hand = Held {
                        terms: Some(terms),
                        left: terms.permits,
                    };
                }
            }
        }
    }
    granted
}

/// The first grant the algorithm would deny, replayed alone in time order.
fn first_excess(spec: &str, granted: &[Micros]) -> Option<(usize, Micros)> {
    let algorithm = algorithm(spec);
    let mut state = algorithm.initial_state(0);
    granted.iter().enumerate().find_map(|(i, &t)| {
        let decision = algorithm
            .decide(&mut state, t, one(), Op::Check)
            .expect("a permit is within capacity");
        (!decision.allowed()).then_some((i, t))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn leased_grants_never_exceed_the_limit(
        spec in proptest::sample::select(SPECS.to_vec()),
        life in 1u64..6_000,
        trace in proptest::collection::vec((0u64..1_500, 0usize..4, step()), 1..300),
    ) {
        let granted = run(spec, life, &trace);
        prop_assert_eq!(first_excess(spec, &granted), None, "{} granted {:?}", spec, granted);
    }

    #[test]
    fn without_leases_decisions_are_the_plain_checks(
        spec in proptest::sample::select(SPECS.to_vec()),
        times in proptest::collection::vec(0u64..1_500, 1..200),
    ) {
        let algorithm = algorithm(spec);
        let (mut leasing, mut plain) = (algorithm.initial_state(0), algorithm.initial_state(0));
        let mut now = 0;
        for dt in times {
            now += dt;
            let leased = take_lease(&algorithm, &mut leasing, now, one(), 0, 5_000)
                .expect("a permit is within capacity");
            let checked = algorithm.decide(&mut plain, now, one(), Op::Check)
                .expect("a permit is within capacity");
            prop_assert_eq!(leased.decision, checked);
            prop_assert_eq!(leased.terms, None);
            prop_assert_eq!(&leasing, &plain);
        }
    }
}

#[test]
fn a_window_lease_ends_with_its_window_and_comes_back_whole() -> Result<(), CheckError> {
    let fw = algorithm("fixed-window:limit=10,window=10ms");
    let mut state = fw.initial_state(0);
    let leased = take_lease(&fw, &mut state, 8_000, one(), 5, 20_000)?;
    assert_eq!(leased.decision.remaining(), 9);
    let terms = leased.terms.expect("a lease");
    assert_eq!((terms.permits, terms.end), (5, 10_000));
    assert_eq!(
        state,
        AnyState::FixedWindow(crate::state::FixedWindowState {
            window_start: 0,
            count: 6,
        })
    );
    assert_eq!(give_back(&fw, &mut state, 9_000, &terms, 3), 3);
    assert!(
        fw.decide(
            &mut state,
            9_000,
            NonZeroU64::new(7).unwrap_or(one()),
            Op::Peek
        )?
        .allowed()
    );
    // In the next window there is nothing left to give back.
    assert_eq!(give_back(&fw, &mut state, 10_000, &terms, 2), 0);
    Ok(())
}

#[test]
fn a_bucket_lease_is_charged_at_its_end_and_never_given_back() -> Result<(), CheckError> {
    // One permit per ms, a burst of 5: empty debt at 0.
    let gcra = algorithm("gcra:rate=1/ms,burst=5");
    let mut state = gcra.initial_state(0);
    let leased = take_lease(&gcra, &mut state, 0, one(), 10, 3_000)?;
    let terms = leased.terms.expect("a lease");
    // One for the request; four more fit now, but a lease usable for 2.5 ms (half the
    // tolerance) holds two. Charged as at 2 999: TAT 2 999 + 2 000, within the tolerance.
    assert_eq!((terms.permits, terms.end), (2, 3_000));
    assert_eq!(state, AnyState::Gcra(4_999));
    assert_eq!(give_back(&gcra, &mut state, 1_000, &terms, 1), 0);
    assert_eq!(state, AnyState::Gcra(4_999));
    Ok(())
}

/// A lease of a small bucket ends soon enough that its charge stays within the tolerance:
/// the others are not shut out for the lease's whole life.
#[test]
fn a_bucket_lease_ends_within_the_tolerance() -> Result<(), CheckError> {
    // 10 000/s with a burst of 20: a tolerance of 2 ms, far below a 20 ms life.
    let gcra = algorithm("gcra:rate=10000/s,burst=20");
    let mut state = gcra.initial_state(0);
    let leased = take_lease(&gcra, &mut state, 0, one(), 63, 20_000)?;
    let terms = leased.terms.expect("a lease");
    assert_eq!((terms.permits, terms.end), (10, 1_001));
    // Just after the lease's end, another caller passes.
    assert!(gcra.decide(&mut state, 1_001, one(), Op::Check)?.allowed());
    Ok(())
}

/// A later lease with a later end absorbs an earlier one's charge: giving the earlier one back
/// would uncount the later one's permits, and the key would pass more than its burst at once.
#[test]
fn a_bucket_lease_given_back_after_a_later_one_uncounts_nothing() -> Result<(), CheckError> {
    let gcra = algorithm("gcra:rate=1/ms,burst=100");
    let mut state = gcra.initial_state(0);
    let first = take_lease(&gcra, &mut state, 0, one(), 5, 20_000)?;
    let second = take_lease(&gcra, &mut state, 10_000, one(), 5, 20_000)?;
    let (first, second) = (
        first.terms.expect("a lease"),
        second.terms.expect("a lease"),
    );
    give_back(&gcra, &mut state, 11_000, &first, first.permits);
    // At the second lease's last microsecond: its permits used, and every other caller's.
    let at = second.end - 1;
    let mut others = 0;
    while gcra.decide(&mut state, at, one(), Op::Check)?.allowed() {
        others += 1;
    }
    assert!(
        others + second.permits <= 100,
        "{others} + {}",
        second.permits
    );
    Ok(())
}

#[test]
fn the_sliding_log_and_the_queue_do_not_lease() -> Result<(), CheckError> {
    for spec in [
        "sliding-log:limit=5,window=1s",
        "leaky-queue:rate=1/s,burst=3",
    ] {
        let a = algorithm(spec);
        assert_eq!(lease_kind(&a), None);
        let mut state = a.initial_state(0);
        assert_eq!(take_lease(&a, &mut state, 0, one(), 3, 1_000)?.terms, None);
    }
    Ok(())
}

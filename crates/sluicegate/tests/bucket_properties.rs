//! GCRA and the token bucket are one algorithm kept two ways: on any trace they must answer
//! alike, never grant beyond their promise, and never change state when they deny.

use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::{Algorithm, Gcra, Op, Rate, TokenBucket};

#[derive(Debug, Clone)]
struct Event {
    gap_us: u64,
    permits: u64,
    op: Op,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Check),
        1 => Just(Op::Peek),
        1 => Just(Op::Reserve { max_wait: None }),
        1 => (0u64..2_000_000).prop_map(|w| Op::Reserve { max_wait: Some(w) }),
    ]
}

fn rate() -> impl Strategy<Value = Rate> {
    // Rates that divide evenly and rates that do not (3/s, 7/min, 1000003/s is rounded).
    (
        1u64..50,
        prop_oneof![Just(1u64), Just(60), Just(7), Just(3600)],
    )
        .prop_map(|(n, secs)| Rate::new(n, Duration::from_secs(secs)).expect("valid rate"))
}

fn trace(burst: u64) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        (0u64..400_000, 1..=burst + 1, op()).prop_map(|(gap_us, permits, op)| Event {
            gap_us,
            permits,
            op,
        }),
        1..120,
    )
}

fn case() -> impl Strategy<Value = (Rate, u64, u64, Vec<Event>)> {
    (rate(), 1u64..8, 0u64..2_000_000_000_000_000)
        .prop_flat_map(|(rate, burst, start)| (Just(rate), Just(burst), Just(start), trace(burst)))
}

proptest! {
    #[test]
    fn gcra_and_token_bucket_decide_alike((rate, burst, start, events) in case()) {
        let gcra = Gcra::new(rate, burst).expect("gcra");
        let bucket = TokenBucket::new(rate, burst).expect("bucket");
        let (mut tat, mut level) = (gcra.initial_state(start), bucket.initial_state(start));
        let mut now = start;
        for event in events {
            now += event.gap_us;
            let permits = NonZeroU64::new(event.permits).expect("nonzero");
            let a = gcra.decide(&mut tat, now, permits, event.op);
            let b = bucket.decide(&mut level, now, permits, event.op);
            prop_assert_eq!(a, b, "at {} for {:?}", now, event);
        }
    }

    #[test]
    fn denials_and_peeks_change_nothing((rate, burst, start, events) in case()) {
        let gcra = Gcra::new(rate, burst).expect("gcra");
        let bucket = TokenBucket::new(rate, burst).expect("bucket");
        let (mut tat, mut level) = (gcra.initial_state(start), bucket.initial_state(start));
        let mut now = start;
        for event in events {
            now += event.gap_us;
            let permits = NonZeroU64::new(event.permits).expect("nonzero");
            let (tat_before, level_before) = (tat, level);
            let a = gcra.decide(&mut tat, now, permits, event.op);
            let b = bucket.decide(&mut level, now, permits, event.op);
            let unchanged = match a {
                Ok(d) => !d.allowed || event.op == Op::Peek,
                Err(_) => true,
            };
            if unchanged {
                prop_assert_eq!(tat, tat_before);
                prop_assert_eq!(level, level_before);
            }
            prop_assert_eq!(a.is_ok(), b.is_ok());
        }
    }

    /// Over any span of time, GCRA grants at most `burst` plus what the rate refills in that
    /// span: the promise of a token bucket.
    #[test]
    fn gcra_never_grants_beyond_burst_plus_refill((rate, burst, start, events) in case()) {
        let gcra = Gcra::new(rate, burst).expect("gcra");
        let mut tat = gcra.initial_state(start);
        let mut now = start;
        let mut granted: Vec<(u64, u64)> = Vec::new();
        for event in events {
            now += event.gap_us;
            let permits = NonZeroU64::new(event.permits).expect("nonzero");
            if let Ok(d) = gcra.decide(&mut tat, now, permits, Op::Check) {
                if d.allowed {
                    granted.push((now, event.permits));
                }
            }
        }
        let (n, period) = (u128::from(rate.permits()), u128::from(rate.period_micros()));
        for (i, &(from, _)) in granted.iter().enumerate() {
            let mut total = 0u128;
            for &(at, permits) in &granted[i..] {
                total += u128::from(permits);
                let span = u128::from(at - from);
                // total <= burst + span * n / period, without rounding.
                prop_assert!(total * period <= u128::from(burst) * period + span * n);
            }
        }
    }
}

#[test]
fn retry_after_is_exact_and_sufficient() -> Result<(), Box<dyn std::error::Error>> {
    // 3 per second: permits every 333_333.3µs. After a burst of 1, the next is due at
    // 333_333.3µs, reported rounded up to 333_334µs, and passes exactly then.
    let gcra = Gcra::new(Rate::per_second(3)?, 1)?;
    let one = NonZeroU64::MIN;
    let mut tat = gcra.initial_state(0);
    assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed);
    let denied = gcra.decide(&mut tat, 0, one, Op::Check)?;
    assert_eq!(denied.retry_after, Some(Duration::from_micros(333_334)));
    assert!(!gcra.decide(&mut tat, 333_333, one, Op::Check)?.allowed);
    assert!(gcra.decide(&mut tat, 333_334, one, Op::Check)?.allowed);
    Ok(())
}

#[test]
fn no_rounding_drift_over_many_permits() -> Result<(), Box<dyn std::error::Error>> {
    // A client that always waits exactly the reported retry_after gets its 3000th permit at
    // 3000 * 333_333.3µs = 1000 s sharp: the fractions are kept, never rounded per step. (With
    // a burst of 2 the bucket keeps the sub-microsecond slack that a late arrival brings.)
    let gcra = Gcra::new(Rate::per_second(3)?, 2)?;
    let one = NonZeroU64::MIN;
    let mut tat = gcra.initial_state(0);
    assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed);
    assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed);
    let (mut now, mut granted) = (0u64, 0);
    while granted < 3000 {
        let d = gcra.decide(&mut tat, now, one, Op::Check)?;
        if d.allowed {
            granted += 1;
        } else {
            now += d.retry_after.map_or(1, |r| r.as_micros() as u64);
        }
    }
    assert_eq!(now, 1_000_000_000);
    Ok(())
}

#[test]
fn more_than_the_burst_is_an_error_not_a_denial() -> Result<(), Box<dyn std::error::Error>> {
    let gcra = Gcra::new(Rate::per_second(10)?, 5)?;
    let mut tat = gcra.initial_state(0);
    let err = gcra
        .decide(&mut tat, 0, NonZeroU64::new(6).ok_or("6")?, Op::Check)
        .expect_err("6 > 5");
    assert!(matches!(
        err,
        sluicegate::CheckError::InsufficientCapacity {
            requested: 6,
            capacity: 5
        }
    ));
    assert!(err.to_string().contains("at most 5"));
    Ok(())
}

#[test]
fn bad_parameters_name_the_parameter() {
    let rate = Rate::per_second(1).expect("rate");
    let err = Gcra::new(rate, 0).expect_err("burst 0");
    assert!(err.to_string().contains("burst"), "{err}");
    let err = TokenBucket::with_initial(rate, 2, 3).expect_err("initial > burst");
    assert!(err.to_string().contains("initial"), "{err}");
    let err = Rate::new(0, Duration::from_secs(1)).expect_err("zero rate");
    assert!(err.to_string().contains("rate"), "{err}");
    let err = Rate::new(1, Duration::ZERO).expect_err("zero period");
    assert!(err.to_string().contains("period"), "{err}");
    // A burst spanning more time than can be counted exactly is refused, not wrapped.
    let slow = Rate::new(1, Duration::from_secs(365 * 86_400)).expect("rate");
    let err = Gcra::new(slow, u64::MAX / 2).expect_err("overflow");
    assert!(err.to_string().contains("burst"), "{err}");
}

#[test]
fn set_rate_keeps_the_fill_ratio() -> Result<(), Box<dyn std::error::Error>> {
    let one = NonZeroU64::MIN;
    let old = Gcra::new(Rate::per_second(10)?, 10)?;
    let new = Gcra::new(Rate::per_second(100)?, 100)?;
    let mut tat = old.initial_state(0);
    for _ in 0..5 {
        old.decide(&mut tat, 0, one, Op::Check)?;
    }
    old.carry_over(&new, &mut tat, 0);
    assert_eq!(new.decide(&mut tat, 0, one, Op::Peek)?.remaining, 49);
    let old = TokenBucket::new(Rate::per_second(10)?, 10)?;
    let new = TokenBucket::new(Rate::per_second(100)?, 100)?;
    let mut level = old.initial_state(0);
    for _ in 0..5 {
        old.decide(&mut level, 0, one, Op::Check)?;
    }
    old.carry_over(&new, &mut level, 0);
    assert_eq!(new.decide(&mut level, 0, one, Op::Peek)?.remaining, 49);
    Ok(())
}

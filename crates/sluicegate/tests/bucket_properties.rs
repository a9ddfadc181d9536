//! GCRA and the token bucket are one algorithm kept two ways: on any trace they must answer
//! alike, never grant beyond their promise, and never change state when they deny.

use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::state_machine::Op;
use sluicegate::{Algorithm, Gcra, Rate, TokenBucket};

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

/// Rates of every kind the buckets count differently, each with the bursts it accepts.
fn rate_and_burst() -> impl Strategy<Value = (Rate, u64)> {
    prop_oneof![
        // Paces in whole or exact fractional ticks (3/s, 7/min).
        3 => (
            1u64..50,
            prop_oneof![Just(1u64), Just(60), Just(7), Just(3600)],
            1u64..8,
        )
            .prop_map(|(n, secs, burst)| (Rate::new(n, Duration::from_secs(secs)).expect("valid rate"), burst)),
        // Rounded paces: the reduced denominator exceeds 1024 ticks per microsecond, so the
        // interval is rounded up to a 1/1024 µs tick (by under 0.1%, or the rate is refused).
        1 => (1_000_001u64..1_024_000, 1u64..8)
            .prop_map(|(n, burst)| (Rate::per_second(n).expect("rounded by under 0.1%"), burst)),
        // Permits so slow that a few reservations reach the deepest debt a bucket may run
        // (2^62 ticks): beyond it both deny the reservation alike.
        1 => (1u64..4, (1u64 << 34)..(1 << 38), 1u64..8)
            .prop_map(|(n, secs, burst)| (Rate::new(n, Duration::from_secs(secs)).expect("valid rate"), burst)),
    ]
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
    (rate_and_burst(), 0u64..2_000_000_000_000_000).prop_flat_map(|((rate, burst), start)| {
        (Just(rate), Just(burst), Just(start), trace(burst))
    })
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
                Ok(d) => !d.allowed() || event.op == Op::Peek,
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
                if d.allowed() {
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
    assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed());
    let denied = gcra.decide(&mut tat, 0, one, Op::Check)?;
    assert_eq!(denied.retry_after(), Some(Duration::from_micros(333_334)));
    assert!(!gcra.decide(&mut tat, 333_333, one, Op::Check)?.allowed());
    assert!(gcra.decide(&mut tat, 333_334, one, Op::Check)?.allowed());
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
    assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed());
    assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed());
    let (mut now, mut granted) = (0u64, 0);
    while granted < 3000 {
        let d = gcra.decide(&mut tat, now, one, Op::Check)?;
        if d.allowed() {
            granted += 1;
        } else {
            now += d.retry_after().map_or(1, |r| r.as_micros() as u64);
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
        assert!(old.decide(&mut tat, 0, one, Op::Check)?.allowed());
    }
    old.carry_over(&new, &mut tat, 0);
    assert_eq!(new.decide(&mut tat, 0, one, Op::Peek)?.remaining(), 50);
    let old = TokenBucket::new(Rate::per_second(10)?, 10)?;
    let new = TokenBucket::new(Rate::per_second(100)?, 100)?;
    let mut level = old.initial_state(0);
    for _ in 0..5 {
        assert!(old.decide(&mut level, 0, one, Op::Check)?.allowed());
    }
    old.carry_over(&new, &mut level, 0);
    assert_eq!(new.decide(&mut level, 0, one, Op::Peek)?.remaining(), 50);
    Ok(())
}

#[test]
fn the_rate_strategy_reaches_rounded_paces_and_the_deepest_debt()
-> Result<(), Box<dyn std::error::Error>> {
    // The property tests above rely on these regimes existing in their strategy's ranges.
    for permits in [1_000_001, 1_010_001, 1_023_999] {
        // Exactly 10^6 / permits µs, which no tick of 1/1024 µs (or coarser) divides: rounded.
        let pace = Rate::per_second(permits)?.pace();
        let paced = u128::from(pace.interval) * u128::from(permits);
        assert!(
            paced > 1_000_000 * u128::from(pace.ticks_per_micro),
            "{pace:?}"
        );
    }
    let slow = Rate::new(1, Duration::from_secs(1 << 37))?;
    let gcra = Gcra::new(slow, 1)?;
    let mut tat = gcra.initial_state(0);
    let reserve = Op::Reserve { max_wait: None };
    let granted = (0..40)
        .map(|_| gcra.decide(&mut tat, 0, NonZeroU64::MIN, reserve))
        .filter(|d| d.as_ref().is_ok_and(|d| d.allowed()))
        .count();
    assert!(granted < 40, "never reached the deepest debt");
    Ok(())
}

#[test]
fn reservations_beyond_the_deepest_debt_are_denied_alike() -> Result<(), Box<dyn std::error::Error>>
{
    // One permit every 2^40 s: 2^40 * 10^6 ticks each. Reservations at one instant run the
    // bucket into debt; the one that would take it past 2^62 ticks is denied by both (before,
    // the token bucket overflowed an i64 on the 9th while GCRA silently clamped).
    let rate = Rate::new(1, Duration::from_secs(1 << 40))?;
    let interval = rate.pace().interval;
    let gcra = Gcra::new(rate, 1)?;
    let bucket = TokenBucket::new(rate, 1)?;
    let (mut tat, mut level) = (gcra.initial_state(0), bucket.initial_state(0));
    let reserve = Op::Reserve { max_wait: None };
    let mut granted = 0u64;
    for _ in 0..12 {
        let (tat_before, level_before) = (tat, level);
        let a = gcra.decide(&mut tat, 0, NonZeroU64::MIN, reserve)?;
        let b = bucket.decide(&mut level, 0, NonZeroU64::MIN, reserve)?;
        assert_eq!(a, b);
        if a.allowed() {
            granted += 1;
            assert_eq!(a.wait(), Duration::from_micros((granted - 1) * interval));
        } else {
            assert_eq!((tat, level), (tat_before, level_before));
            // Exactly when the debt has shrunk enough for one more permit.
            let retry = (granted + 1) * interval - (1 << 62);
            assert_eq!(a.retry_after(), Some(Duration::from_micros(retry)));
            let (mut probe_tat, mut probe_level) = (tat, level);
            assert!(
                !gcra
                    .decide(&mut probe_tat, retry - 1, NonZeroU64::MIN, reserve)?
                    .allowed()
            );
            assert!(
                gcra.decide(&mut probe_tat, retry, NonZeroU64::MIN, reserve)?
                    .allowed()
            );
            assert!(
                bucket
                    .decide(&mut probe_level, retry, NonZeroU64::MIN, reserve)?
                    .allowed()
            );
        }
    }
    assert_eq!(granted, (1u64 << 62) / interval);
    Ok(())
}

#[test]
fn a_try_reserve_denial_reports_when_it_would_fit() -> Result<(), Box<dyn std::error::Error>> {
    // 10/s, burst 1, spent at 0: the next permit is due at 100ms. Asked with at most 30ms of
    // wait, it fits from 70ms on, which is what the denial says (not the full 100ms).
    let rate = Rate::per_second(10)?;
    let gcra = Gcra::new(rate, 1)?;
    let bucket = TokenBucket::new(rate, 1)?;
    let (mut tat, mut level) = (gcra.initial_state(0), bucket.initial_state(0));
    let one = NonZeroU64::MIN;
    assert!(gcra.decide(&mut tat, 0, one, Op::Check)?.allowed());
    assert!(bucket.decide(&mut level, 0, one, Op::Check)?.allowed());
    let patient = Op::Reserve {
        max_wait: Some(30_000),
    };
    for now in [0, 50_000] {
        let a = gcra.decide(&mut tat, now, one, patient)?;
        assert_eq!(a, bucket.decide(&mut level, now, one, patient)?);
        assert!(!a.allowed());
        assert_eq!(a.retry_after(), Some(Duration::from_micros(70_000 - now)));
    }
    assert!(
        !gcra
            .decide(&mut tat.clone(), 69_999, one, patient)?
            .allowed()
    );
    let a = gcra.decide(&mut tat, 70_000, one, patient)?;
    assert_eq!(a, bucket.decide(&mut level, 70_000, one, patient)?);
    assert_eq!((a.allowed(), a.wait()), (true, Duration::from_millis(30)));
    Ok(())
}

#[test]
fn set_rate_behind_the_last_refill_refills_once() -> Result<(), Box<dyn std::error::Error>> {
    // The bucket was last refilled at 1s; `carry_over` at an earlier time (a clock behind the
    // limiter's last decision) must not let the next decision refill [0, 1s] a second time.
    let one = NonZeroU64::MIN;
    let old = TokenBucket::new(Rate::per_second(1)?, 1)?;
    for new in [
        TokenBucket::new(Rate::per_second(1)?, 1)?,
        TokenBucket::new(Rate::per_second(3)?, 3)?,
    ] {
        let mut level = old.initial_state(0);
        assert!(old.decide(&mut level, 1_000_000, one, Op::Check)?.allowed());
        old.carry_over(&new, &mut level, 0);
        let d = new.decide(&mut level, 1_000_000, one, Op::Peek)?;
        assert!(!d.allowed(), "refilled twice: {d:?}");
        assert_eq!(d.remaining(), 0);
        assert!(
            new.decide(
                &mut level,
                2_000_000,
                NonZeroU64::new(new.limit()).ok_or("limit")?,
                Op::Peek
            )?
            .allowed()
        );
    }
    Ok(())
}

#[test]
fn set_rate_keeps_the_time_reservations_end() -> Result<(), Box<dyn std::error::Error>> {
    // 10/s, burst 1: a check and two reservations at 0 run the bucket 200ms into debt beyond
    // empty (the last reservation waits until 200ms). At 100/s the reservations made still end
    // at 200ms and the new rate refills from there: the next permit is due at 210ms.
    let one = NonZeroU64::MIN;
    let (slow, fast) = (
        Gcra::new(Rate::per_second(10)?, 1)?,
        Gcra::new(Rate::per_second(100)?, 1)?,
    );
    let mut tat = slow.initial_state(0);
    let reserve = Op::Reserve { max_wait: None };
    assert!(slow.decide(&mut tat, 0, one, Op::Check)?.allowed());
    assert_eq!(
        slow.decide(&mut tat, 0, one, reserve)?.wait(),
        Duration::from_millis(100)
    );
    assert_eq!(
        slow.decide(&mut tat, 0, one, reserve)?.wait(),
        Duration::from_millis(200)
    );
    slow.carry_over(&fast, &mut tat, 0);
    let next = fast.decide(&mut tat.clone(), 0, one, Op::Peek)?;
    assert_eq!(next.retry_after(), Some(Duration::from_millis(210)));
    assert_eq!(
        fast.decide(&mut tat, 0, one, reserve)?.wait(),
        Duration::from_millis(210)
    );
    Ok(())
}

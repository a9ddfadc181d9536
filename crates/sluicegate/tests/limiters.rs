//! Limiters around the pure algorithms: keyed memory, acquire, permits, several limits at once.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluicegate::limiter::{LimitSet, LimitTarget, decide_together};
use sluicegate::state_machine::Op;
use sluicegate::{
    CheckError, Clock, Concurrency, DirectLimiter, Gcra, KeyedLimiter, ManualClock, Rate,
    TokenBucket,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;
const ONE: NonZeroU64 = NonZeroU64::MIN;

fn n(value: u64) -> NonZeroU64 {
    NonZeroU64::new(value).expect("non-zero")
}

#[test]
fn keyed_limiter_forgets_fresh_keys_without_a_cleanup_call() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = KeyedLimiter::with_clock(Gcra::new(Rate::per_second(10)?, 1)?, clock.clone());
    for key in 0..10_000u64 {
        assert!(limiter.check(&key)?.allowed());
    }
    assert_eq!(limiter.len(), 10_000);
    // Every one of those buckets is full again after 100ms; new keys arriving make the tables
    // sweep instead of grow, so the old keys go away on their own.
    clock.advance(Duration::from_millis(100));
    for key in 10_000..30_000u64 {
        assert!(limiter.check(&key)?.allowed());
    }
    // Every shard outgrew its table while adding the new keys (about 156 old and 312 new per
    // shard, against a table of 224 or, for a shard past 224 old keys, 448), and each such
    // sweep dropped all of its old keys; the new ones are all still spending.
    for key in 0..10_000u64 {
        assert_eq!(limiter.state_of(&key), None, "old key {key} still held");
    }
    for key in 10_000..30_000u64 {
        assert!(limiter.state_of(&key).is_some(), "new key {key} dropped");
    }
    assert_eq!(limiter.len(), 20_000);
    // A forgotten key starts fresh, exactly as if it had been kept.
    assert!(limiter.check(&0)?.allowed());
    assert!(!limiter.check(&0)?.allowed());
    assert_eq!(limiter.len(), 20_001);
    Ok(())
}

#[test]
fn bucket_limiters_keep_limiting_past_2_pow_63_ticks() -> TestResult {
    // 4 * 10^18 µs is 1.2 * 10^19 ticks of 1/3 µs: past 2^63, where the word cell's lock bit
    // used to wrap the time around (and let all ten through).
    let clock = ManualClock::new(4_000_000_000_000_000_000);
    let gcra = DirectLimiter::with_clock(Gcra::new(Rate::per_second(3)?, 1)?, clock.clone());
    let bucket =
        DirectLimiter::with_clock(TokenBucket::new(Rate::per_second(3)?, 1)?, clock.clone());
    let allowed = (0..10)
        .filter(|_| gcra.check().is_ok_and(|d| d.allowed()))
        .count();
    assert_eq!(allowed, 1);
    let allowed = (0..10)
        .filter(|_| bucket.check().is_ok_and(|d| d.allowed()))
        .count();
    assert_eq!(allowed, 1);
    // And exactly: the next permit is due 333 333.3µs later.
    assert_eq!(
        gcra.check()?.retry_after(),
        Some(Duration::from_micros(333_334))
    );
    clock.advance_micros(333_333);
    assert!(!gcra.check()?.allowed());
    assert!(!bucket.check()?.allowed());
    clock.advance_micros(1);
    assert!(gcra.check()?.allowed());
    assert!(bucket.check()?.allowed());
    Ok(())
}

#[test]
fn bucket_limiters_keep_limiting_past_the_horizon() -> TestResult {
    // A clock far beyond any horizon (a custom clock counting nanoseconds, at the finest pace,
    // or simply u64::MAX): time stands still for the bucket, which grants its burst and then
    // denies. Never "no limit", never a panic.
    for start in [u64::MAX, 1_800_000_000_000_000_000] {
        let clock = ManualClock::new(start);
        // 1024 permits per 1.000001 s: ticks of 1/1024 µs, the finest pace.
        let rate = Rate::new(1024, Duration::from_micros(1_000_001))?;
        assert_eq!(rate.pace().ticks_per_micro, 1024);
        let gcra = DirectLimiter::with_clock(Gcra::new(rate, 2)?, clock.clone());
        let bucket = DirectLimiter::with_clock(TokenBucket::new(rate, 2)?, clock.clone());
        let allowed = (0..5)
            .filter(|_| gcra.check().is_ok_and(|d| d.allowed()))
            .count();
        assert_eq!(allowed, 2);
        let allowed = (0..5)
            .filter(|_| bucket.check().is_ok_and(|d| d.allowed()))
            .count();
        assert_eq!(allowed, 2);
        clock.advance_micros(1_000_000);
        assert!(!gcra.check()?.allowed());
        assert!(!bucket.check()?.allowed());
        let reserve = Op::Reserve { max_wait: None };
        assert_eq!(gcra.decide(ONE, reserve)?, bucket.decide(ONE, reserve)?);
    }
    Ok(())
}

#[test]
fn key_cap_refuses_new_keys_and_never_resets_active_ones() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = KeyedLimiter::with_clock(Gcra::new(Rate::per_hour(1)?, 1)?, clock.clone())
        .with_max_keys(64);
    assert!(limiter.check(&"victim".to_string())?.allowed());
    let mut refused = 0;
    for i in 0..10_000 {
        match limiter.check(&format!("spray-{i}")) {
            Ok(d) => assert!(d.allowed()),
            Err(CheckError::KeyCapacityReached { max_keys }) => {
                assert_eq!(max_keys, 64);
                refused += 1;
            }
            Err(other) => return Err(other.into()),
        }
    }
    assert!(refused > 9_000, "only {refused} refused");
    assert!(limiter.len() <= 64 + 64, "held {}", limiter.len());
    // The spray did not evict (and so reset) the victim's spent budget.
    assert!(!limiter.check(&"victim".to_string())?.allowed());
    // Once keys are fresh again (an hour later), new keys are admitted.
    clock.advance(Duration::from_secs(3600));
    let mut admitted = 0;
    for i in 0..1_000 {
        if limiter.check(&format!("later-{i}")).is_ok() {
            admitted += 1;
        }
    }
    assert!(admitted > 0);
    Ok(())
}

#[test]
fn peeks_and_denials_do_not_create_keys() -> TestResult {
    let limiter =
        KeyedLimiter::with_clock(Gcra::new(Rate::per_second(1)?, 1)?, ManualClock::new(0));
    let _ = limiter.peek(&1u64, ONE)?;
    assert!(limiter.is_empty());
    assert!(limiter.check_n(&1u64, n(2)).is_err());
    assert!(limiter.is_empty());
    Ok(())
}

#[test]
fn blocking_acquire_sleeps_the_reserved_wait_on_the_clock() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = DirectLimiter::with_clock(Gcra::new(Rate::per_second(4)?, 1)?, clock.clone());
    assert_eq!(limiter.acquire(ONE)?.wait(), Duration::ZERO);
    assert_eq!(limiter.acquire(ONE)?.wait(), Duration::from_millis(250));
    assert_eq!(clock.now(), 250_000);
    // Too long to wait: refused at once, nothing taken, no time passes.
    let refused = limiter.try_acquire_for(ONE, Duration::from_millis(100))?;
    assert!(!refused.allowed());
    assert_eq!(clock.now(), 250_000);
    let granted = limiter.try_acquire_for(ONE, Duration::from_millis(250))?;
    assert!(granted.allowed());
    assert_eq!(clock.now(), 500_000);
    Ok(())
}

#[test]
fn acquire_on_a_held_concurrency_limit_is_an_error_not_a_hang() -> TestResult {
    // A concurrency limit cannot be waited for by time alone: a clear error, not a hang.
    let limiter = DirectLimiter::with_clock(Concurrency::new(1)?, ManualClock::new(0));
    let _held = limiter.try_hold(ONE)?.ok_or("free")?;
    assert!(matches!(
        limiter.acquire(ONE),
        Err(CheckError::Unsupported { .. })
    ));
    Ok(())
}

#[tokio::test]
async fn async_acquire_with_a_manual_clock() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter =
        KeyedLimiter::with_clock(TokenBucket::new(Rate::per_second(2)?, 1)?, clock.clone());
    assert_eq!(
        limiter.acquire_async(&"k", ONE).await?.wait(),
        Duration::ZERO
    );
    assert_eq!(
        limiter.acquire_async(&"k", ONE).await?.wait(),
        Duration::from_millis(500)
    );
    assert_eq!(clock.now(), 500_000);
    let refused = limiter
        .try_acquire_for_async(&"k", ONE, Duration::from_millis(1))
        .await?;
    assert!(!refused.allowed());
    Ok(())
}

#[test]
fn concurrency_permits_release_on_drop() -> TestResult {
    let limiter = Arc::new(KeyedLimiter::with_clock(
        Concurrency::new(2)?,
        ManualClock::new(0),
    ));
    let a = limiter.try_hold(&"k", ONE)?.ok_or("first")?;
    let b = limiter.try_hold_owned(&"k", ONE)?.ok_or("second")?;
    assert!(limiter.try_hold(&"k", ONE)?.is_none());
    drop(a);
    let c = limiter.try_hold(&"k", ONE)?.ok_or("after release")?;
    drop((b, c));
    // Nothing held: the key is gone, not kept at zero.
    assert!(limiter.is_empty());
    Ok(())
}

#[test]
fn several_limits_are_charged_all_or_none() -> TestResult {
    let clock = ManualClock::new(0);
    let per_user = KeyedLimiter::with_clock(Gcra::new(Rate::per_second(5)?, 5)?, clock.clone());
    let global = KeyedLimiter::with_clock(Gcra::new(Rate::per_second(3)?, 3)?, clock.clone());
    let request = |user: &'static &'static str, permits: u64| {
        [
            LimitTarget {
                limiter: &per_user,
                key: user,
                permits: n(permits),
            },
            LimitTarget {
                limiter: &global,
                key: &"all",
                permits: n(permits),
            },
        ]
    };
    assert!(decide_together(&request(&"alice", 2), Op::Check)?.allowed);
    let denied = decide_together(&request(&"bob", 2), Op::Check)?;
    assert!(!denied.allowed);
    assert!(denied.decisions[0].allowed() && !denied.decisions[1].allowed());
    // Bob's own limit was not charged, and neither was the global one: each reports what it
    // has now.
    assert_eq!(denied.decisions[0].remaining(), 5);
    assert_eq!(denied.decisions[1].remaining(), 1);
    assert_eq!(per_user.peek(&"bob", ONE)?.remaining(), 5);
    assert_eq!(global.peek(&"all", ONE)?.remaining(), 1);
    assert!(decide_together(&request(&"bob", 1), Op::Check)?.allowed);
    // The same limit named twice is charged twice.
    let twice = [
        LimitTarget {
            limiter: &per_user,
            key: &"carol",
            permits: n(3),
        },
        LimitTarget {
            limiter: &per_user,
            key: &"carol",
            permits: n(3),
        },
    ];
    let denied = decide_together(&twice, Op::Check)?;
    assert!(!denied.allowed);
    // The second was denied after the first's charge, but neither was charged: both report
    // carol's 5 permits.
    assert!(denied.decisions[0].allowed() && !denied.decisions[1].allowed());
    assert_eq!(denied.decisions[0].remaining(), 5);
    assert_eq!(denied.decisions[1].remaining(), 5);
    assert_eq!(per_user.peek(&"carol", ONE)?.remaining(), 5);
    Ok(())
}

#[test]
fn set_algorithm_keeps_keyed_state() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter =
        KeyedLimiter::with_clock(TokenBucket::new(Rate::per_second(10)?, 10)?, clock.clone());
    let _ = limiter.check_n(&"k", n(10))?;
    limiter.set_algorithm(TokenBucket::new(Rate::per_second(20)?, 20)?);
    let d = limiter.peek(&"k", ONE)?;
    assert!(!d.allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_millis(50)));
    Ok(())
}

#[test]
fn a_shared_direct_limiter_changes_rate_through_a_shared_reference() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = Arc::new(DirectLimiter::with_clock(
        TokenBucket::new(Rate::per_second(10)?, 10)?,
        clock.clone(),
    ));
    let _ = limiter.check_n(n(10))?;
    let user = Arc::clone(&limiter);
    std::thread::spawn(move || -> Result<(), sluicegate::ConfigError> {
        user.set_algorithm(TokenBucket::new(Rate::per_second(20)?, 20)?);
        Ok(())
    })
    .join()
    .map_err(|_| "the thread panicked")??;
    // The spent bucket stays spent at the new rate (as the keyed limiter carries it over).
    assert_eq!(limiter.algorithm().burst(), 20);
    let d = limiter.peek(ONE)?;
    assert!(!d.allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_millis(50)));
    clock.advance(Duration::from_millis(50));
    assert!(limiter.check()?.allowed());
    Ok(())
}

#[test]
fn try_acquire_is_a_plain_yes_or_no_everywhere() -> TestResult {
    let clock = ManualClock::new(0);
    let direct = DirectLimiter::with_clock(Gcra::new(Rate::per_second(1)?, 1)?, clock.clone());
    assert!(direct.try_acquire());
    assert!(!direct.try_acquire());
    let keyed = KeyedLimiter::with_clock(Gcra::new(Rate::per_second(1)?, 1)?, clock.clone());
    assert!(keyed.try_acquire(&"a"));
    assert!(!keyed.try_acquire(&"a"));
    assert!(keyed.try_acquire(&"b"));
    let set = LimitSet::with_clock(clock.clone())
        .limit(Gcra::new(Rate::per_second(1)?, 2)?)
        .limit(sluicegate::FixedWindow::new(1, Duration::from_secs(60))?);
    assert!(set.try_acquire(&"a"));
    assert!(!set.try_acquire(&"a"));
    // A denied set took nothing from the limit that would have allowed it.
    assert_eq!(set.limits()[0].peek(&"a", ONE)?.remaining(), 1);
    clock.advance(Duration::from_secs(1));
    assert!(direct.try_acquire());
    assert!(set.check_n(&"b", ONE)?.allowed);
    Ok(())
}

#[test]
fn acquire_on_a_window_sleeps_until_the_retry_time() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = DirectLimiter::with_clock(
        sluicegate::FixedWindow::new(2, Duration::from_secs(1))?,
        clock.clone(),
    );
    let _ = limiter.acquire(ONE)?;
    let _ = limiter.acquire(ONE)?;
    assert_eq!(clock.now(), 0);
    // The window is spent: acquiring sleeps until the next one opens.
    assert!(limiter.acquire(ONE)?.allowed());
    assert_eq!(clock.now(), 1_000_000);
    // With a deadline shorter than that, nothing is taken and no time passes.
    let _ = limiter.acquire(ONE)?;
    assert!(
        !limiter
            .try_acquire_for(ONE, Duration::from_millis(999))?
            .allowed()
    );
    assert_eq!(clock.now(), 1_000_000);
    Ok(())
}

#[test]
fn at_the_cap_fresh_keys_make_room_for_every_newcomer() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = KeyedLimiter::with_clock(Gcra::new(Rate::per_second(1)?, 1)?, clock.clone())
        .with_max_keys(6_400);
    let mut held = 0;
    for key in 0..20_000u64 {
        if limiter.check(&key).is_ok() {
            held += 1;
        }
    }
    assert!(held >= 6_000, "{held}");
    // Every key is fresh a second later. A shard whose last sweep found nothing sweeps again
    // only after refusing a sixteenth of its share, so at most that many newcomers per shard
    // are turned away.
    clock.advance(Duration::from_secs(1));
    let mut refused = 0;
    for key in 100_000..106_000u64 {
        match limiter.check(&key) {
            Ok(d) => assert!(d.allowed()),
            Err(CheckError::KeyCapacityReached { .. }) => refused += 1,
            Err(other) => return Err(other.into()),
        }
    }
    assert!(refused <= 6_400 / 16, "{refused} refused");
    Ok(())
}

#[test]
fn a_sweep_during_a_multi_limit_request_never_loses_a_charge() -> TestResult {
    // One key per shard: a newcomer landing in the shard of a key that is fresh (but still
    // held) makes the table sweep that key while the request is being decided.
    for attempt in 0..512u64 {
        let clock = ManualClock::new(0);
        let limiter =
            KeyedLimiter::with_clock(Gcra::new(Rate::per_hour(1)?, 1_000)?, clock.clone())
                .with_max_keys(64);
        let _ = limiter.check_n(&0, n(1_000))?;
        clock.advance(Duration::from_secs(1_000 * 3_600));
        let targets = [
            LimitTarget {
                limiter: &limiter,
                key: &0,
                permits: ONE,
            },
            LimitTarget {
                limiter: &limiter,
                key: &(attempt + 1),
                permits: ONE,
            },
        ];
        match decide_together(&targets, Op::Check) {
            Ok(d) => {
                assert!(d.allowed);
                assert_eq!(limiter.peek(&0, ONE)?.remaining(), 999, "attempt {attempt}");
            }
            Err(CheckError::KeyCapacityReached { .. }) => {}
            Err(other) => return Err(other.into()),
        }
    }
    Ok(())
}

#[test]
fn acquire_waits_out_a_full_nginx_queue() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = DirectLimiter::with_clock(
        sluicegate::LeakyQueue::new(Rate::per_second(10)?, 0, sluicegate::QueueDelay::NoDelay)?,
        clock.clone(),
    );
    assert!(limiter.acquire(ONE)?.allowed());
    // The queue is full for 100ms: a timeout of 1s is enough, one of 50ms is not.
    assert!(
        !limiter
            .try_acquire_for(ONE, Duration::from_millis(50))?
            .allowed()
    );
    assert_eq!(clock.now(), 0);
    assert!(
        limiter
            .try_acquire_for(ONE, Duration::from_secs(1))?
            .allowed()
    );
    assert_eq!(clock.now(), 100_000);
    assert!(limiter.acquire(ONE)?.allowed());
    assert_eq!(clock.now(), 200_000);
    Ok(())
}

//! The lease table on its own, on given times: which lease a request is granted from, what is
//! held, and which shapes a sweep drops. Redis's answers are written out.

use std::num::NonZeroU64;

use sluicegate::lease::LeaseSizing;
use sluicegate::store::Now;
use sluicegate::{Decision, Micros, Rate};

use super::{LeaseConfig, LeaseReply, Leasing, Plan};
use crate::limit::RedisLimit;
use crate::reply::LimitRequest;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const LIFE: Micros = 20_000;

fn leasing(max_shapes: usize) -> Leasing {
    Leasing::new(LeaseConfig {
        sizing: LeaseSizing {
            max_per_key: 1_000,
            ..LeaseSizing::default()
        },
        max_shapes,
    })
}

fn gcra() -> Result<RedisLimit, Box<dyn std::error::Error>> {
    Ok(RedisLimit::gcra(Rate::per_second(1_000_000)?, 1_000)?)
}

fn window() -> Result<RedisLimit, Box<dyn std::error::Error>> {
    Ok(RedisLimit::fixed_window(
        1_000_000,
        std::time::Duration::from_secs(3600),
    )?)
}

fn request<'a>(limit: &'a RedisLimit, key: &'a [u8], permits: u64) -> LimitRequest<'a> {
    LimitRequest {
        limit,
        name: "n",
        key,
        permits: NonZeroU64::new(permits).unwrap_or(NonZeroU64::MIN),
    }
}

/// Redis's answer to a lease call at `at`: `leased` permits for a lease life, `given_back`
/// taken back, the request allowed.
fn reply(at: Micros, leased: u64, given_back: u64) -> LeaseReply {
    LeaseReply {
        now: at,
        leased,
        end: at + LIFE,
        given_back,
        decisions: vec![Decision::allow(1_000, 500, 0)],
    }
}

/// Redis's answer to a lease call at `at` that denied the request, which could pass `retry`
/// later, and leased nothing.
fn denied(at: Micros, retry: Micros) -> LeaseReply {
    LeaseReply {
        decisions: vec![Decision::deny(1_000, 0, 5_000, Some(retry))],
        ..reply(at, 0, 0)
    }
}

/// Asks at `at` until the shape is hot enough to lease, and takes a lease of `leased` permits
/// ending a lease life later.
fn take_lease(leasing: &Leasing, limit: &RedisLimit, key: &[u8], at: Micros, leased: u64) {
    for _ in 0..10_000 {
        let stamp = leasing.stamp(Now::At(at));
        if let Plan::Ask(asking) = leasing.plan(&[request(limit, key, 1)], stamp) {
            let want = asking.want;
            let reply = reply(at, if want > 0 { leased } else { 0 }, 0);
            let _ = asking.learn(&reply);
            if want > 0 {
                return;
            }
        }
    }
    panic!("the shape never asked for a lease");
}

fn plan_at<'a>(
    leasing: &'a Leasing,
    limit: &RedisLimit,
    key: &[u8],
    at: Micros,
    permits: u64,
) -> Plan<'a> {
    let stamp = leasing.stamp(Now::At(at));
    leasing.plan(&[request(limit, key, permits)], stamp)
}

#[test]
fn a_lease_short_for_a_large_request_stays_for_the_small_ones() -> TestResult {
    let leasing = leasing(10);
    let limit = gcra()?;
    take_lease(&leasing, &limit, b"k", 1_000, 10);
    assert_eq!(leasing.stats().permits_held, 10);
    // 20 permits: more than the lease holds; not granted from it, and it is not retired.
    let large = plan_at(&leasing, &limit, b"k", 1_001, 20);
    assert!(!matches!(large, Plan::Granted(..)));
    drop(large);
    assert!(matches!(
        plan_at(&leasing, &limit, b"k", 1_002, 1),
        Plan::Granted(..)
    ));
    assert_eq!(leasing.stats().permits_held, 9);
    Ok(())
}

#[test]
fn an_ended_window_lease_goes_back_with_the_next_lease_call() -> TestResult {
    let leasing = leasing(10);
    let limit = window()?;
    take_lease(&leasing, &limit, b"k", 1_000, 10);
    // Past its end the lease is done: its 10 permits wait to go back, still held.
    let after = 1_000 + LIFE;
    let plan = plan_at(&leasing, &limit, b"k", after, 1);
    let Plan::Ask(asking) = plan else {
        return Err("a hot shape past its lease asks for the next".into());
    };
    assert_eq!(asking.give_back.iter().map(|l| l.1).sum::<u64>(), 10);
    assert_eq!(leasing.stats().permits_held, 0);
    let reply = reply(after, 0, 10);
    let _ = asking.learn(&reply);
    assert_eq!(leasing.stats().permits_returned, 10);
    Ok(())
}

#[test]
fn idle_shapes_whose_leases_ended_are_swept_at_the_cap() -> TestResult {
    let leasing = leasing(1);
    let limit = gcra()?;
    take_lease(&leasing, &limit, b"a", 1_000, 10);
    // A second and more later, a new shape at the cap: the idle one is dropped to make room,
    // its unused permits spent.
    let later = 1_000 + LIFE + 1_000_000;
    // Its first request only records it; the second would follow it.
    drop(plan_at(&leasing, &limit, b"b", later, 1));
    assert_eq!(leasing.stats().shapes, 1);
    assert_eq!(leasing.stats().permits_held, 10);
    drop(plan_at(&leasing, &limit, b"b", later, 1));
    let stats = leasing.stats();
    assert_eq!(stats.shapes, 1);
    assert_eq!(stats.permits_held, 0);
    assert_eq!(stats.permits_expired_unused, 10);
    Ok(())
}

#[test]
fn a_shape_whose_lease_still_runs_is_not_swept() -> TestResult {
    let leasing = leasing(1);
    let limit = gcra()?;
    take_lease(&leasing, &limit, b"a", 1_000, 10);
    let during = 1_000 + LIFE - 1;
    assert!(matches!(
        plan_at(&leasing, &limit, b"b", during, 1),
        Plan::Plain
    ));
    assert_eq!(leasing.stats().permits_held, 10);
    Ok(())
}

#[test]
fn an_ended_bucket_lease_is_spent_not_given_back() -> TestResult {
    let leasing = leasing(10);
    let limit = gcra()?;
    take_lease(&leasing, &limit, b"k", 1_000, 10);
    let after = 1_000 + LIFE;
    let plan = plan_at(&leasing, &limit, b"k", after, 1);
    if let Plan::Ask(asking) = &plan {
        assert!(asking.give_back.is_empty());
    }
    drop(plan);
    let stats = leasing.stats();
    assert_eq!((stats.permits_held, stats.permits_expired_unused), (0, 10));
    Ok(())
}

#[test]
fn a_lease_asked_for_before_a_reload_is_not_kept() -> TestResult {
    let leasing = leasing(10);
    let (old, new) = (gcra()?, RedisLimit::gcra(Rate::per_second(10)?, 1)?);
    let at = 1_000;
    let asking = loop {
        match plan_at(&leasing, &old, b"k", at, 1) {
            Plan::Ask(asking) if asking.want > 0 => break asking,
            Plan::Ask(asking) => drop(asking.learn(&reply(at, 0, 0))),
            _ => {}
        }
    };
    // The rules change while the lease call is out.
    drop(plan_at(&leasing, &new, b"k", at, 1));
    let reply = reply(at, 10, 0);
    assert!(asking.learn(&reply).is_none());
    assert_eq!(leasing.stats().permits_held, 0);
    assert!(!matches!(
        plan_at(&leasing, &new, b"k", at + 1, 1),
        Plan::Granted(..)
    ));
    Ok(())
}

#[test]
fn a_shape_seen_once_is_not_followed() -> TestResult {
    let leasing = leasing(10);
    let limit = gcra()?;
    assert!(matches!(
        plan_at(&leasing, &limit, b"a", 1_000, 1),
        Plan::Plain
    ));
    assert_eq!(leasing.stats().shapes, 0);
    // Seen again within a lease life: followed from then on.
    drop(plan_at(&leasing, &limit, b"a", 1_000 + LIFE, 1));
    assert_eq!(leasing.stats().shapes, 1);
    // Seen again only after a lease life: a sighting, not followed.
    drop(plan_at(&leasing, &limit, b"b", 1_000, 1));
    drop(plan_at(&leasing, &limit, b"b", 1_000 + 4 * LIFE, 1));
    assert_eq!(leasing.stats().shapes, 1);
    Ok(())
}

#[test]
fn a_denied_shape_takes_the_plain_path_until_it_could_pass() -> TestResult {
    let leasing = leasing(10);
    let limit = gcra()?;
    let mut asked_at = None;
    for at in (1_000..).step_by(10).take(10_000) {
        if let Plan::Ask(asking) = plan_at(&leasing, &limit, b"k", at, 1) {
            assert!(asking.learn(&denied(at, 3_000)).is_none());
            asked_at = Some(at);
            break;
        }
    }
    let asked_at = asked_at.ok_or("the shape never asked Redis")?;
    // Until the request could pass (3 ms on), no lease call: the plain path.
    for at in (asked_at + 1..asked_at + 3_000).step_by(100) {
        assert!(matches!(
            plan_at(&leasing, &limit, b"k", at, 1),
            Plan::Plain
        ));
    }
    assert!(matches!(
        plan_at(&leasing, &limit, b"k", asked_at + 3_000, 1),
        Plan::Ask(_)
    ));
    Ok(())
}

#[test]
fn a_denied_shape_still_gives_back_what_waits_to_go_back() -> TestResult {
    // A window's lease in hand when Redis denies a request asked ahead; the lease then ends
    // with permits unused. The plain path would find them spent: they go back first, with a
    // call that leases nothing.
    let leasing = leasing(10);
    let limit = window()?;
    take_lease(&leasing, &limit, b"k", 1_000, 10);
    let mut denied_at = None;
    for at in 1_001..1_010 {
        match plan_at(&leasing, &limit, b"k", at, 1) {
            Plan::Granted(..) => {}
            Plan::Ask(asking) => {
                // Granted from the lease in hand all the same.
                assert!(asking.learn(&denied(at, 100_000)).is_some());
                denied_at = Some(at);
                break;
            }
            Plan::Plain => return Err("a shape with a lease in hand took the plain path".into()),
        }
    }
    let denied_at = denied_at.ok_or("the shape never asked ahead")?;
    let after = 1_000 + LIFE;
    assert!(after < denied_at + 100_000);
    let Plan::Ask(asking) = plan_at(&leasing, &limit, b"k", after, 1) else {
        return Err("unused permits waiting to go back were left out".into());
    };
    assert_eq!(asking.want, 0);
    assert!(asking.give_back.iter().map(|l| l.1).sum::<u64>() > 0);
    Ok(())
}

#[test]
fn an_idle_bucket_shapes_ended_lease_stops_counting_against_the_process() -> TestResult {
    let leasing = leasing(10);
    let limit = gcra()?;
    take_lease(&leasing, &limit, b"k", 1_000, 10);
    assert_eq!(leasing.held.load(std::sync::atomic::Ordering::Relaxed), 10);
    // The shape is not seen again; a call of another shape that asks Redis hands out the
    // ended leases, and the bucket's is retired on the way.
    let stamp = leasing.stamp(Now::At(1_000 + LIFE + 1));
    assert!(leasing.to_return(stamp).is_empty());
    assert_eq!(leasing.held.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(leasing.stats().permits_expired_unused, 10);
    Ok(())
}

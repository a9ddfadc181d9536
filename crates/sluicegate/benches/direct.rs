//! Direct (one-state) checks, ours against `governor`, in the same run.
//!
//! Each group is one case; inside it `gcra` and `token_bucket` are ours on [`SystemClock`]
//! (quanta's TSC read per check), `governor` is governor's default limiter (its default clock is
//! quanta's TSC clock too: the like-for-like pairing), `governor_instant` is governor on its
//! `Instant`-based `MonotonicClock`, `gcra_instant` is ours on a clock reading `Instant` (the
//! other like-for-like pairing) and `gcra_decide_at` is ours with the time passed in (no clock
//! read).

use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Instant;

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use governor::clock::MonotonicClock;
use governor::{Quota, RateLimiter};
use sluicegate::state_machine::Op;
use sluicegate::{Clock, DirectLimiter, Gcra, Rate, SystemClock, TokenBucket};

/// Our clock reading `Instant` (as `SystemClock` did before it moved to quanta), so the two
/// limiters can be compared on that time source too.
struct InstantMicros {
    start: Instant,
    start_unix: u64,
}

impl InstantMicros {
    fn new() -> Self {
        InstantMicros {
            start: Instant::now(),
            start_unix: SystemClock::new().now(),
        }
    }
}

impl Clock for InstantMicros {
    #[inline]
    fn now(&self) -> u64 {
        let elapsed = self.start.elapsed();
        let micros = elapsed.as_secs() * 1_000_000 + u64::from(elapsed.subsec_micros());
        self.start_unix + micros
    }
}

/// One quota in both libraries' terms.
#[derive(Clone, Copy)]
struct Quota2 {
    per_second: u32,
    burst: u32,
}

impl Quota2 {
    fn rate(self) -> Rate {
        Rate::per_second(u64::from(self.per_second)).expect("valid rate")
    }
    fn gcra(self) -> Gcra {
        Gcra::new(self.rate(), u64::from(self.burst)).expect("valid gcra")
    }
    fn token_bucket(self) -> TokenBucket {
        TokenBucket::new(self.rate(), u64::from(self.burst)).expect("valid token bucket")
    }
    fn governor(self) -> Quota {
        Quota::per_second(NonZeroU32::new(self.per_second).expect("non-zero rate"))
            .allow_burst(NonZeroU32::new(self.burst).expect("non-zero burst"))
    }
}

/// Every check passes: one permit per microsecond (exact in whole-microsecond ticks) with a
/// burst far larger than a run can drain.
const ALLOWED: Quota2 = Quota2 {
    per_second: 1_000_000,
    burst: 1_000_000_000,
};

/// Every check passes at one permit per nanosecond: our sub-microsecond tick path (1000 ticks
/// per microsecond).
const ALLOWED_FINE: Quota2 = Quota2 {
    per_second: 1_000_000_000,
    burst: 1_000,
};

/// Our limiters and governor's quota for one case.
struct Limits {
    gcra: Gcra,
    bucket: TokenBucket,
    governor: Quota,
}

impl From<Quota2> for Limits {
    fn from(quota: Quota2) -> Self {
        Limits {
            gcra: quota.gcra(),
            bucket: quota.token_bucket(),
            governor: quota.governor(),
        }
    }
}

/// One permit an hour, taken before measuring: every check is denied.
fn denied() -> Limits {
    let rate = Rate::per_hour(1).expect("valid rate");
    Limits {
        gcra: Gcra::new(rate, 1).expect("gcra"),
        bucket: TokenBucket::new(rate, 1).expect("bucket"),
        governor: Quota::per_hour(NonZeroU32::MIN),
    }
}

fn single_checks(group: &mut BenchmarkGroup<'_, WallTime>, limits: Limits, exhaust: bool) {
    let Limits {
        gcra,
        bucket,
        governor: gov,
    } = limits;
    let expect = !exhaust;

    let ours = DirectLimiter::new(gcra.clone());
    let ours_bucket = DirectLimiter::new(bucket);
    let ours_instant = DirectLimiter::with_clock(gcra.clone(), InstantMicros::new());
    let ours_at = DirectLimiter::new(gcra);
    let governor = RateLimiter::direct(gov);
    let governor_instant = RateLimiter::direct_with_clock(gov, MonotonicClock);
    if exhaust {
        let _ = ours.check();
        let _ = ours_bucket.check();
        let _ = ours_instant.check();
        let _ = ours_at.check();
        let _ = governor.check();
        let _ = governor_instant.check();
    }
    let check_ours = |d: Result<sluicegate::Decision, _>| {
        debug_assert_eq!(d.as_ref().map(|d| d.allowed()).ok(), Some(expect));
        d
    };

    group.bench_function("gcra", |b| b.iter(|| check_ours(black_box(&ours).check())));
    group.bench_function("token_bucket", |b| {
        b.iter(|| check_ours(black_box(&ours_bucket).check()))
    });
    group.bench_function("governor", |b| b.iter(|| black_box(&governor).check()));
    group.bench_function("governor_instant", |b| {
        b.iter(|| black_box(&governor_instant).check())
    });
    group.bench_function("gcra_instant", |b| {
        b.iter(|| check_ours(black_box(&ours_instant).check()))
    });
    let now = ours_at.clock().now();
    group.bench_function("gcra_decide_at", |b| {
        b.iter(|| {
            check_ours(black_box(&ours_at).decide_at(black_box(now), NonZeroU64::MIN, Op::Check))
        })
    });
    assert_eq!(ours.check().map(|d| d.allowed()).ok(), Some(expect));
    assert_eq!(governor.check().is_ok(), expect);
}

fn direct_allowed(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct_allowed");
    single_checks(&mut group, ALLOWED.into(), false);
    group.finish();
}

fn direct_denied(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct_denied");
    single_checks(&mut group, denied(), true);
    group.finish();
}

fn direct_allowed_fine_ticks(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct_allowed_fine_ticks");
    let ours = DirectLimiter::new(ALLOWED_FINE.gcra());
    let governor = RateLimiter::direct(ALLOWED_FINE.governor());
    group.bench_function("gcra", |b| b.iter(|| black_box(&ours).check()));
    group.bench_function("governor", |b| b.iter(|| black_box(&governor).check()));
    group.finish();
}

fn check_n(c: &mut Criterion) {
    let mut group = c.benchmark_group("check_n_5");
    let five = NonZeroU64::new(5).expect("five");
    let five32 = NonZeroU32::new(5).expect("five");
    let ours = DirectLimiter::new(ALLOWED.gcra());
    let ours_bucket = DirectLimiter::new(ALLOWED.token_bucket());
    let governor = RateLimiter::direct(ALLOWED.governor());
    let governor_instant = RateLimiter::direct_with_clock(ALLOWED.governor(), MonotonicClock);
    group.bench_function("gcra", |b| b.iter(|| black_box(&ours).check_n(five)));
    group.bench_function("token_bucket", |b| {
        b.iter(|| black_box(&ours_bucket).check_n(five))
    });
    group.bench_function("governor", |b| {
        b.iter(|| black_box(&governor).check_n(five32))
    });
    group.bench_function("governor_instant", |b| {
        b.iter(|| black_box(&governor_instant).check_n(five32))
    });
    group.finish();
    assert!(ours.check_n(five).map(|d| d.allowed()).unwrap_or(false));
}

criterion_group!(
    benches,
    direct_allowed,
    direct_denied,
    direct_allowed_fine_ticks,
    check_n
);
criterion_main!(benches);
